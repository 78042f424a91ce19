"""``GET``/``PUT /admin/admission`` on stock ``vllm serve``: the deadline gate's bound, moved live.

The contract is ``governor serve``'s (:mod:`governor.contracts.admission`): a ``PUT`` names the
deadline slack, the static bound on prompt tokens ahead, vLLM's own ``max_num_queued_tokens``
(where this vLLM has it: 0.32 and later), or any of them, and the answer reports the bound in
force, each class's deadline at that slack, the prefill rate the gate measures and its backlog.
It is guarded by the admin API's bearer token (:mod:`.admin`); a body past 64 KiB is refused 413,
one that is not JSON 400, a value out of range 422, and a refused ``PUT`` changes nothing::

    PUT /admin/admission  {"deadline_slack": 0.7}
    200 {"deadline_slack": 0.7, "max_tokens_ahead": null, "deadlines": {"chat": 0.7, …}, …}

The gate lives in the API server process (each of ``--api-server-count N`` has its own), and so
does vLLM's ``max_num_queued_tokens`` (read from ``AsyncLLM.scheduler_config`` at each request):
the process that takes a ``PUT`` shares the bound with the others (:mod:`.shared_bound`), which
take it up at their next sync, so the answer is the bound every process uses::

    knobs = AdmissionKnobs(gate, SharedBound.from_env(os.environ))
    knobs.follow(engine_client)      # at every sync of the gate
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterable
from typing import Any

from governor.admission.deadline import DeadlineGate
from governor.contracts.admission import AdmissionBound, AdmissionReport, requested
from governor.contracts.batching import BodyError
from governor.contracts.errors import INVALID_REQUEST, UNAVAILABLE
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
from governor.vllm.shared_bound import SharedBound, ShareError

log = logging.getLogger("governor.vllm.admission")


class AdmissionKnobs:
    """One API process's admission bound: its gate's slack and static bound, and vLLM's own
    ``max_num_queued_tokens``, kept in line with the server's other API processes."""

    def __init__(self, gate: DeadlineGate[str], shared: SharedBound | None = None) -> None:
        self.gate = gate
        self.shared = shared
        # vLLM's bound as Governor last set it, boxed (None: never set; vLLM's start value holds).
        self._queued_tokens: tuple[int | None] | None = None

    def bound(self, engine_client: Any) -> AdmissionBound:
        settings, config = self.gate.settings, _scheduler_config(engine_client)
        return AdmissionBound(settings.slack, settings.max_tokens_ahead,
                              None if config is None else config.max_num_queued_tokens,
                              vllm_queued_tokens=config is not None)

    def apply(self, bound: AdmissionBound, engine_client: Any) -> None:
        self.gate.set_slack(bound.deadline_slack)
        self.gate.set_max_tokens_ahead(bound.max_tokens_ahead)
        if bound.vllm_queued_tokens:
            self._queued_tokens = (bound.max_num_queued_tokens,)
        self._enforce(engine_client)

    def follow(self, engine_client: Any) -> None:
        """Take up the bound another API process shared since the last call (at every sync)."""
        if self.shared is not None:
            newer = self.shared.read(self.bound(engine_client))
            if newer is not None:
                log.info("admission bound %s, shared by another API process",
                         newer.as_dict())
                self.apply(newer, engine_client)
        self._enforce(engine_client)

    def _enforce(self, engine_client: Any) -> None:
        """vLLM's bound as Governor last set it, once this process knows its vLLM (vLLM reads
        it at every request)."""
        config = _scheduler_config(engine_client)
        if config is not None and self._queued_tokens is not None:
            (wanted,) = self._queued_tokens
            if config.max_num_queued_tokens != wanted:
                config.max_num_queued_tokens = wanted


def _scheduler_config(engine_client: Any) -> Any:
    """vLLM's scheduler config as this API process reads it per request, where it has the
    token bound (vLLM 0.32 and later); None otherwise."""
    config = getattr(engine_client, "scheduler_config", None)
    return config if hasattr(config, "max_num_queued_tokens") else None


def report(knobs: AdmissionKnobs, engine_client: Any) -> AdmissionReport:
    gate = knobs.gate
    return AdmissionReport(knobs.bound(engine_client), gate.deadlines(), gate.rate,
                           gate.pending_tokens + gate.queued_tokens)


async def answer_request(settings: AdminSettings, knobs: AdmissionKnobs, engine_client: Any,
                         method: str, authorization: str | bytes | None,
                         chunks: AsyncIterable[bytes]) -> Answer:
    """The answer to one request of the route (the body read from ``chunks`` only once the
    caller is authorized)."""
    refused = authorize(settings, authorization)
    if refused is not None:
        return refused
    if method not in ("GET", "PUT"):
        return error_answer(405, f"{method[:16]} is not allowed: GET or PUT", INVALID_REQUEST)
    knobs.follow(engine_client)  # what another API process shared since the last sync
    if method == "GET":
        return Answer(200, report(knobs, engine_client).as_dict())
    try:
        raw = await asyncio.wait_for(read_body(chunks), BODY_SECONDS)
    except BodyTooLarge:
        return error_answer(413, f"the body is larger than {MAX_BODY_BYTES} bytes",
                            INVALID_REQUEST)
    except TimeoutError:
        return error_answer(408, "the body did not arrive in time", INVALID_REQUEST)
    return put(knobs, engine_client, raw)


def put(knobs: AdmissionKnobs, engine_client: Any, raw: bytes) -> Answer:
    """Apply a ``PUT`` body to every API process: all of it, or nothing and the error."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return error_answer(400, "the body is not valid JSON", INVALID_REQUEST)
    before = knobs.bound(engine_client)
    try:
        wanted = requested(body, before)
    except BodyError as exc:
        return error_answer(exc.status, exc.message, INVALID_REQUEST, code=exc.code,
                            param=exc.param)
    if knobs.shared is not None:
        try:  # shared first: a bound this process alone would use is not what was asked
            knobs.shared.publish(wanted)
        except ShareError as exc:
            log.error("%s; the bound is unchanged", exc)
            return error_answer(503, "the bound could not be shared with the server's other "
                                "API processes; it is unchanged", UNAVAILABLE, code="not_shared")
    knobs.apply(wanted, engine_client)
    log.info("admission bound %s -> %s", before.as_dict(), wanted.as_dict())
    return Answer(200, report(knobs, engine_client).as_dict())
