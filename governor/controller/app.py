"""The controller's HTTP face: ``POST /alerts`` (Alertmanager), ``GET /status``, ``/metrics``.

``create_app(config, …)`` never reads argv or the environment; tests build the app with it and
inject an observer and an actuator. Without them the app builds the real ones on one shared
HTTP client session, opened and closed with the app.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from governor.common.secrets import Secret
from governor.contracts.endpoints import HEALTH_PATH, METRICS_PATH, WEBHOOK_PATH
from governor.controller import audit as audit_lines
from governor.controller.actuators import load_actuator
from governor.controller.audit import AuditLog
from governor.controller.config import ControllerConfig, ssl_context, without_credentials
from governor.controller.grafana import GrafanaAnnotator
from governor.controller.intake import AlertBook, IntakeError, parse_webhook
from governor.controller.metrics import ControllerMetrics
from governor.controller.observe import PrometheusClient
from governor.controller.reconciler import Actuator, Annotator, Observer, Reconciler, TargetRuntime
from governor.controller.state import StateStore, encode_state

log = logging.getLogger(__name__)

# Alertmanager's notifications are a few KiB; anything near this is not one.
MAX_BODY_BYTES = 1024 * 1024
# Firing alerts listed by GET /status, unless ?limit= asks for fewer or more (up to the most).
STATUS_ALERTS = 100
MAX_STATUS_ALERTS = 1000


@dataclass(frozen=True, slots=True)
class Secrets:
    webhook: Secret | None = None  # what Alertmanager must present on POST /alerts
    admin: Secret | None = None  # what the controller presents to PUT /admin/batching
    grafana: Secret | None = None


@dataclass(frozen=True, slots=True)
class Overrides:
    """Test seams: replace what the app would otherwise build on its HTTP session."""

    observer: Observer | None = None
    actuator: Actuator | None = None
    annotator: Annotator | None = None
    clock: Callable[[], float] = time.time
    run_loop: bool = True


CONFIG = web.AppKey("config", ControllerConfig)
SECRETS = web.AppKey("secrets", Secrets)
BOOK = web.AppKey("book", AlertBook)
METRICS = web.AppKey("metrics", ControllerMetrics)
REGISTRY = web.AppKey("registry", CollectorRegistry)
RECONCILER = web.AppKey("reconciler", Reconciler)
OVERRIDES = web.AppKey("overrides", Overrides)


def create_app(config: ControllerConfig, secrets: Secrets, *,
               registry: CollectorRegistry | None = None,
               overrides: Overrides | None = None) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    registry = registry or CollectorRegistry()
    app[CONFIG], app[SECRETS], app[REGISTRY] = config, secrets, registry
    app[METRICS] = ControllerMetrics(registry)
    app[BOOK] = AlertBook(expire_after_seconds=config.alert_expiry_seconds)
    app[OVERRIDES] = overrides or Overrides()
    app.cleanup_ctx.append(_reconciler_ctx)
    app.router.add_post(WEBHOOK_PATH, post_alerts)
    app.router.add_get("/status", get_status)
    app.router.add_get(METRICS_PATH, get_metrics)
    app.router.add_get(HEALTH_PATH, get_health)
    return app


async def _reconciler_ctx(app: web.Application) -> AsyncIterator[None]:
    config, secrets, seams = app[CONFIG], app[SECRETS], app[OVERRIDES]
    connector = aiohttp.TCPConnector(ssl=ssl_context(config))
    async with aiohttp.ClientSession(connector=connector) as session:
        annotator = seams.annotator
        if annotator is None and config.grafana_url:
            annotator = GrafanaAnnotator(session, config.grafana_url, secrets.grafana)
        app[RECONCILER] = Reconciler(
            config,
            seams.observer or PrometheusClient(session, config.prometheus_url, config.queries),
            seams.actuator or load_actuator(config.actuator).create(session, secrets.admin),
            StateStore(config.state_path, clock=seams.clock,
                       avoid_seconds=config.law.avoid_seconds),
            AuditLog(config.audit_path), app[METRICS], app[BOOK],
            annotator=annotator, clock=seams.clock,
        )
        task = asyncio.create_task(app[RECONCILER].run()) if seams.run_loop else None
        yield
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _error(status: int, message: str, *, type_: str, code: str,
           errors: tuple[str, ...] = ()) -> web.Response:
    body: dict[str, Any] = {"message": message, "type": type_, "param": None, "code": code}
    if errors:
        body["errors"] = list(errors)
    return web.json_response({"error": body}, status=status)


async def post_alerts(request: web.Request) -> web.Response:
    """Every answer, a failure of the controller's own included, is JSON and counted."""
    try:
        response = await _intake(request)
    except Exception:  # a bug must not become aiohttp's plain-text 500, invisible in /metrics
        log.exception("webhook: failed to handle a notification")
        response = _error(500, "the controller failed to handle the notification",
                          type_="server_error", code="internal_error")
    request.app[METRICS].webhook_requests.labels(str(response.status)).inc()
    return response


def _authorized(token: Secret | None, authorization: str | None) -> bool:
    if token is None:
        return True
    try:
        return token.matches_bearer(authorization)
    except UnicodeError:  # a header that is not UTF-8 (aiohttp keeps its bytes as surrogates)
        return False  # carries no token of ours


async def _intake(request: web.Request) -> web.Response:
    app = request.app
    if not _authorized(app[SECRETS].webhook, request.headers.get("Authorization")):
        return _error(401, "a valid bearer token is required", type_="authentication_error",
                      code="invalid_token")
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return _error(413, f"the body exceeds {MAX_BODY_BYTES} bytes",
                      type_="invalid_request_error", code="too_large")
    try:
        payload = parse_webhook(raw)
    except IntakeError as exc:
        return _error(400, "not an Alertmanager v4 notification", type_="invalid_request_error",
                      code="invalid_payload", errors=exc.errors)
    outcome = app[BOOK].record(payload, app[OVERRIDES].clock())
    metrics = app[METRICS]
    for alert in payload.alerts:
        metrics.alerts_received.labels(alert.status, "received").inc()
    metrics.alerts_received.labels("any", "duplicate").inc(outcome.duplicate)
    if outcome.new or outcome.resolved:
        app[RECONCILER].wake(sorted(outcome.changed))
    return web.json_response({"new": outcome.new, "duplicate": outcome.duplicate,
                              "resolved": outcome.resolved})


async def get_status(request: web.Request) -> web.Response:
    """``GET /status[?limit=N]``: at most ``limit`` firing alerts (the most recently sent
    first), and how many there are in all."""
    raw = request.query.get("limit", str(STATUS_ALERTS))
    if not raw.isdigit() or len(raw) > 9:
        return _error(400, f"limit: a whole number of alerts to show (at most "
                           f"{MAX_STATUS_ALERTS}), got {raw[:40]!r}",
                      type_="invalid_request_error", code="invalid_limit")
    return web.json_response(status_document(request.app, min(int(raw), MAX_STATUS_ALERTS)))


def status_document(app: web.Application, limit: int = STATUS_ALERTS) -> dict[str, Any]:
    config, reconciler = app[CONFIG], app[RECONCILER]
    return {
        "dry_run": config.dry_run,
        "resync_seconds": config.resync_seconds,
        "slo": {"itl_seconds": config.slo.itl_seconds, "itl_quantile": config.slo.itl_quantile,
                "ttft_seconds": config.slo.ttft_seconds,
                "ttft_quantile": config.slo.ttft_quantile},
        "last_pass_at": None if reconciler.last_pass_at is None
        else audit_lines.iso(reconciler.last_pass_at),
        "last_pass_woken_by": reconciler.woken_by,
        "prometheus": {"url": without_credentials(config.prometheus_url),
                       "error": reconciler.prometheus_error},
        "state": {"path": None if config.state_path is None else str(config.state_path),
                  "error": reconciler.state_error},
        **_alerts(app[BOOK], limit),
        "targets": {name: _target_status(rt) for name, rt in sorted(reconciler.targets.items())},
    }


def _alerts(book: AlertBook, limit: int) -> dict[str, Any]:
    firing = sorted(book.firing(), key=lambda r: r.seen_at, reverse=True)
    return {
        "alerts": [{"fingerprint": r.alert.fingerprint, "labels": dict(r.alert.labels),
                    "starts_at": r.alert.starts_at, "received_at": audit_lines.iso(r.received_at),
                    "seen_at": audit_lines.iso(r.seen_at)} for r in firing[:limit]],
        "alert_counts": {"firing": len(firing), "shown": min(limit, len(firing)),
                         "kept": len(book), "kept_bytes": book.bytes},
    }


def _target_status(rt: TargetRuntime) -> dict[str, Any]:
    limits = rt.limits
    return {
        "url": without_credentials(rt.target.url),
        "limits": None if limits is None else {
            **limits.current.as_dict(), "floor": limits.floor.as_dict(),
            "ceiling": limits.ceiling.as_dict()},
        "observation": None if rt.observation is None else rt.observation.as_inputs(),
        "ranks": None if rt.observation is None else rt.observation.ranks(),
        "state": encode_state(rt.state),
        "last_decision": rt.last_decision,
        "last_result": rt.last_result,
        "last_error": rt.last_error,
        "retry_at": audit_lines.iso(rt.retry_at) if rt.retry_at else None,
        "recent_decisions": list(rt.recent),
    }


async def get_metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[REGISTRY])
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def get_health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})
