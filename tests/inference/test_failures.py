"""How engine failures reach the client: the right status, OpenAI's body, the server lives on."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import aiohttp
import openai
import pytest

from governor.inference.engines.base import EngineError, EngineErrorKind
from tests.inference.conftest import ADMIN_TOKEN, Service
from tests.support.scripted import Script

MakeScripted = Callable[..., Awaitable[Service]]
CHAT = {"model": "scripted", "messages": [{"role": "user", "content": "a b c"}], "max_tokens": 4}


async def post(service: Service, body: object, path: str = "/v1/chat/completions"
               ) -> tuple[int, dict[str, object], dict[str, str]]:
    async with aiohttp.ClientSession() as session, session.post(
        f"{service.url}{path}", json=body
    ) as response:
        return response.status, await response.json(), dict(response.headers)


@pytest.mark.parametrize(
    ("kind", "status"),
    [
        pytest.param(EngineErrorKind.INVALID_REQUEST, 400, id="an invalid request is a 400"),
        pytest.param(EngineErrorKind.OVERLOADED, 503, id="an overloaded engine is a 503"),
        pytest.param(EngineErrorKind.DEAD, 503, id="a dead engine is a 503"),
    ],
)
async def test_an_engine_refusal_before_the_first_token_gets_its_status(
    scripted: MakeScripted, kind: EngineErrorKind, status: int
) -> None:
    service = await scripted(Script(fail_before_first=EngineError(kind, "refused", param="x")))
    for stream in (False, True):
        code, body, headers = await post(service, {**CHAT, "stream": stream})
        assert code == status
        error = body["error"]
        assert isinstance(error, dict)
        assert error["message"] == "refused"
        if status == 503:
            assert headers["Retry-After"] == "1"


async def test_a_failure_mid_stream_ends_the_stream_with_an_error_event(
    scripted: MakeScripted,
) -> None:
    service = await scripted(Script(fail_after_tokens=2))
    async with aiohttp.ClientSession() as session, session.post(
        f"{service.url}/v1/chat/completions", json={**CHAT, "stream": True}
    ) as response:
        assert response.status == 200
        text = (await response.read()).decode()
    events = [line[6:] for line in text.split("\n\n") if line.startswith("data: ")]
    assert '"w1"' in text or " w1" in text
    assert '"error"' in events[-2]
    assert events[-1] == "[DONE]"
    # The engine died: a server error for the availability SLI, as it would be before the
    # first token (503), not the 200 of the status line; and its slot is free again.
    assert service.sample("governor_requests_total", {
        "route": "/v1/chat/completions", "code": "503", "class": "default"}) == 1.0
    assert service.sample("governor_requests_total", {
        "route": "/v1/chat/completions", "code": "200", "class": "default"}) is None
    assert service.sample("governor_requests_in_flight") == 0.0


async def test_a_failure_mid_stream_reaches_the_openai_client_as_an_error(
    scripted: MakeScripted,
) -> None:
    service = await scripted(Script(fail_after_tokens=1))
    client = service.openai()
    stream = await client.chat.completions.create(
        model="scripted", messages=[{"role": "user", "content": "x"}], max_tokens=4, stream=True)
    with pytest.raises(openai.APIError, match="engine core died"):
        async for _ in stream:
            pass


async def test_an_engine_that_is_not_ready_answers_503(scripted: MakeScripted) -> None:
    service = await scripted(Script(ready=False))
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{service.url}/health") as response:
            assert response.status == 503
        async with session.post(f"{service.url}/v1/chat/completions", json=CHAT) as response:
            assert response.status == 503
            assert "Retry-After" in response.headers


async def test_an_engine_that_cannot_retune_answers_501(scripted: MakeScripted) -> None:
    service = await scripted(Script(retune_error=EngineError(
        EngineErrorKind.UNSUPPORTED, "this vLLM has no retuning hooks")))
    async with aiohttp.ClientSession() as session, session.put(
        f"{service.url}/admin/batching", json={"max_num_seqs": 2},
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
    ) as response:
        assert response.status == 501
        body = await response.json()
        assert "retuning hooks" in body["error"]["message"]
    assert service.sample("governor_batching_changes_total", {"result": "failed"}) == 1.0


async def test_the_log_line_of_a_failed_request_carries_its_trace_id(
    scripted: MakeScripted,
) -> None:
    """A line logged while a traced request is served names the caller's trace."""
    import io
    import json
    import logging

    from governor.common.logs import setup_logging

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    stream = io.StringIO()
    setup_logging("info", fmt="json", stream=stream)
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    try:
        service = await scripted(Script(fail_after_tokens=2))
        async with aiohttp.ClientSession() as session, session.post(
            f"{service.url}/v1/chat/completions", json={**CHAT, "stream": True},
            headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"},
        ) as response:
            await response.read()
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    failed = [line for line in lines if "failed mid-stream" in line["message"]]
    assert failed and failed[0]["trace_id"] == trace_id


async def test_an_engine_that_fails_to_start_reports_its_root_cause(
    aiohttp_server: Callable[..., Awaitable[object]],
) -> None:
    """`governor serve` stops on it (exit 3) so that compose and Kubernetes can restart it."""
    import asyncio

    from governor.inference.app import create_app
    from governor.inference.config import ServiceConfig
    from tests.support.scripted import ScriptedEngine

    try:
        try:
            raise FileNotFoundError("no weights in /models/llama")
        except FileNotFoundError as inner:
            raise RuntimeError("Engine core initialization failed") from inner
    except RuntimeError as outer:
        failure = outer
    engine = ScriptedEngine(Script(fail_start=failure))
    causes: list[str] = []
    app = create_app(ServiceConfig(), engine_factory=lambda _c, _r: engine, env={},
                     on_engine_failure=causes.append)
    await aiohttp_server(app)
    for _ in range(100):
        if causes:
            break
        await asyncio.sleep(0.01)
    assert causes == ["FileNotFoundError: no weights in /models/llama"]


async def test_without_a_failure_handler_the_service_stays_up_and_says_503(
    scripted: MakeScripted,
) -> None:
    service = await scripted(Script(fail_start=RuntimeError("boom")))
    async with aiohttp.ClientSession() as session, session.get(f"{service.url}/health") as r:
        assert r.status == 503
