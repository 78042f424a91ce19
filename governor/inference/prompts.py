"""From a request body to the prompt the engine takes, in threads of the service's own.

Everything a request costs before it may wait for an engine slot happens here: decoding its
JSON, validating it, rendering the chat template, tokenizing. A 4 MiB body takes milliseconds
to seconds of that, and on the event loop it would stall every stream meanwhile, so it runs in
a small pool of threads (``--tokenizer-threads``), apart from the loop's default executor that
renders ``/metrics``. The work is bounded before it starts: the body by ``--max-body-bytes``,
and the prompt by its length in bytes, checked before it is tokenized. A prompt longer than
``max_model_len * max_token_bytes`` bytes cannot fit the context, whatever tokens it would
make::

    prepared = await prepare_in_pool(app, raw_body, "chat", deadline)
    prepared.params.max_tokens, len(prepared.token_ids)
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

from aiohttp import web

from governor.inference import keys
from governor.inference.body import decode_json
from governor.inference.config import ServiceConfig
from governor.inference.engines.base import Engine
from governor.inference.errors import NOT_FOUND, UNAVAILABLE, APIError
from governor.inference.protocol import (
    GenerationParams,
    parse_chat_request,
    parse_completion_request,
    prompt_too_many_bytes,
)

Kind = Literal["chat", "completion"]
# The text threads' names, as a thread dump or a profiler shows them.
TEXT_THREAD_PREFIX = "governor-text"


@dataclass(frozen=True, slots=True)
class Prepared:
    """A validated request and its prompt, tokenized."""

    params: GenerationParams
    prompt: str
    token_ids: tuple[int, ...]


async def text_pool_ctx(app: web.Application) -> AsyncIterator[None]:
    """The text threads, as a ``cleanup_ctx`` resource of the app."""
    pool = ThreadPoolExecutor(max_workers=app[keys.CONFIG].tokenizer_threads,
                              thread_name_prefix=TEXT_THREAD_PREFIX)
    app[keys.TEXT_POOL] = pool
    yield
    # Queued work belongs to requests that are gone; running work ends on its own (bounded).
    pool.shutdown(wait=False, cancel_futures=True)


async def prepare_in_pool(
    app: web.Application, raw: bytes, kind: Kind, deadline: float | None = None
) -> Prepared:
    """:func:`prepare` in the text threads. Waiting for them counts against the request's
    deadline (loop time): past it, a 504. A request whose client goes away while its work is
    still queued leaves the queue without costing anything."""
    engine = app[keys.ENGINE]
    # Read on the loop: ready is the engine's own state, not meant for other threads.
    ready = engine.ready
    work: Callable[[], Prepared] = functools.partial(
        prepare, raw, kind, engine, app[keys.CONFIG], engine_ready=ready)
    try:
        async with asyncio.timeout_at(deadline):
            return await asyncio.get_running_loop().run_in_executor(app[keys.TEXT_POOL], work)
    except TimeoutError:
        raise APIError(504, "the request was not prepared before its deadline; retry later",
                       type_=UNAVAILABLE, code="deadline_exceeded") from None


def prepare(
    raw: bytes, kind: Kind, engine: Engine, config: ServiceConfig, *, engine_ready: bool
) -> Prepared:
    """Decode, validate, render and tokenize one request (CPU only; run in a text thread).

    Errors come in the order a client fixes them: the body (400), the model (404), the engine
    (503), the prompt's length (400 ``context_length_exceeded``).
    """
    parse = parse_chat_request if kind == "chat" else parse_completion_request
    params = parse(decode_json(raw), max_tokens_limit=config.max_tokens_limit)
    if params.model != engine.model_name:
        raise APIError(
            404, f"The model `{params.model[:200]}` does not exist.", type_=NOT_FOUND,
            param="model", code="model_not_found",
        )
    if not engine_ready:
        raise APIError(503, "the engine is not ready", type_=UNAVAILABLE,
                       code="engine_not_ready",
                       retry_after_seconds=config.admission.retry_after_seconds)
    prompt = _render(params, engine)
    check_prompt_bytes(prompt, engine, "messages" if kind == "chat" else "prompt")
    return Prepared(params, prompt, tuple(engine.tokenize(prompt)))


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
