"""The generated configuration end to end: real Prometheus and Alertmanager, a webhook receiver
in place of the controller, and a target whose inter-token latency breaches the SLO and recovers.

Intervals come from the generator's parameters (1s scrapes and evaluations, a 5s quantile window,
2s ``for``), so an alert travels from a histogram to the webhook in seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from alerts.catalog import load_checked_spec
from inference import metric_names as m
from tests.alerts.cases import FAST, ROOT
from tests.alerts.stack import LOOPBACK, alert_stack, free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ALERT = "InterTokenLatencyP99High"


class SyntheticTarget:
    """An exposition of the service's inter-token-latency histogram whose latency the test sets.

    It isolates the alert pipeline (rules, routes, token, resolution) from any engine's physics;
    the service-driven test below covers the same path with real traffic.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.itl = Histogram(m.INTER_TOKEN_LATENCY, "inter-token latency",
                             buckets=m.INTER_TOKEN_LATENCY_BUCKETS, registry=self.registry)
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
    async with aiohttp.ClientSession() as session, target.serving(port), alert_stack(
        spec, FAST, [instance], tmp_path, session
    ) as stack:
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
