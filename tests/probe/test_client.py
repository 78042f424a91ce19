"""One probe request against targets that misbehave, each a real HTTP server: every failure is
a result with its reason, never an exception, a hang or a credential in a log line."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from prometheus_client import CollectorRegistry

from governor.common.secrets import Secret
from governor.contracts.endpoints import CHAT_COMPLETIONS_PATH, PROBE_HEADER
from governor.contracts.metrics import probe as m
from governor.probe.client import MAX_RESPONSE_BYTES, Request, probe_once
from governor.probe.metrics import ProbeMetrics
from governor.probe.result import ProbeResult, Replica

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ServerFactory = Callable[..., Awaitable[TestServer]]
MARK = "probe-mark-token-90af"
REQUEST = Request(prompt="Reply with one word: ok.", max_tokens=4, timeout_seconds=2.0,
                  mark=Secret(MARK))
KEY = "sk-probe-key-5c1d"


def chunk(text: str) -> bytes:
    event = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta":
                                                             {"content": text}}]}
    return f"data: {json.dumps(event)}\n\n".encode()


async def stream(request: web.Request, *parts: bytes, delay: float = 0.0) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for part in parts:
        if delay:
            await asyncio.sleep(delay)
        await response.write(part)
    await response.write_eof()
    return response


async def models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": "tiny", "object": "model"}]})


@pytest.fixture
async def target(aiohttp_server: ServerFactory) -> Callable[[Handler], Awaitable[Replica]]:
    async def make(handler: Handler, **replica: str) -> Replica:
        app = web.Application()
        app.router.add_post(CHAT_COMPLETIONS_PATH, handler)
        app.router.add_get("/v1/models", models)
        server = await aiohttp_server(app)
        return Replica("inference", str(server.make_url("")).rstrip("/"), **replica)

    return make


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as made:
        yield made


async def test_a_good_stream_gives_its_first_token_and_gaps(
        target: Callable[..., Awaitable[Replica]], session: aiohttp.ClientSession) -> None:
    seen: list[dict[str, object]] = []

    async def good(request: web.Request) -> web.StreamResponse:
        seen.append({"body": await request.json(), "mark": request.headers.get(PROBE_HEADER)})
        return await stream(request, chunk("o"), chunk("k"), chunk("."), b"data: [DONE]\n\n",
                            delay=0.05)

    result = await probe_once(session, await target(good), REQUEST)
    assert result.ok and result.ttft_seconds is not None and result.ttft_seconds >= 0.04
    assert len(result.itl_seconds) == 2 and min(result.itl_seconds) >= 0.04
    (sent,) = seen
    assert sent["mark"] == MARK
    body = sent["body"]
    assert isinstance(body, dict)
    assert (body["model"], body["max_tokens"], body["stream"]) == ("tiny", 4, True)


@pytest.mark.parametrize(("parts", "result", "reason"), [
    pytest.param((chunk("ok"),), m.RESULT_STREAM, "without data: [DONE]", id="no [DONE]"),
    pytest.param((b"data: [DONE]\n\n",), m.RESULT_STREAM, "no token", id="no token"),
    pytest.param((b"data: {not json\n\n",), m.RESULT_STREAM, "not JSON", id="garbage"),
    pytest.param((b"data: [1, 2]\n\n",), m.RESULT_STREAM, "not a JSON object", id="a list"),
    pytest.param((b'data: {"error": {"message": "boom"}}\n\n',), m.RESULT_STREAM,
                 "reported an error", id="an error event"),
    pytest.param((b"data: " + b"x" * (128 * 1024) + b"\n\n",), m.RESULT_STREAM, "over",
                 id="a huge line"),
    pytest.param((chunk("ok") * (MAX_RESPONSE_BYTES // 60 + 10),), m.RESULT_STREAM,
                 "bytes of stream", id="an endless answer"),
])
async def test_a_broken_stream_is_a_bad_stream(
        target: Callable[..., Awaitable[Replica]], session: aiohttp.ClientSession,
        parts: tuple[bytes, ...], result: str, reason: str) -> None:
    async def broken(request: web.Request) -> web.StreamResponse:
        return await stream(request, *parts)

    got = await probe_once(session, await target(broken), REQUEST)
    assert (got.result, reason in got.detail) == (result, True), got


async def test_an_error_status_is_an_http_error(
        target: Callable[..., Awaitable[Replica]], session: aiohttp.ClientSession) -> None:
    async def overloaded(request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "busy"}}, status=503)

    got = await probe_once(session, await target(overloaded), REQUEST)
    assert (got.result, got.detail) == (m.RESULT_HTTP, f"HTTP 503 from {CHAT_COMPLETIONS_PATH}")


async def test_a_redirect_is_not_followed(
        target: Callable[..., Awaitable[Replica]], session: aiohttp.ClientSession) -> None:
    """The probe sends only where the spec says: a 3xx elsewhere is a failure, not a hop."""
    async def elsewhere(request: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect("http://169.254.169.254/latest/meta-data/")

    got = await probe_once(session, await target(elsewhere), REQUEST)
    assert (got.result, got.detail) == (m.RESULT_HTTP, f"HTTP 307 from {CHAT_COMPLETIONS_PATH}")


async def test_a_target_that_stalls_is_a_timeout_within_the_limit(
        target: Callable[..., Awaitable[Replica]], session: aiohttp.ClientSession) -> None:
    async def stalls(request: web.Request) -> web.StreamResponse:
        return await stream(request, chunk("o"), chunk("k"), delay=5.0)

    loop = asyncio.get_running_loop()
    started = loop.time()
    got = await probe_once(session, await target(stalls),
                           Request(REQUEST.prompt, REQUEST.max_tokens, timeout_seconds=0.3))
    assert got.result == m.RESULT_TIMEOUT and loop.time() - started < 2.0


async def test_nothing_listening_is_a_connection_error(session: aiohttp.ClientSession) -> None:
    from governor.common.process import free_port

    got = await probe_once(session, Replica("inference", f"http://127.0.0.1:{free_port()}"),
                           REQUEST)
    assert got.result == m.RESULT_CONNECTION


async def test_the_api_key_is_sent_from_its_file_and_never_logged(
        target: Callable[..., Awaitable[Replica]], session: aiohttp.ClientSession,
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A server that requires a key (vLLM's --api-key) gets it as a bearer token; the key
    appears in no result, log line or series, whether it is right or wrong."""
    async def guarded(request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {KEY}":
            return web.json_response({"error": {"message": "unauthorized"}}, status=401)
        return await stream(request, chunk("o"), chunk("k"), b"data: [DONE]\n\n")

    key_file = tmp_path / "api_key"
    key_file.write_text(KEY + "\n", encoding="utf-8")
    registry = CollectorRegistry()
    results: list[ProbeResult] = []
    with caplog.at_level(logging.DEBUG):
        without = await target(guarded)
        results.append(await probe_once(session, without, REQUEST))
        keyed = await target(guarded, api_key_file=str(key_file))
        results.append(await probe_once(session, keyed, REQUEST))
        key_file.write_text("sk-rotated-wrong\n", encoding="utf-8")  # re-read at each probe
        results.append(await probe_once(session, keyed, REQUEST))
        key_file.unlink()
        results.append(await probe_once(session, keyed, REQUEST))
        metrics = ProbeMetrics(registry, [keyed], 15.0)
        for result in results:
            metrics.observe(keyed, result, 0.0)
    assert [r.result for r in results] == [m.RESULT_HTTP, m.RESULT_SUCCESS, m.RESULT_HTTP,
                                           m.RESULT_CONNECTION]
    assert str(key_file) in results[3].detail
    from prometheus_client import generate_latest
    everything = repr(results) + caplog.text + generate_latest(registry).decode()
    assert KEY not in everything and "rotated" not in everything and MARK not in everything


async def test_without_a_token_no_mark_is_sent(
        target: Callable[..., Awaitable[Replica]], session: aiohttp.ClientSession) -> None:
    marks: list[list[str]] = []

    async def good(request: web.Request) -> web.StreamResponse:
        marks.append(request.headers.getall(PROBE_HEADER, []))
        return await stream(request, chunk("o"), chunk("k"), b"data: [DONE]\n\n")

    unmarked = Request(REQUEST.prompt, REQUEST.max_tokens, REQUEST.timeout_seconds)
    assert (await probe_once(session, await target(good), unmarked)).ok
    assert marks == [[]]


async def _serving(aiohttp_server: ServerFactory, chat: Handler, listed: Handler) -> Replica:
    """A replica answering chats with ``chat`` and ``GET /v1/models`` with ``listed``."""
    app = web.Application()
    app.router.add_post(CHAT_COMPLETIONS_PATH, chat)
    app.router.add_get("/v1/models", listed)
    server = await aiohttp_server(app)
    return Replica("inference", str(server.make_url("")).rstrip("/"))


async def test_the_model_is_asked_once_and_again_after_a_failure(
        aiohttp_server: ServerFactory, session: aiohttp.ClientSession) -> None:
    asked: list[str] = []
    fail = [False]

    async def listed(request: web.Request) -> web.Response:
        asked.append(request.path)
        return await models(request)

    async def chat(request: web.Request) -> web.StreamResponse:
        if fail[0]:
            return web.json_response({"error": {"message": "down"}}, status=503)
        return await stream(request, chunk("o"), chunk("k"), b"data: [DONE]\n\n")

    replica = await _serving(aiohttp_server, chat, listed)
    remembered: dict[str, str] = {}
    for failing in (False, False, True, False, False):
        fail[0] = failing
        result = await probe_once(session, replica, REQUEST, models=remembered)
        assert result.ok != failing
    assert len(asked) == 2  # the first probe, and the first after the failure


@pytest.mark.parametrize("models_answer", [
    pytest.param({"object": "list", "data": [{"id": "tiny", "object": "model"}]}, id="one model"),
    pytest.param({"object": "list", "data": [{"id": "tiny", "object": "model"}] + [
        {"id": f"adapter-{i:04d}", "object": "model", "root": "tiny"} for i in range(1500)]},
        id="a list past 64 KiB"),
])
async def test_a_model_list_sent_in_small_pieces_is_read_whole(
        aiohttp_server: ServerFactory, session: aiohttp.ClientSession,
        models_answer: dict[str, object]) -> None:
    """Issue 32, N1 in the probe: ``GET /v1/models`` in 16-byte pieces 2 ms apart (each write
    its own network send) is read to its end, and the first model it lists is probed."""
    raw = json.dumps(models_answer).encode()
    pieces = [raw[start:start + 16] for start in range(0, len(raw), 16)]
    bodies: list[object] = []

    async def listed(request: web.Request) -> web.StreamResponse:
        return await stream(request, *pieces, delay=0.002 if len(pieces) < 100 else 0.0)

    async def chat(request: web.Request) -> web.StreamResponse:
        bodies.append(await request.json())
        return await stream(request, chunk("o"), chunk("k"), b"data: [DONE]\n\n")

    replica = await _serving(aiohttp_server, chat, listed)
    result = await probe_once(session, replica, REQUEST)
    assert result.ok, result
    assert [body["model"] for body in bodies if isinstance(body, dict)] == ["tiny"]


async def test_a_model_list_past_its_bound_is_refused_by_name(
        aiohttp_server: ServerFactory, session: aiohttp.ClientSession) -> None:
    async def endless(request: web.Request) -> web.StreamResponse:
        return await stream(request, b'{"data": [' + b" " * (MAX_RESPONSE_BYTES + 1) + b"]}")

    app = web.Application()
    app.router.add_get("/v1/models", endless)
    server = await aiohttp_server(app)
    got = await probe_once(session, Replica("inference", str(server.make_url("")).rstrip("/")),
                           REQUEST)
    assert (got.result, got.detail) == (
        m.RESULT_STREAM, f"/v1/models: the answer is larger than {MAX_RESPONSE_BYTES} bytes")
