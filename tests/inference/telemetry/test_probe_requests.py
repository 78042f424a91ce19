"""Requests marked as the synthetic probe's, with the probe token, are served as any other but
counted only in ``governor_probe_requests_served_total``: never in the series the SLIs read. A
mark without the token (a guess, an empty or oversized value, the header twice, a service with no
token) is an ordinary request, counted in ``governor_probe_mark_rejected_total``, and its value
is nowhere on ``/metrics`` or in the log."""

from __future__ import annotations

import logging

import aiohttp
import pytest
from multidict import CIMultiDict

from governor.common.secrets import Secret
from governor.contracts.endpoints import CHAT_COMPLETIONS_PATH, PROBE_HEADER
from governor.contracts.metrics import service as m
from governor.contracts.stages import Stage
from governor.probe.client import Request, probe_once
from governor.probe.result import Replica
from tests.inference.conftest import Service, ServiceFactory

CHAT = {m.LABEL_ROUTE: CHAT_COMPLETIONS_PATH, m.LABEL_CODE: "200"}
TOKEN = "probe-test-token-2b9e"
SMALL = Request(prompt="Reply with one word: ok.", max_tokens=4, timeout_seconds=10,
                mark=Secret(TOKEN))
BODY = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.fixture
async def service(make_service: ServiceFactory) -> Service:
    return await make_service(probe_token=Secret(TOKEN))


def counted(service: Service) -> dict[str, float]:
    """What the SLIs read, and the probe's own counter, for the chat route."""
    def value(name: str, labels: dict[str, str]) -> float:
        return service.sample(name, labels) or 0.0

    default = {m.LABEL_MODEL: "tiny", m.LABEL_CLASS: m.DEFAULT_CLASS}
    return {
        "requests": value(m.REQUESTS.total, {**CHAT, m.LABEL_CLASS: m.DEFAULT_CLASS}),
        "duration": value(m.REQUEST_DURATION.count, {m.LABEL_ROUTE: CHAT_COMPLETIONS_PATH,
                                                     m.LABEL_CLASS: m.DEFAULT_CLASS}),
        "ttft": value(m.TIME_TO_FIRST_TOKEN.count, default),
        "itl": value(m.INTER_TOKEN_LATENCY.count, default),
        "admitted": value(m.ADMITTED_REQUESTS.total, {m.LABEL_CLASS: m.DEFAULT_CLASS}),
        # A stage observed at the first token, and one at the request's end.
        "read": value(m.REQUEST_STAGE.count, {m.LABEL_STAGE: Stage.READ.value}),
        "decode": value(m.REQUEST_STAGE.count, {m.LABEL_STAGE: Stage.DECODE.value}),
        "probe": value(m.PROBE_REQUESTS_SERVED.total, CHAT),
        "rejected": sum(value(m.PROBE_MARK_REJECTED.total, {m.LABEL_REASON: reason})
                        for reason in m.PROBE_MARK_REJECTION_REASONS),
    }


async def post(service: Service, headers: CIMultiDict[str] | dict[str, str]) -> None:
    async with aiohttp.ClientSession() as session, session.post(
            service.url + CHAT_COMPLETIONS_PATH, json=BODY, headers=headers) as response:
        assert response.status == 200


async def test_the_probe_s_requests_are_served_and_counted_apart(service: Service) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(3):
            result = await probe_once(session, Replica("inference", service.url), SMALL)
            assert result.ok, result
            assert result.ttft_seconds is not None and result.itl_seconds
    assert counted(service) == {"requests": 0.0, "duration": 0.0, "ttft": 0.0, "itl": 0.0,
                                "admitted": 0.0, "read": 0.0, "decode": 0.0, "probe": 3.0,
                                "rejected": 0.0}


async def test_an_unmarked_request_still_counts_where_it_did(service: Service) -> None:
    client = service.openai()
    stream = await client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": SMALL.prompt}], max_tokens=4,
        stream=True)
    async for _ in stream:
        pass
    seen = counted(service)
    assert seen["requests"] == seen["duration"] == seen["ttft"] == seen["admitted"] == 1.0
    assert seen["read"] == seen["decode"] == 1.0
    assert seen["itl"] > 0 and seen["probe"] == seen["rejected"] == 0.0


@pytest.mark.parametrize("value", [
    pytest.param("1", id="the old mark"),
    pytest.param("", id="empty"),
    pytest.param(TOKEN[:-1], id="a prefix of the token"),
    pytest.param(TOKEN + "x", id="the token and more"),
    pytest.param(TOKEN.upper(), id="another case"),
    pytest.param("x" * 8000, id="oversized"),
    pytest.param("t\u00f6ken\u2603", id="not ASCII"),
])
async def test_a_mark_without_the_token_is_an_ordinary_request(
        service: Service, value: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    await post(service, {PROBE_HEADER: value})
    seen = counted(service)
    assert (seen["requests"], seen["probe"]) == (1.0, 0.0)
    assert service.sample(m.PROBE_MARK_REJECTED.total,
                          {m.LABEL_REASON: m.REASON_WRONG_TOKEN}) == 1.0
    async with aiohttp.ClientSession() as session, \
            session.get(service.url + "/metrics") as response:
        exposition = await response.text()
    if len(value) > 3:  # "1" and "" are in any exposition
        assert value not in exposition and value not in caplog.text


async def test_the_token_twice_or_beside_another_value_is_refused(service: Service) -> None:
    """A proxy appending its own header must not let a client's value ride along."""
    for values in ([TOKEN, TOKEN], ["guess", TOKEN], [TOKEN, "guess"]):
        await post(service, CIMultiDict((PROBE_HEADER, v) for v in values))
    seen = counted(service)
    assert (seen["requests"], seen["probe"], seen["rejected"]) == (3.0, 0.0, 3.0)


async def test_the_token_with_surrounding_blanks_and_any_header_case_marks(
        service: Service) -> None:
    await post(service, {"X-GOVERNOR-PROBE": f" {TOKEN} "})
    seen = counted(service)
    assert (seen["requests"], seen["probe"], seen["rejected"]) == (0.0, 1.0, 0.0)


async def test_a_service_without_a_probe_token_counts_every_marked_request(
        make_service: ServiceFactory) -> None:
    service = await make_service()  # no probe_token
    async with aiohttp.ClientSession() as session:
        result = await probe_once(session, Replica("inference", service.url), SMALL)
    assert result.ok, result
    seen = counted(service)
    assert (seen["requests"], seen["ttft"], seen["probe"]) == (1.0, 1.0, 0.0)
    # The probe's two requests: GET /v1/models (it names no model) and the completion.
    assert service.sample(m.PROBE_MARK_REJECTED.total,
                          {m.LABEL_REASON: m.REASON_NO_TOKEN}) == 2.0


async def test_a_probe_without_a_token_sends_no_mark(service: Service) -> None:
    unmarked = Request(SMALL.prompt, SMALL.max_tokens, SMALL.timeout_seconds)
    async with aiohttp.ClientSession() as session:
        result = await probe_once(session, Replica("inference", service.url), unmarked)
    assert result.ok, result
    seen = counted(service)
    assert (seen["requests"], seen["probe"], seen["rejected"]) == (1.0, 0.0, 0.0)
