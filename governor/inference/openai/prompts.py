"""From a request to the prompt the engine takes, in the service's text threads.

Everything a request costs before it may wait for an engine slot happens here: reading its body,
decoding its JSON, validating it, rendering the chat template, tokenizing. All but the reading
runs in the text threads, and a large request waits for its turn before it is read at all
(:mod:`governor.inference.textwork`). The work is bounded before it starts: the body by
``--max-body-bytes``, the prompt by its length in bytes, checked before it is tokenized. A
prompt longer than ``max_model_len * max_token_bytes`` bytes cannot fit the context, whatever
tokens it would make. A small body may be screened on the event loop first, decoded but not
yet validated or tokenized (``screen``: the deadline gate's refusal on the prompt's estimated
length, which raises the 429 itself), so that a request refused there never waits for a text
thread::

    prepared = await prepare_request(request, "chat", deadline)
    prepared.params.max_tokens, len(prepared.token_ids)
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Literal, NamedTuple

from aiohttp import web

from governor.contracts.stages import Stage
from governor.inference import keys
from governor.inference.config import ServiceConfig
from governor.inference.engines.base import Engine
from governor.inference.http.body import (
    body_allowance_seconds,
    body_too_late,
    decode_json,
    read_body,
)
from governor.inference.http.errors import NOT_FOUND, UNAVAILABLE, APIError
from governor.inference.openai.protocol import (
    GenerationParams,
    parse_chat_request,
    parse_completion_request,
    prompt_too_many_bytes,
)
from governor.inference.textwork import SMALL_BODY_BYTES, TextWork

Kind = Literal["chat", "completion"]


class Decoded(NamedTuple):
    """A body decoded already (on the event loop, to screen it): :func:`prepare` takes it as it
    is rather than decoding the bytes again."""

    value: object


# Called on the event loop with a small body before it goes to a text thread: it refuses the
# request by raising (an APIError), or lets it go on, returning the body if it decoded it.
Screen = Callable[[bytes], Decoded | None]


@dataclass(frozen=True, slots=True)
class Prepared:
    """A validated request and its prompt, tokenized; ``stages``: when each of the text
    thread's stages ended (``time.perf_counter``), in order, the first the wait for the thread."""

    params: GenerationParams
    prompt: str
    token_ids: tuple[int, ...]
    prompt_bytes: int = 0
    stages: tuple[tuple[Stage, float], ...] = ()
    # The bytes of the prompt's text as the client sent it (:func:`text_bytes`).
    text_bytes: int | None = None


async def text_work_ctx(app: web.Application) -> AsyncIterator[None]:
    """The text threads, as a ``cleanup_ctx`` resource of the app."""
    app[keys.TEXT_WORK] = text = TextWork(app[keys.CONFIG].tokenizer_threads)
    yield
    text.close()


async def prepare_request(request: web.Request, kind: Kind, deadline: float,
                          screen: Screen | None = None) -> Prepared:
    """Read and :func:`prepare` one request, in its turn. Its body must arrive before the
    deadline (loop time; else a 408, the client's fault), and the turn and the threads must
    come before it too (else a 504). A request whose client goes away while it waits costs
    nothing more. With ``screen``, a body of at most :data:`SMALL_BODY_BYTES` is screened on
    the event loop (decoding it takes a fraction of a millisecond) before it waits for a
    thread."""
    app = request.app
    text, size = app[keys.TEXT_WORK], request.content_length
    clock = request[keys.STAGES]
    reading = False
    try:
        async with asyncio.timeout_at(deadline), text.turn(size, request.remote):
            clock.reach(Stage.TEXT_QUEUE)  # a large body's turn (a small one has none)
            reading = True
            raw = await read_body(request, _read_by(request, deadline))
            reading = False
            clock.reach(Stage.READ)
            body: bytes | Decoded = raw
            if screen is not None and len(raw) <= SMALL_BODY_BYTES:
                body = screen(raw) or raw
            # Read on the loop: ready is the engine's own state, not meant for threads.
            engine = app[keys.ENGINE]
            prepared = await text.run(functools.partial(
                prepare, body, kind, engine, app[keys.CONFIG], engine_ready=engine.ready))
            clock.reach_all(prepared.stages)
            return prepared
    except TimeoutError:
        if reading:  # the deadline passed while the body was still coming
            raise body_too_late() from None
        raise APIError(504, "the request was not prepared before its deadline; retry later",
                       type_=UNAVAILABLE, code="deadline_exceeded") from None


def _read_by(request: web.Request, deadline: float) -> float:
    """When the body must have arrived: by the deadline, and at the pace every body keeps
    (from now: for a large body, from when it got its turn), so that a client stalling its body
    holds neither its connection nor a turn for long."""
    config = request.app[keys.CONFIG]
    allowance = body_allowance_seconds(request.content_length, config.max_body_bytes,
                                       config.connections.body_timeout_seconds)
    return min(deadline, asyncio.get_running_loop().time() + allowance)


def prepare(
    raw: bytes | Decoded, kind: Kind, engine: Engine, config: ServiceConfig, *,
    engine_ready: bool, clock: Callable[[], float] = time.perf_counter,
) -> Prepared:
    """Decode (unless it is :class:`Decoded` already), validate, render and tokenize one
    request (CPU only; run in a text thread), stamping when each stage ends.

    Errors come in the order a client fixes them: the body (400), the model (404), the engine
    (503), the prompt's length (400 ``context_length_exceeded``).
    """
    started = clock()
    parse = parse_chat_request if kind == "chat" else parse_completion_request
    decoded = raw.value if isinstance(raw, Decoded) else decode_json(raw)
    params = parse(decoded, max_tokens_limit=config.max_tokens_limit)
    if params.model != engine.model_name:
        raise APIError(
            404, f"The model `{params.model[:200]}` does not exist.", type_=NOT_FOUND,
            param="model", code="model_not_found",
        )
    if not engine_ready:
        raise APIError(503, "the engine is not ready", type_=UNAVAILABLE,
                       code="engine_not_ready",
                       retry_after_seconds=config.admission.retry_after_seconds)
    parsed = clock()
    prompt = _render(params, engine)
    check_prompt_bytes(prompt, engine, "messages" if kind == "chat" else "prompt")
    size = utf8_size(prompt)
    rendered = clock()
    token_ids = tuple(engine.tokenize(prompt))
    return Prepared(params, prompt, token_ids, size, (
        (Stage.TEXT_QUEUE, started), (Stage.PARSE, parsed), (Stage.RENDER, rendered),
        (Stage.TOKENIZE, clock())), text_bytes(decoded, kind))


def _render(params: GenerationParams, engine: Engine) -> str:
    if params.kind == "chat":
        return engine.render_chat([message.as_dict() for message in params.messages])
    assert params.prompt is not None
    return params.prompt


def check_prompt_bytes(prompt: str, engine: Engine, param: str) -> None:
    """A 400 ``context_length_exceeded`` for a prompt too long in bytes to fit the context."""
    limit = engine.max_model_len * engine.max_token_bytes
    size = bytes_over(prompt, limit)
    if size is not None:
        raise prompt_too_many_bytes(engine.max_model_len, engine.max_token_bytes, size, param)


def utf8_size(text: str) -> int:
    """The bytes of ``text`` in UTF-8; counted without encoding when it is ASCII."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def bytes_over(text: str, limit: int) -> int | None:
    """``None`` when ``text`` takes at most ``limit`` bytes of UTF-8; else its size, or a lower
    bound of it. Encodes only when the answer is not plain: a character takes one to four
    bytes, and an ASCII string (known in O(1) on CPython) one each."""
    if len(text) > limit:
        return len(text)
    if text.isascii() or 4 * len(text) <= limit:
        return None
    size = len(text.encode("utf-8"))
    return size if size > limit else None


def text_bytes(decoded: object, kind: Kind) -> int | None:
    """The bytes of UTF-8 text in a decoded request's prompt, as the client sent it: its
    messages' contents (strings, or text parts) or its prompt string; None when the body is not
    a request of that shape (:func:`prepare` answers it 400).

    >>> text_bytes({"messages": [{"role": "user", "content": "héllo"},
    ...                          {"role": "user", "content": [{"type": "text", "text": "ab"}]}]},
    ...            "chat")
    8
    >>> text_bytes({"prompt": ["hello"]}, "completion"), text_bytes({"prompt": 3}, "completion")
    (5, None)
    """
    if not isinstance(decoded, Mapping):
        return None
    if kind == "completion":
        prompt = decoded.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        return utf8_size(prompt) if isinstance(prompt, str) else None
    messages = decoded.get("messages")
    if not isinstance(messages, list):
        return None
    total = 0
    for message in messages:
        size = _content_bytes(message.get("content") if isinstance(message, Mapping) else None)
        if size is None:
            return None
        total += size
    return total


def _content_bytes(content: object) -> int | None:
    if isinstance(content, str):
        return utf8_size(content)
    if not isinstance(content, list):
        return None
    total = 0
    for part in content:
        text = part.get("text") if isinstance(part, Mapping) else None
        if not isinstance(text, str):
            return None
        total += utf8_size(text)
    return total
