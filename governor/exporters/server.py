"""The exporter's HTTP side: ``/metrics``, ``/health`` and an index, on aiohttp.

A request never calls NVML: it reads the sampler's latest snapshot and answers with bytes
rendered once per snapshot (``governor bench exporter`` measures why that matters). The sampler
thread lives in a cleanup context, started with the app and stopped before it closes; with
``--follow`` so does the poller that feeds the fake GPUs (:mod:`.gpu.poller`).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from governor.contracts.endpoints import HEALTH_PATH, METRICS_PATH
from governor.exporters.config import NAMES_DCGM, ExporterConfig, package_version
from governor.exporters.dcgm import DcgmView
from governor.exporters.exposition import ExpositionCache, accepts_gzip
from governor.exporters.gpu import nvml as nv
from governor.exporters.gpu.fake import FakeNvml
from governor.exporters.gpu.poller import DevicePoller
from governor.exporters.gpu.readings import Snapshot
from governor.exporters.gpu.sampler import Sampler

CONFIG = web.AppKey("config", ExporterConfig)
SAMPLER = web.AppKey("sampler", Sampler)
CACHE = web.AppKey("cache", ExpositionCache)
MONOTONIC: web.AppKey[Callable[[], float]] = web.AppKey("monotonic")
RUN_SAMPLER = web.AppKey("run_sampler", bool)
POLLER = web.AppKey("poller", DevicePoller)

_JSON = "application/json"


def build_sampler(config: ExporterConfig) -> tuple[Sampler, DevicePoller | None]:
    """The real NVML, or ``--fake-gpus`` simulated ones with their poller under ``--follow``;
    a missing library is not an exception."""
    if config.fake_gpus:
        fake = FakeNvml(config.fake_gpus, mig=config.mig_layout)
        poller = DevicePoller(config.follow, fake, interval_seconds=config.interval_seconds) \
            if config.follow else None
        return Sampler(fake, config.sampler), poller
    return _nvml_sampler(config), None


def _nvml_sampler(config: ExporterConfig) -> Sampler:
    try:
        return Sampler(nv.import_pynvml(), config.sampler)
    except nv.NvmlUnavailable as unavailable:
        return Sampler(None, config.sampler, unavailable=unavailable)


def create_app(
    config: ExporterConfig, *, sampler: Sampler | None = None,
    monotonic: Callable[[], float] = time.monotonic, run_sampler: bool = True,
    hostname: str | None = None,
) -> web.Application:
    """The exporter app. Tests pass a sampler they tick themselves and ``run_sampler=False``;
    ``hostname`` is the ``Hostname`` label of ``--names dcgm`` (this machine's by default)."""
    app = web.Application()
    app[CONFIG] = config
    if sampler is None:
        sampler, poller = build_sampler(config)
        if poller is not None:
            app[POLLER] = poller
    app[SAMPLER] = sampler
    dcgm = DcgmView(hostname or socket.gethostname()) if config.names == NAMES_DCGM else None
    app[CACHE] = ExpositionCache(package_version(), dcgm)
    app[MONOTONIC] = monotonic
    app[RUN_SAMPLER] = run_sampler
    app.cleanup_ctx.append(_following)
    app.cleanup_ctx.append(_sampling)
    app.router.add_get(METRICS_PATH, metrics)
    app.router.add_get(HEALTH_PATH, health)
    app.router.add_get("/", index)
    return app


async def _sampling(app: web.Application) -> AsyncIterator[None]:
    sampler, stop = app[SAMPLER], threading.Event()
    thread = None
    if app[RUN_SAMPLER]:
        thread = threading.Thread(target=sampler.run, args=(stop, app[CACHE].prepare),
                                  name="gpu-sampler", daemon=True)
        thread.start()
    yield
    stop.set()
    if thread is not None:
        # A round in flight finishes first (NVML calls cannot be interrupted).
        await asyncio.to_thread(thread.join, 10.0)
    sampler.close()


async def _following(app: web.Application) -> AsyncIterator[None]:
    """The poller's thread, while the app runs (``--follow`` only)."""
    poller, stop = app.get(POLLER), threading.Event()
    thread = None
    if poller is not None and app[RUN_SAMPLER]:
        thread = threading.Thread(target=poller.run, args=(stop,), name="sim-device-poller",
                                  daemon=True)
        thread.start()
    yield
    stop.set()
    if thread is not None:
        await asyncio.to_thread(thread.join, 5.0)


def _age(request: web.Request, snapshot: Snapshot) -> float:
    now: float = request.app[MONOTONIC]()
    return now - snapshot.taken_monotonic


async def metrics(request: web.Request) -> web.Response:
    app = request.app
    snapshot = app[CACHE].published or app[SAMPLER].latest()
    age = _age(request, snapshot)
    fresh = age <= app[CONFIG].staleness_limit_seconds
    fmt = app[CACHE].negotiate(request.headers.get("Accept"))
    gzip = accepts_gzip(request.headers.get("Accept-Encoding"))
    body = app[CACHE].body(snapshot, fresh=fresh, fmt=fmt, age_seconds=age, gzip=gzip)
    headers = {"Content-Type": fmt.content_type, "Vary": "Accept, Accept-Encoding"}
    if gzip:
        headers["Content-Encoding"] = "gzip"
    return web.Response(body=body, headers=headers)


def health_report(
    snapshot: Snapshot, *, age_seconds: float, staleness_seconds: float
) -> dict[str, object]:
    """What ``/health`` says: ``stale`` (503) only when the sampler stopped; a missing driver or
    a lost GPU is ``degraded`` (200) because restarting the exporter would not fix either."""
    lost = [g.identity.index for g in snapshot.gpus if not g.up]
    if age_seconds > staleness_seconds:
        status, reason = "stale", f"no sampling round for {age_seconds:.1f} s"
    elif not snapshot.nvml_up:
        status, reason = "degraded", snapshot.nvml_message
    elif not snapshot.gpus and snapshot.sequence:
        status, reason = "degraded", "NVML is up but reports no GPU"
    elif lost:
        status, reason = "degraded", f"GPU(s) not answering: {', '.join(map(str, lost))}"
    else:
        status, reason = "ok", ""
    return {
        "status": status,
        "reason": reason,
        "source": snapshot.source,
        "gpus": [{"gpu": g.identity.index, "uuid": g.identity.uuid, "model": g.identity.model,
                  "up": g.up} for g in snapshot.gpus],
        "snapshot_age_seconds": round(age_seconds, 3),
        "collections": snapshot.collections_total,
    }


async def health(request: web.Request) -> web.Response:
    snapshot = request.app[SAMPLER].latest()
    report = health_report(snapshot, age_seconds=_age(request, snapshot),
                           staleness_seconds=request.app[CONFIG].staleness_limit_seconds)
    code = 503 if report["status"] == "stale" else 200
    if _JSON in request.headers.get("Accept", ""):
        return web.json_response(report, status=code, dumps=lambda o: json.dumps(o, sort_keys=True))
    line = f"{report['status']}: {report['reason']}" if report["reason"] else str(report["status"])
    return web.Response(text=line + "\n", status=code)


async def index(request: web.Request) -> web.Response:
    return web.Response(text=(
        "Governor GPU exporter\n\n"
        "  /metrics  Prometheus text, or OpenMetrics when the Accept header asks for it\n"
        "  /health   ok | degraded | stale (JSON with Accept: application/json)\n"
    ))
