"""The probe's process: one probe loop per replica, and ``/metrics`` and ``/health`` on aiohttp.

``create_app(config)`` never reads argv; the HTTP client session and the probe loops live in one
cleanup context each, started with the app and stopped before it closes. The app is built with
its registry, clock and random source injected, so tests read its series directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Callable

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from governor.contracts.endpoints import HEALTH_PATH, METRICS_PATH
from governor.contracts.metrics.probe import RESULT_CONNECTION
from governor.probe.client import Request, probe_once
from governor.probe.config import ProbeConfig
from governor.probe.metrics import ProbeMetrics
from governor.probe.result import ProbeResult, Replica
from governor.probe.runner import run_replica

log = logging.getLogger("probe")

CONFIG = web.AppKey("config", ProbeConfig)
REGISTRY = web.AppKey("registry", CollectorRegistry)
METRICS = web.AppKey("metrics", ProbeMetrics)
RNG = web.AppKey("rng", random.Random)
WALL: web.AppKey[Callable[[], float]] = web.AppKey("wall")


def create_app(config: ProbeConfig, *, registry: CollectorRegistry | None = None,
               rng: random.Random | None = None,
               wall: Callable[[], float] = time.time) -> web.Application:
    app = web.Application()
    app[CONFIG] = config
    app[REGISTRY] = registry = registry or CollectorRegistry()
    app[METRICS] = ProbeMetrics(registry, config.replicas(), config.settings.interval_seconds)
    app[RNG] = rng or random.Random()  # jitter, not a secret
    app[WALL] = wall
    app.cleanup_ctx.append(_probing)
    app.router.add_get(METRICS_PATH, metrics)
    app.router.add_get(HEALTH_PATH, health)
    return app


async def _probing(app: web.Application) -> AsyncIterator[None]:
    """A client session and a probe loop per replica while the app runs."""
    config, metrics, wall = app[CONFIG], app[METRICS], app[WALL]
    settings = config.settings
    request = Request(settings.prompt, settings.max_tokens, settings.timeout_seconds,
                      mark=config.token)
    # The probe's own connections: one per replica at most, none kept between probes (a
    # kept-alive connection would hide a replica that stopped accepting new ones).
    connector = aiohttp.TCPConnector(limit=len(config.replicas()) or 1, force_close=True)
    loop = asyncio.get_running_loop()
    models: dict[str, str] = {}  # each replica's model, asked once (GET /v1/models)
    async with aiohttp.ClientSession(connector=connector, trust_env=False) as session:

        async def send(replica: Replica) -> ProbeResult:
            try:
                return await probe_once(session, replica, request, models=models)
            except Exception as exc:  # a bug here must not end this replica's probes
                log.exception("probe of %s (%s) raised", replica.target, replica.url)
                return ProbeResult(RESULT_CONNECTION, detail=type(exc).__name__)

        def record(replica: Replica, result: ProbeResult) -> None:
            metrics.observe(replica, result, wall())

        tasks = [asyncio.create_task(run_replica(
            replica, send, record, interval_seconds=settings.interval_seconds,
            jitter=settings.jitter, rng=app[RNG], clock=loop.time, sleep=asyncio.sleep),
            name=f"probe {replica.target} {replica.url}") for replica in config.replicas()]
        yield
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[REGISTRY])
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def health(request: web.Request) -> web.Response:
    """200 while the probe runs: a failing target is what its series say, not the probe's
    health."""
    return web.Response(text="ok\n")
