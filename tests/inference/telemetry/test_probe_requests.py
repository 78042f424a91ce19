"""Requests marked as the synthetic probe's are served as any other but counted only in
``governor_probe_requests_served_total``: never in the series the SLIs read."""

from __future__ import annotations

import aiohttp

from governor.contracts.endpoints import CHAT_COMPLETIONS_PATH, PROBE_HEADER
from governor.contracts.metrics import service as m
from governor.contracts.stages import Stage
from governor.probe.client import Request, probe_once
from governor.probe.result import Replica
from tests.inference.conftest import Service

CHAT = {m.LABEL_ROUTE: CHAT_COMPLETIONS_PATH, m.LABEL_CODE: "200"}
SMALL = Request(prompt="Reply with one word: ok.", max_tokens=4, timeout_seconds=10)


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
    }


async def test_the_probe_s_requests_are_served_and_counted_apart(service: Service) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(3):
            result = await probe_once(session, Replica("inference", service.url), SMALL)
            assert result.ok, result
            assert result.ttft_seconds is not None and result.itl_seconds
    assert counted(service) == {"requests": 0.0, "duration": 0.0, "ttft": 0.0, "itl": 0.0,
                                "admitted": 0.0, "read": 0.0, "decode": 0.0, "probe": 3.0}


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
    assert seen["itl"] > 0 and seen["probe"] == 0.0


async def test_only_the_exact_mark_is_the_probe_s(service: Service) -> None:
    """A header with another value is an ordinary request: the mark is not a prefix match."""
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    async with aiohttp.ClientSession() as session:
        for value in ("0", "yes", "11", "1" * 5000):
            async with session.post(service.url + CHAT_COMPLETIONS_PATH, json=body,
                                    headers={PROBE_HEADER: value}) as response:
                assert response.status == 200
    seen = counted(service)
    assert seen["requests"] == 4.0 and seen["probe"] == 0.0
