"""``GET``/``PUT /admin/admission`` on stock ``vllm serve``: the deadline gate's bound, moved live.

The contract is ``governor serve``'s (:mod:`governor.contracts.admission`): a ``PUT`` names the
deadline slack, the static bound on prompt tokens ahead, or both, and the answer reports the bound
in force, each class's deadline at that slack, the prefill rate the gate measures and its
backlog. It is guarded by the admin API's bearer token (:mod:`.admin`); a body past 64 KiB is
refused 413, one that is not JSON 400, a value out of range 422, and a refused ``PUT`` changes
nothing::

    PUT /admin/admission  {"deadline_slack": 0.7}
    200 {"deadline_slack": 0.7, "max_tokens_ahead": null, "deadlines": {"chat": 0.7, …}, …}

The gate lives in the API server process (each of ``--api-server-count N`` has its own): a
``PUT`` moves the gate of the process that takes the connection.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterable

from governor.admission.deadline import DeadlineGate
from governor.contracts.admission import AdmissionBound, AdmissionReport, requested
from governor.contracts.batching import BodyError
from governor.contracts.errors import INVALID_REQUEST
from governor.vllm.admin import (
    BODY_SECONDS,
    MAX_BODY_BYTES,
    AdminSettings,
    Answer,
    BodyTooLarge,
    authorize,
    error_answer,
    read_body,
)

log = logging.getLogger("governor.vllm.admission")


def report(gate: DeadlineGate[str]) -> AdmissionReport:
    return AdmissionReport(AdmissionBound(gate.settings.slack, gate.settings.max_tokens_ahead),
                           gate.deadlines(), gate.rate, gate.pending_tokens + gate.queued_tokens)


async def answer_request(settings: AdminSettings, gate: DeadlineGate[str], method: str,
                         authorization: str | bytes | None,
                         chunks: AsyncIterable[bytes]) -> Answer:
    """The answer to one request of the route (the body read from ``chunks`` only once the
    caller is authorized)."""
    refused = authorize(settings, authorization)
    if refused is not None:
        return refused
    if method not in ("GET", "PUT"):
        return error_answer(405, f"{method[:16]} is not allowed: GET or PUT", INVALID_REQUEST)
    if method == "GET":
        return Answer(200, report(gate).as_dict())
    try:
        raw = await asyncio.wait_for(read_body(chunks), BODY_SECONDS)
    except BodyTooLarge:
        return error_answer(413, f"the body is larger than {MAX_BODY_BYTES} bytes",
                            INVALID_REQUEST)
    except TimeoutError:
        return error_answer(408, "the body did not arrive in time", INVALID_REQUEST)
    return put(gate, raw)


def put(gate: DeadlineGate[str], raw: bytes) -> Answer:
    """Apply a ``PUT`` body to ``gate``: all of it, or nothing and the error."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return error_answer(400, "the body is not valid JSON", INVALID_REQUEST)
    before = report(gate).bound
    try:
        wanted = requested(body, before)
    except BodyError as exc:
        return error_answer(exc.status, exc.message, INVALID_REQUEST, code=exc.code,
                            param=exc.param)
    gate.set_slack(wanted.deadline_slack)
    gate.set_max_tokens_ahead(wanted.max_tokens_ahead)
    log.info("admission bound %s -> %s", before.as_dict(), wanted.as_dict())
    return Answer(200, report(gate).as_dict())
