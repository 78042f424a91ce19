"""One probe request: a small streaming chat completion, timed as a client sees it.

The request carries the probe token in :data:`~governor.contracts.endpoints.PROBE_HEADER`
(governor serve checks it, and leaves the request out of its own series) and, for a target that
requires one, the API key from the target's file as a bearer token; the key is read at each probe
(a rotated file is picked up). Neither appears in a log line, a label or an error. The whole
exchange, connection to ``[DONE]``, is bounded by the timeout, and what is read by
:data:`MAX_RESPONSE_BYTES`::

    result = await probe_once(session, Replica("inference", "http://127.0.0.1:8000"),
                              Request(prompt="Reply with one word: ok.", max_tokens=8,
                                      timeout_seconds=5))
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import aiohttp
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong

from governor.common import answers
from governor.common.secrets import Secret
from governor.contracts.endpoints import CHAT_COMPLETIONS_PATH, PROBE_HEADER
from governor.contracts.metrics.probe import (
    RESULT_CONNECTION,
    RESULT_HTTP,
    RESULT_STREAM,
    RESULT_SUCCESS,
    RESULT_TIMEOUT,
)
from governor.probe.result import ProbeResult, Replica

MODELS_PATH: Final = "/v1/models"
# A probe's answer is a few tokens: a server that streams more than this is not answering it.
MAX_RESPONSE_BYTES: Final = 1 << 20
MAX_LINE_BYTES: Final = 64 * 1024


@dataclass(frozen=True)
class Request:
    prompt: str
    max_tokens: int
    timeout_seconds: float
    # The probe token, sent as the mark governor serve checks; None sends no mark.
    mark: Secret | None = None


class _Failed(Exception):
    def __init__(self, result: str, detail: str) -> None:
        super().__init__(detail)
        self.result, self.detail = result, detail


def headers(replica: Replica, mark: Secret | None = None) -> dict[str, str]:
    """The probe's mark (its token) when it has one, and the API key when the target has a key
    file (re-read each time)."""
    out = {} if mark is None else {PROBE_HEADER: mark.reveal()}
    if replica.api_key_file is not None:
        try:
            key = Secret.from_file(replica.api_key_file)
        except (OSError, ValueError) as exc:
            # The message names the file, never its content (Secret's errors do not quote it).
            raise _Failed(RESULT_CONNECTION, f"cannot read the API key file "
                                             f"{replica.api_key_file}: "
                                             f"{getattr(exc, 'strerror', None) or exc}") from None
        out["Authorization"] = f"Bearer {key.reveal()}"
    return out


async def probe_once(session: aiohttp.ClientSession, replica: Replica, request: Request,
                     clock: Callable[[], float] = time.perf_counter,
                     models: dict[str, str] | None = None) -> ProbeResult:
    """Send one probe and say what happened; never raises for anything the target does.

    ``models`` remembers each replica's model (URL → name) when the spec names none, so that
    ``GET /v1/models`` is asked once, not at every probe; a failed probe forgets it (the
    replica may serve another model when it comes back)."""
    models = {} if models is None else models
    result = await _guarded(session, replica, request, clock, models)
    if not result.ok:
        models.pop(replica.url, None)
    return result


async def _guarded(session: aiohttp.ClientSession, replica: Replica, request: Request,
                   clock: Callable[[], float], models: dict[str, str]) -> ProbeResult:
    try:
        async with asyncio.timeout(request.timeout_seconds):
            return await _exchange(session, replica, request, clock, models)
    except TimeoutError:
        return ProbeResult(RESULT_TIMEOUT, detail=f"no answer within {request.timeout_seconds:g}s")
    except _Failed as failed:
        return ProbeResult(failed.result, detail=failed.detail)
    except (aiohttp.ClientError, HttpProcessingError) as exc:
        # What the server sent is not HTTP, or the connection broke.
        return ProbeResult(RESULT_CONNECTION, detail=type(exc).__name__ + _short(exc))
    except OSError as exc:
        return ProbeResult(RESULT_CONNECTION, detail=exc.strerror or type(exc).__name__)


def _short(exc: BaseException) -> str:
    text = str(exc)
    return f": {text[:200]}" if text else ""


async def _exchange(session: aiohttp.ClientSession, replica: Replica, request: Request,
                    clock: Callable[[], float], models: dict[str, str]) -> ProbeResult:
    sent = headers(replica, request.mark)
    model = replica.model or models.get(replica.url)
    if model is None:
        model = models[replica.url] = await _first_model(session, replica, sent)
    body = {"model": model, "messages": [{"role": "user", "content": request.prompt}],
            "max_tokens": request.max_tokens, "stream": True, "temperature": 0}
    start = clock()
    async with session.post(replica.url + CHAT_COMPLETIONS_PATH, json=body, headers=sent,
                            allow_redirects=False) as response:
        if response.status != 200:
            raise _Failed(RESULT_HTTP, f"HTTP {response.status} from {CHAT_COMPLETIONS_PATH}")
        return await _read_stream(response, start, clock)


async def _first_model(session: aiohttp.ClientSession, replica: Replica,
                       sent: dict[str, str]) -> str:
    """The target's first model, when the spec names none (``GET /v1/models``, read whole up
    to :data:`MAX_RESPONSE_BYTES`: a list arrives in as many network reads as it takes)."""
    async with session.get(replica.url + MODELS_PATH, headers=sent,
                           allow_redirects=False) as response:
        if response.status != 200:
            raise _Failed(RESULT_HTTP, f"HTTP {response.status} from {MODELS_PATH}")
        try:
            listed = answers.loads(await answers.read_whole(response, MAX_RESPONSE_BYTES))
        except answers.AnswerError as exc:
            raise _Failed(RESULT_STREAM, f"{MODELS_PATH}: {exc}") from None
    try:
        model = listed["data"][0]["id"]
    except (KeyError, IndexError, TypeError):
        raise _Failed(RESULT_STREAM, f"{MODELS_PATH} did not list a model") from None
    if not isinstance(model, str) or not model:
        raise _Failed(RESULT_STREAM, f"{MODELS_PATH} did not list a model")
    return model


async def _read_stream(response: aiohttp.ClientResponse, start: float,
                       clock: Callable[[], float]) -> ProbeResult:
    """Server-sent events until ``data: [DONE]``: the time of each chunk that carries text."""
    times: list[float] = []
    read = 0
    while True:
        try:
            line = await response.content.readuntil(b"\n", max_size=MAX_LINE_BYTES)
        except (ValueError, LineTooLong):  # a line past the bound: not OpenAI's stream
            raise _Failed(RESULT_STREAM, f"a line of the stream is over {MAX_LINE_BYTES} "
                                         "bytes") from None
        read += len(line)
        if read > MAX_RESPONSE_BYTES:
            raise _Failed(RESULT_STREAM, f"more than {MAX_RESPONSE_BYTES} bytes of stream")
        if not line:
            raise _Failed(RESULT_STREAM, "the stream ended without data: [DONE]")
        text = line.strip()
        if not text.startswith(b"data:"):
            continue
        data = text[5:].strip()
        if data == b"[DONE]":
            break
        if _has_text(data):
            times.append(clock())
    if not times:
        raise _Failed(RESULT_STREAM, "the stream carried no token")
    gaps = tuple(b - a for a, b in itertools.pairwise(times))
    return ProbeResult(RESULT_SUCCESS, times[0] - start, gaps)


def _has_text(data: bytes) -> bool:
    """Whether one event is a chunk with generated text (a chat delta or a completion's)."""
    try:
        chunk = json.loads(data)
    except ValueError:
        raise _Failed(RESULT_STREAM, "an event of the stream is not JSON") from None
    if not isinstance(chunk, dict):
        raise _Failed(RESULT_STREAM, "an event of the stream is not a JSON object")
    if "error" in chunk:
        raise _Failed(RESULT_STREAM, "the stream reported an error")
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        return False
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        content = delta.get("content") if isinstance(delta, dict) else choice.get("text")
        if isinstance(content, str) and content:
            return True
    return False
