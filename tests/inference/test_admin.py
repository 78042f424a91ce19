"""The admin batching API: bearer-protected, bounded, live, visible on /metrics, never logged."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import aiohttp
import pytest

from governor.contracts.batching import BatchingLimits
from governor.contracts.metrics import service as svc
from tests.inference.conftest import ADMIN_TOKEN, Service, ServiceFactory

AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


async def call(service: Service, method: str, body: Any = None,
               headers: dict[str, str] | None = None, data: bytes | None = None
               ) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as session, session.request(
        method, f"{service.url}/admin/batching", json=body, data=data, headers=headers
    ) as response:
        return response.status, await response.json()


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="no Authorization header"),
        pytest.param({"Authorization": "Bearer wrong"}, id="a wrong token"),
        pytest.param({"Authorization": ADMIN_TOKEN}, id="the token without a scheme"),
        pytest.param({"Authorization": f"Basic {ADMIN_TOKEN}"}, id="the wrong scheme"),
        pytest.param({"Authorization": f"Bearer {ADMIN_TOKEN}x"}, id="a token with a suffix"),
        pytest.param({"Authorization": "Bearer " + "A" * 8000}, id="an oversized token"),
    ],
)
async def test_without_the_right_token_it_is_401(service: Service, headers: dict[str, str]) -> None:
    for method in ("GET", "PUT"):
        status, body = await call(service, method, {"max_num_seqs": 2}, headers)
        assert status == 401
        assert body["error"]["type"] == "authentication_error"


async def raw_exchange(service: Service, request: bytes) -> bytes:
    """Send ``request`` as it is, byte for byte; the whole answer (the service closes after it
    or the read times out)."""
    port = service.server.port
    assert port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")))
        return head + await asyncio.wait_for(reader.readexactly(length), 5)
    finally:
        writer.close()


@pytest.mark.parametrize(
    "credential",
    [
        pytest.param(b"Bearer \xff", id="a byte that is never UTF-8"),
        pytest.param(b"\xff\xfe", id="bytes without a scheme"),
        pytest.param(b"Bearer " + ADMIN_TOKEN.encode() + b"\xc3", id="the token, cut UTF-8 after"),
        pytest.param(b"Bearer \xed\xa0\x80", id="a UTF-16 surrogate in UTF-8"),
        pytest.param(b"Bearer \xc0\xaf" * 500, id="overlong encodings, many"),
    ],
)
async def test_bytes_that_are_not_utf8_in_the_token_are_a_401_never_a_500(
    service: Service, credential: bytes,
) -> None:
    """No client may make the service answer 5xx, least of all without a token."""
    for method in (b"GET", b"PUT"):
        answer = await raw_exchange(service, method + b" /admin/batching HTTP/1.1\r\nHost: x\r\n"
                                    b"Authorization: " + credential + b"\r\n"
                                    b"Content-Length: 2\r\n\r\n{}")
        assert answer.startswith(b"HTTP/1.1 401 "), answer[:200]
        error = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
        assert (error["type"], error["code"]) == ("authentication_error", "invalid_api_key")
    assert service.sample(svc.REQUESTS.total, {"route": "/admin/batching", "code": "401",
                                               "class": svc.UNCLASSIFIED}) == 2.0
    assert service.sample(svc.REQUESTS.total, {"route": "/admin/batching", "code": "500",
                                               "class": svc.UNCLASSIFIED}) is None


async def test_get_reports_limits_floor_and_ceiling(service: Service) -> None:
    status, body = await call(service, "GET", headers=AUTH)
    assert status == 200
    assert set(body) == {"max_num_seqs", "max_num_batched_tokens", "floor", "ceiling"}
    assert body["max_num_seqs"] == body["ceiling"]["max_num_seqs"]


async def test_put_applies_live_and_shows_on_metrics(service: Service) -> None:
    _, before = await call(service, "GET", headers=AUTH)
    wanted = {"max_num_seqs": before["floor"]["max_num_seqs"] + 1,
              "max_num_batched_tokens": before["floor"]["max_num_batched_tokens"]}
    status, body = await call(service, "PUT", wanted, AUTH)
    assert status == 200
    assert {k: body[k] for k in wanted} == wanted
    assert service.engine.limits.max_num_seqs == wanted["max_num_seqs"]
    assert service.sample("governor_batching_limit", {"param": "max_num_seqs"}) == float(
        wanted["max_num_seqs"])
    async with aiohttp.ClientSession() as session, session.get(f"{service.url}/metrics") as r:
        text = await r.text()
    assert f'governor_batching_limit{{param="max_num_batched_tokens"}} ' \
           f'{float(wanted["max_num_batched_tokens"])}' in text
    # A partial update keeps the other limit.
    status, body = await call(service, "PUT", {"max_num_seqs": before["max_num_seqs"]}, AUTH)
    assert status == 200
    assert body["max_num_batched_tokens"] == wanted["max_num_batched_tokens"]


@pytest.mark.parametrize(
    ("body", "status"),
    [
        pytest.param({"max_num_seqs": 0}, 422, id="below the floor"),
        pytest.param({"max_num_seqs": 10**9}, 422, id="above the ceiling"),
        pytest.param({"max_num_batched_tokens": 1}, 422, id="a budget below the floor"),
        pytest.param({"max_num_seqs": "8"}, 400, id="a string"),
        pytest.param({"max_num_seqs": 8.0}, 400, id="a float"),
        pytest.param({"max_num_seqs": True}, 400, id="a boolean"),
        pytest.param({"max_num_seqs": None}, 400, id="a null"),
        pytest.param({"max_running": 8}, 400, id="an unknown field"),
        pytest.param({}, 400, id="no field at all"),
        pytest.param([8, 512], 400, id="a list"),
    ],
)
async def test_bad_puts_change_nothing(service: Service, body: Any, status: int) -> None:
    before = service.engine.limits
    code, payload = await call(service, "PUT", body, AUTH)
    assert code == status
    assert "error" in payload
    assert service.engine.limits == before


async def test_malformed_json_is_400(service: Service) -> None:
    code, _ = await call(service, "PUT", headers=AUTH, data=b"{max_num_seqs: 8")
    assert code == 400


async def test_the_token_never_reaches_logs_or_metrics(
    make_service: ServiceFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    service = await make_service()
    await call(service, "PUT", {"max_num_seqs": 2}, AUTH)
    await call(service, "PUT", {"max_num_seqs": 2}, {"Authorization": "Bearer guessed-token"})
    async with aiohttp.ClientSession() as session, session.get(f"{service.url}/metrics") as r:
        exposition = await r.text()
    assert ADMIN_TOKEN not in caplog.text
    assert "guessed-token" not in caplog.text
    assert ADMIN_TOKEN not in exposition
    assert "batching limits" in caplog.text


async def test_without_a_configured_token_the_admin_api_is_closed(
    make_service: ServiceFactory,
) -> None:
    service = await make_service(admin_token=None)
    status, body = await call(service, "GET", headers={"Authorization": "Bearer "})
    assert status == 401
    assert "disabled" in body["error"]["message"]


async def test_two_partial_puts_at_once_both_hold(
    service: Service, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A PUT of one field and a PUT of the other, racing while the engine takes 0.1 s to apply
    each (as vLLM's engine core does): both answer 200 and both changes are in force."""
    engine = service.engine
    apply = engine.set_limits

    async def slow(limits: BatchingLimits) -> BatchingLimits:
        await asyncio.sleep(0.1)
        return await apply(limits)

    monkeypatch.setattr(engine, "set_limits", slow)
    floor = engine.floor
    seqs, budget = floor.max_num_seqs + 6, floor.max_num_batched_tokens + 44
    (a, _), (b, answer) = await asyncio.gather(
        call(service, "PUT", {"max_num_seqs": seqs}, AUTH),
        call(service, "PUT", {"max_num_batched_tokens": budget}, AUTH))
    assert (a, b) == (200, 200)
    assert engine.limits == BatchingLimits(seqs, budget)
    assert (answer["max_num_seqs"], answer["max_num_batched_tokens"]) == (seqs, budget)


async def test_a_5000_digit_limit_is_a_clear_400(service: Service) -> None:
    code, payload = await call(service, "PUT", headers=AUTH,
                               data=b'{"max_num_seqs": ' + b"9" * 5000 + b"}")
    assert code == 400
    assert "error" in payload
