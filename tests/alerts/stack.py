"""Real Prometheus and Alertmanager processes on free ports, and a webhook receiver standing in
for the controller, for the alert pipeline's integration tests."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from governor.alerts.alertmanager import alertmanager_args
from governor.alerts.prometheus_config import prometheus_args
from governor.alerts.render import ALERTMANAGER_CONFIG, PROMETHEUS_CONFIG, render_all, write_all
from governor.common import process
from governor.common.process import Child
from governor.common.secrets import Secret
from governor.generation.params import Endpoints, RenderParams
from governor.slo.spec import SloSpec

LOOPBACK = "127.0.0.1"
READY_SECONDS = 30.0  # each child's limit to answer its health URL
LOG_LINES = 40  # of each child's log in a failure report


def free_port() -> int:
    return process.free_port(LOOPBACK)


def logs(children: Sequence[Child]) -> str:
    """The end of every child's log, for a failing test to print."""
    return "\n".join(f"--- {child.name}\n{child.tail(LOG_LINES)}" for child in children)


@dataclass
class WebhookReceiver:
    """The controller's ``POST /alerts`` as Alertmanager sees it: bearer-protected, recording
    every notification. It also answers ``/metrics`` so the controller scrape job is up."""

    token: Secret
    notifications: list[dict[str, Any]] = field(default_factory=list)
    rejected: int = 0
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def alerts(self, request: web.Request) -> web.Response:
        if not self.token.matches_bearer(request.headers.get("Authorization")):
            self.rejected += 1
            return web.json_response({"error": "unauthorized"}, status=401)
        self.notifications.append(json.loads(await request.read()))
        self.arrived.set()
        return web.json_response({"status": "recorded"})

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(text="# an empty exposition\n")

    def alerts_named(self, alertname: str, status: str) -> list[dict[str, Any]]:
        return [alert for note in self.notifications for alert in note["alerts"]
                if alert["labels"].get("alertname") == alertname and alert["status"] == status]

    async def wait_for(self, alertname: str, status: str) -> dict[str, Any]:
        """The first ``status`` notification of ``alertname`` (bound it with asyncio.timeout)."""
        while not (found := self.alerts_named(alertname, status)):
            self.arrived.clear()
            await self.arrived.wait()
        return found[0]

    @contextlib.asynccontextmanager
    async def serving(self, port: int) -> AsyncIterator[None]:
        app = web.Application()
        app.router.add_post("/alerts", self.alerts)
        app.router.add_get("/metrics", self.metrics)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, LOOPBACK, port).start()
        try:
            yield
        finally:
            await runner.cleanup()


@dataclass
class Stack:
    prometheus_url: str
    alertmanager_url: str
    receiver: WebhookReceiver
    processes: list[Child]

    def logs(self) -> str:
        return logs(self.processes)


@contextlib.asynccontextmanager
async def alert_stack(
    spec: SloSpec, params: RenderParams, inference: Sequence[str], workdir: Path,
) -> AsyncIterator[Stack]:
    """Generated configuration → Alertmanager, Prometheus and the webhook receiver, running."""
    token = Secret("pipeline-test-token")
    token_file = workdir / "controller-token"
    token_file.write_text(token.reveal() + "\n", encoding="utf-8")
    ports = {name: free_port() for name in ("prometheus", "alertmanager", "controller")}
    endpoints = Endpoints(inference=tuple(inference), exporter=(),
                          controller=(f"{LOOPBACK}:{ports['controller']}",),
                          alertmanager=(f"{LOOPBACK}:{ports['alertmanager']}",))
    params = RenderParams(**{**params.__dict__, "controller_token_file": str(token_file)})
    deploy = workdir / "deploy"
    write_all(render_all(spec, endpoints, params), deploy)
    receiver = WebhookReceiver(token)
    urls = {name: f"http://{LOOPBACK}:{ports[name]}" for name in ports}
    am_flags = alertmanager_args(config_file=str(deploy / ALERTMANAGER_CONFIG),
                                 storage_path=str(workdir / "alertmanager-data"),
                                 listen_address=f"{LOOPBACK}:{ports['alertmanager']}")
    alertmanager = Child("alertmanager", ["prometheus-alertmanager", *am_flags],
                         urls["alertmanager"] + "/-/ready", workdir / "alertmanager.log")
    prometheus = Child("prometheus", ["prometheus", *prometheus_args(
        spec, params, config_file=str(deploy / PROMETHEUS_CONFIG),
        storage_path=str(workdir / "prometheus-data"),
        listen_address=f"{LOOPBACK}:{ports['prometheus']}",
    )], urls["prometheus"] + "/-/ready", workdir / "prometheus.log")
    async with receiver.serving(ports["controller"]):
        with alertmanager, prometheus:  # both start, then each is waited for; stopped in reverse
            await alertmanager.wait_healthy_async(READY_SECONDS)
            await prometheus.wait_healthy_async(READY_SECONDS)
            yield Stack(urls["prometheus"], urls["alertmanager"], receiver,
                        [alertmanager, prometheus])
