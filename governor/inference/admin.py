"""``GET``/``PUT /admin/batching``: read and move the engine's batching limits, live.

Bearer-token protected (``GOVERNOR_ADMIN_TOKEN``, compared in constant time, never logged). A PUT
names either limit or both; values outside ``[floor, ceiling]`` get 422 and change nothing::

    PUT /admin/batching  {"max_num_batched_tokens": 2048}
    200 {"max_num_seqs": 256, "max_num_batched_tokens": 2048, "floor": {…}, "ceiling": {…}}
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from governor.contracts.metrics.service import RESULT_APPLIED, RESULT_FAILED, RESULT_REJECTED
from governor.inference import keys
from governor.inference.body import read_json
from governor.inference.engines.base import BatchingLimits, Engine, EngineError, EngineErrorKind
from governor.inference.errors import AUTHENTICATION, SERVER, UNAVAILABLE, APIError, bad_request

log = logging.getLogger(__name__)

FIELDS = ("max_num_seqs", "max_num_batched_tokens")


def _authorize(request: web.Request) -> None:
    token = request.app[keys.CONFIG].admin_token
    header = request.headers.get("Authorization")
    if token is None or not token.matches_bearer(header):
        reason = "the admin API is disabled (no GOVERNOR_ADMIN_TOKEN)" if token is None else (
            "a valid bearer token is required"
        )
        raise APIError(401, reason, type_=AUTHENTICATION, code="invalid_api_key")


def describe(engine: Engine) -> dict[str, Any]:
    return {
        **engine.limits.as_dict(),
        "floor": engine.floor.as_dict(),
        "ceiling": engine.ceiling.as_dict(),
    }


def requested_limits(body: object, engine: Engine) -> BatchingLimits:
    """Validate a PUT body against the engine's bounds (pure apart from reading the engine)."""
    if not isinstance(body, Mapping):
        raise bad_request("the body must be a JSON object")
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise bad_request(f"unknown fields {unknown}; expected {list(FIELDS)}", param=unknown[0])
    if not any(name in body for name in FIELDS):
        raise bad_request(f"name at least one of {list(FIELDS)}")
    current, floor = engine.limits.as_dict(), engine.floor.as_dict()
    ceiling = engine.ceiling.as_dict()
    values: dict[str, int] = {}
    for name in FIELDS:
        value = body.get(name, current[name])
        if not isinstance(value, int) or isinstance(value, bool):
            raise bad_request(f"'{name}' must be an integer", param=name)
        if not floor[name] <= value <= ceiling[name]:
            raise APIError(
                422, f"'{name}' must be within [{floor[name]}, {ceiling[name]}], got {value}",
                param=name, code="out_of_range",
            )
        values[name] = value
    return BatchingLimits(**values)


async def get_batching(request: web.Request) -> web.Response:
    _authorize(request)
    return web.json_response(describe(request.app[keys.ENGINE]))


async def put_batching(request: web.Request) -> web.Response:
    _authorize(request)
    app = request.app
    engine, metrics = app[keys.ENGINE], app[keys.METRICS]
    body = await read_json(request)
    try:
        wanted = requested_limits(body, engine)
    except APIError:
        metrics.limit_changes.labels(RESULT_REJECTED).inc()
        raise
    retry_after = app[keys.CONFIG].admission.retry_after_seconds
    if not engine.ready:
        raise APIError(503, "the engine is not ready", type_=UNAVAILABLE,
                       code="engine_not_ready", retry_after_seconds=retry_after)
    async with app[keys.ADMIN_LOCK]:
        before = engine.limits
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
    return web.json_response(describe(engine))
