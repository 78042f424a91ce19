"""``GET``/``PUT /admin/batching``: read and move the engine's batching limits, live; and
``GET``/``PUT /admin/admission``: the admission bound (the deadline slack, the static bound on
prompt tokens ahead, :mod:`governor.contracts.admission`).

Bearer-token protected (``GOVERNOR_ADMIN_TOKEN``, compared in constant time, never logged). A PUT
names either limit or both; values outside ``[floor, ceiling]`` get 422 and change nothing::

    PUT /admin/batching  {"max_num_batched_tokens": 2048}
    200 {"max_num_seqs": 256, "max_num_batched_tokens": 2048, "floor": {…}, "ceiling": {…}}

Over vLLM, the answer adds ``ranks``: each data-parallel engine's own report (its ``dp_rank``,
pid and limits in force), as stock ``vllm serve`` with Governor's route answers.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from governor.contracts.admission import AdmissionBound, AdmissionReport
from governor.contracts.admission import requested as admission_requested
from governor.contracts.batching import (
    DISABLED_MESSAGE,
    UNAUTHORIZED_CODE,
    UNAUTHORIZED_MESSAGE,
    BatchingLimits,
    BatchingReport,
    BodyError,
    requested,
)
from governor.contracts.metrics.service import RESULT_APPLIED, RESULT_FAILED, RESULT_REJECTED
from governor.inference import keys
from governor.inference.admission.queue import AdmissionQueue
from governor.inference.engines.base import Engine, EngineError, EngineErrorKind
from governor.inference.http.body import read_json
from governor.inference.http.errors import AUTHENTICATION, SERVER, UNAVAILABLE, APIError

log = logging.getLogger(__name__)

def authorize(request: web.Request) -> None:
    """A 401 unless the request carries the admin bearer token (every admin route's gate)."""
    token = request.app[keys.CONFIG].admin_token
    header = request.headers.get("Authorization")
    if token is None or not token.matches_bearer(header):
        reason = DISABLED_MESSAGE if token is None else UNAUTHORIZED_MESSAGE
        raise APIError(401, reason, type_=AUTHENTICATION, code=UNAUTHORIZED_CODE)


def report(engine: Engine) -> BatchingReport:
    return BatchingReport(engine.limits, engine.floor, engine.ceiling)


def requested_limits(body: object, engine: Engine) -> BatchingLimits:
    """Validate a PUT body against the engine's bounds, merged with its current limits."""
    try:
        return requested(body, report(engine))
    except BodyError as exc:
        raise APIError(exc.status, exc.message, param=exc.param, code=exc.code) from exc


async def answer(engine: Engine, retry_after: int) -> dict[str, Any]:
    """The report, with each data-parallel rank's own where the engine has ranks (vLLM's
    engines: one ``PUT`` moves them all, and each says what it has in force)."""
    body = report(engine).as_dict()
    try:
        ranks = await engine.ranks()
    except EngineError as exc:
        raise APIError(503, exc.message, type_=UNAVAILABLE, code=exc.kind.value,
                       retry_after_seconds=retry_after) from exc
    if ranks is not None:
        body["ranks"] = ranks
    return body


def admission_report(queue: AdmissionQueue) -> AdmissionReport:
    gate = queue.gate
    return AdmissionReport(AdmissionBound(gate.settings.slack, gate.settings.max_tokens_ahead),
                           gate.deadlines(), gate.rate,
                           gate.pending_tokens + gate.queued_tokens)


async def get_admission(request: web.Request) -> web.Response:
    authorize(request)
    return web.json_response(admission_report(request.app[keys.ADMISSION]).as_dict())


async def put_admission(request: web.Request) -> web.Response:
    """Move the admission bound live: the deadline slack, the static bound on tokens ahead."""
    authorize(request)
    queue = request.app[keys.ADMISSION]
    body = await read_json(request)
    before = admission_report(queue).bound
    try:
        wanted = admission_requested(body, before)
    except BodyError as exc:
        raise APIError(exc.status, exc.message, param=exc.param, code=exc.code) from exc
    queue.gate.set_slack(wanted.deadline_slack)
    queue.gate.set_max_tokens_ahead(wanted.max_tokens_ahead)
    log.info("admission bound %s -> %s", before.as_dict(), wanted.as_dict())
    return web.json_response(admission_report(queue).as_dict())


async def get_batching(request: web.Request) -> web.Response:
    authorize(request)
    app = request.app
    return web.json_response(await answer(app[keys.ENGINE],
                                          app[keys.CONFIG].admission.retry_after_seconds))


async def put_batching(request: web.Request) -> web.Response:
    authorize(request)
    app = request.app
    engine, metrics = app[keys.ENGINE], app[keys.METRICS]
    body = await read_json(request)
    retry_after = app[keys.CONFIG].admission.retry_after_seconds
    if not engine.ready:
        raise APIError(503, "the engine is not ready", type_=UNAVAILABLE,
                       code="engine_not_ready", retry_after_seconds=retry_after)
    # The merge reads the limits in force: under the lock, or a concurrent PUT of the other
    # field, applied while this one waits on the engine, would be silently undone.
    async with app[keys.ADMIN_LOCK]:
        before = engine.limits
        try:
            wanted = requested_limits(body, engine)
        except APIError:
            metrics.limit_changes.labels(RESULT_REJECTED).inc()
            raise
        try:
            applied = await engine.set_limits(wanted)
        except EngineError as exc:
            metrics.limit_changes.labels(RESULT_FAILED).inc()
            if exc.kind is EngineErrorKind.UNSUPPORTED:
                raise APIError(501, exc.message, type_=SERVER, code="unsupported") from exc
            raise APIError(503, exc.message, type_=UNAVAILABLE, code=exc.kind.value,
                           retry_after_seconds=retry_after) from exc
        metrics.set_limits(metrics.limit, applied)
        metrics.limit_changes.labels(RESULT_APPLIED).inc()
    log.info("batching limits %s -> %s", before.as_dict(), applied.as_dict())
    return web.json_response(await answer(engine, retry_after))
