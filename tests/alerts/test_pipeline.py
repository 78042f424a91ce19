"""The generated configuration end to end: real Prometheus and Alertmanager, a webhook receiver
in place of the controller, and a target whose inter-token latency breaches the SLO and recovers.

Intervals come from the generator's parameters (1s scrapes and evaluations, a 5s quantile window,
2s ``for``), so an alert travels from a histogram to the webhook in seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from governor.common.process import Child
from governor.contracts.metrics import service as svc
from governor.generation.catalog import load_checked_spec
from tests.alerts.cases import FAST, ROOT
from tests.alerts.stack import LOOPBACK, READY_SECONDS, alert_stack, free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ALERT = "InterTokenLatencyP99High"


class SyntheticTarget:
    """An exposition of the service's inter-token-latency histogram whose latency the test sets.

    It isolates the alert pipeline (rules, routes, token, resolution) from any engine's physics;
    the service-driven test below covers the same path with real traffic.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.itl = Histogram(svc.INTER_TOKEN_LATENCY.name, "inter-token latency",
                             buckets=svc.INTER_TOKEN_LATENCY.buckets, registry=self.registry)
        self.latency_seconds = 0.01

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry),
                            content_type="text/plain", charset="utf-8")

    async def observe(self) -> None:
        while True:
            for _ in range(20):
                self.itl.observe(self.latency_seconds)
            await asyncio.sleep(0.1)

    @contextlib.asynccontextmanager
    async def serving(self, port: int) -> AsyncIterator[None]:
        app = web.Application()
        app.router.add_get("/metrics", self.metrics)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, LOOPBACK, port).start()
        task = asyncio.create_task(self.observe())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await runner.cleanup()


async def test_a_latency_breach_reaches_the_controller_webhook_then_resolves(
    tmp_path: Path,
) -> None:
    spec = load_checked_spec(ROOT / "slo.yaml")
    target, port = SyntheticTarget(), free_port()
    instance = f"{LOOPBACK}:{port}"
    async with target.serving(port), alert_stack(spec, FAST, [instance], tmp_path) as stack:
        try:
            await asyncio.sleep(4)  # a few healthy scrapes first: nothing may fire
            assert stack.receiver.alerts_named(ALERT, "firing") == []

            target.latency_seconds = 0.2  # every token 200 ms apart: far over 120 ms
            async with asyncio.timeout(40):
                firing = await stack.receiver.wait_for(ALERT, "firing")
            assert firing["labels"] == {
                "alertname": ALERT, "slo": "inter-token-latency", "severity": "control",
                "service": "inference", "team": "inference", "instance": instance,
            }
            note = next(n for n in stack.receiver.notifications
                        if firing in n["alerts"])
            assert note["receiver"] == "controller"
            assert note["groupLabels"] == {"alertname": ALERT, "slo": "inter-token-latency",
                                           "instance": instance}

            target.latency_seconds = 0.01
            async with asyncio.timeout(40):
                resolved = await stack.receiver.wait_for(ALERT, "resolved")
            assert resolved["fingerprint"] == firing["fingerprint"]
            assert resolved["endsAt"] > resolved["startsAt"]
            assert stack.receiver.rejected == 0  # Alertmanager sent the bearer token
        except (AssertionError, TimeoutError):
            print(stack.logs(), "\nnotifications:", stack.receiver.notifications)
            raise


# ---- the real service on the simulated engine --------------------------------------------------


@contextlib.asynccontextmanager
async def sim_service(port: int, workdir: Path) -> AsyncIterator[str]:
    """``governor serve --engine sim`` (llama-3-8b@h200 preset, real time); yields its URL."""
    url = f"http://{LOOPBACK}:{port}"
    with Child("inference", [
        sys.executable, "-m", "governor", "serve", "--engine", "sim", "--host", LOOPBACK,
        "--port", str(port), "--log-level", "warning",
    ], url + "/health", workdir / "inference.log", cwd=ROOT) as service:
        await service.wait_healthy_async(READY_SECONDS)
        yield url


class Load:
    """Chat streams that keep decoding, plus, when ``prefill_rate`` is set, long unique prompts.

    Each long prompt (~7000 tokens, unique so prefix caching cannot skip it) fills a step with a
    prefill chunk, stretching the gap between tokens of every stream decoding in that step: with
    the default 8192-token budget, two a second push the p99 inter-token latency from ~15 ms to
    ~200 ms on the llama-3-8b@h200 preset, the physics the controller exploits.
    """

    def __init__(self, session: aiohttp.ClientSession, url: str, model: str) -> None:
        self.session, self.url, self.model = session, url, model
        self.prefill_rate = 0.0
        self.statuses: list[int] = []
        self._rng = random.Random(7)

    async def _chat(self, content: str, max_tokens: int) -> None:
        body: dict[str, Any] = {"model": self.model, "max_tokens": max_tokens, "stream": True,
                                "messages": [{"role": "user", "content": content}]}
        async with self.session.post(self.url + "/v1/chat/completions", json=body) as response:
            async for _ in response.content:
                pass
            self.statuses.append(response.status)

    async def _decoder(self) -> None:
        while True:
            await self._chat("translate this sentence into another language " * 40, 256)

    def _long_prompt(self) -> str:
        # Words of up to six letters are one token each for the sim's tokenizer.
        letters = "abcdefghijklmnopqrstuvwxyz"
        return " ".join("".join(self._rng.choices(letters, k=5)) for _ in range(7000))

    async def _prefills(self) -> None:
        pending: set[asyncio.Task[None]] = set()
        while True:
            if self.prefill_rate > 0:
                task = asyncio.create_task(self._chat(self._long_prompt(), 1))
                pending.add(task)
                task.add_done_callback(pending.discard)
                await asyncio.sleep(1 / self.prefill_rate)
            else:
                await asyncio.sleep(0.1)

    @contextlib.asynccontextmanager
    async def running(self, decoders: int) -> AsyncIterator[None]:
        tasks = [asyncio.create_task(self._decoder()) for _ in range(decoders)]
        tasks.append(asyncio.create_task(self._prefills()))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def _query(session: aiohttp.ClientSession, prometheus: str, expr: str) -> list[Any]:
    async with session.get(prometheus + "/api/v1/query", params={"query": expr}) as response:
        result: list[Any] = (await response.json())["data"]["result"]
        return result


async def test_the_sim_service_breaching_its_itl_slo_alerts_the_controller_then_resolves(
    tmp_path: Path,
) -> None:
    spec = load_checked_spec(ROOT / "slo.yaml")
    port = free_port()
    instance = f"{LOOPBACK}:{port}"
    async with aiohttp.ClientSession() as session, sim_service(port, tmp_path) as url:
        async with session.get(url + "/v1/models") as response:
            model = (await response.json())["data"][0]["id"]
        load = Load(session, url, model)
        async with alert_stack(spec, FAST, [instance], tmp_path) as stack, \
                load.running(decoders=4):
            try:
                await asyncio.sleep(6)  # steady decoding: the tail stays far under 120 ms
                assert stack.receiver.alerts_named(ALERT, "firing") == []

                load.prefill_rate = 2.0
                async with asyncio.timeout(60):
                    firing = await stack.receiver.wait_for(ALERT, "firing")
                assert firing["labels"]["instance"] == instance
                assert firing["labels"]["severity"] == "control"
                assert firing["labels"]["slo"] == "inter-token-latency"
                # The SLO's own recording rules see the same breach in the service's series.
                bad = await _query(session, stack.prometheus_url,
                                   'slo:sli_error:ratio_rate5m{slo="inter-token-latency"} > 0')
                assert bad, "the 5m error ratio of the ITL SLO should be above zero"

                load.prefill_rate = 0.0
                async with asyncio.timeout(60):
                    resolved = await stack.receiver.wait_for(ALERT, "resolved")
                assert resolved["fingerprint"] == firing["fingerprint"]
                assert stack.receiver.rejected == 0
                assert set(load.statuses) == {200}
            except (AssertionError, TimeoutError):
                print(stack.logs(), "\nnotifications:", stack.receiver.notifications)
                raise
