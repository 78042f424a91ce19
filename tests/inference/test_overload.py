"""Overload: the bounded queue answers 429 with Retry-After, and nothing accepted is lost."""

from __future__ import annotations

import asyncio

import aiohttp

from governor.inference.config import AdmissionSettings
from tests.inference.conftest import ServiceFactory


async def test_a_burst_beyond_the_queue_gets_429_and_every_accepted_request_finishes(
    make_service: ServiceFactory,
) -> None:
    service = await make_service(admission=AdmissionSettings(max_in_flight=2, max_queue=3))
    body = {"model": service.engine.model_name, "max_tokens": 40, "stream": True,
            "messages": [{"role": "user", "content": "please translate this sentence"}]}

    async def one(session: aiohttp.ClientSession) -> tuple[int, str | None, bool]:
        async with session.post(f"{service.url}/v1/chat/completions", json=body) as response:
            text = await response.text()
            return response.status, response.headers.get("Retry-After"), "[DONE]" in text

    async with aiohttp.ClientSession() as session:
        results = await asyncio.gather(*(one(session) for _ in range(20)))
    accepted = [r for r in results if r[0] == 200]
    rejected = [r for r in results if r[0] == 429]
    assert len(accepted) + len(rejected) == 20
    assert len(accepted) >= 5
    assert rejected
    assert all(done for _, _, done in accepted)
    assert all(retry == "1" for _, retry, _ in rejected)
    assert service.sample("governor_admission_rejections_total",
                          {"reason": "queue_full", "class": "default"}) == len(rejected)
    assert service.sample("governor_queue_depth") == 0.0
    assert service.sample("governor_requests_in_flight") == 0.0


async def test_a_wait_longer_than_the_queue_timeout_gets_503(make_service: ServiceFactory) -> None:
    service = await make_service(admission=AdmissionSettings(
        max_in_flight=1, max_queue=4, queue_timeout_seconds=0.05))
    slow = {"model": service.engine.model_name, "max_tokens": 200, "ignore_eos": True,
            "messages": [{"role": "user", "content": "a long answer please"}]}
    async with aiohttp.ClientSession() as session:
        first = asyncio.create_task(session.post(f"{service.url}/v1/chat/completions", json=slow))
        await asyncio.sleep(0.02)
        async with session.post(f"{service.url}/v1/chat/completions", json=slow) as second:
            assert second.status == 503
            assert second.headers["Retry-After"] == "1"
        response = await first
        assert response.status == 200
        response.release()
