"""A hostile fleet for the controller's tests: the admin API of many inference targets and the
Prometheus that scrapes them, on one local port, answering as slowly, in as small pieces and
with labels and values as hostile as a test asks.

Each target is served under a path of its own (``/t007/admin/batching``,
``/t007/admin/admission``), so a hundred targets cost one server; Prometheus's ``/api/v1/query``
answers every expression of the controller's :class:`~governor.controller.queries.QuerySet`
(matched by its text) with one sample per target and rank, per stage, per cause::

    fleet = HostileFleet(100, pieces=Pieces(1448, 0.001))
    server = await aiohttp_server(fleet.app())
    async with fleet.controller(server, tmp_path) as stack:
        await stack.reconciler.reconcile_once()

Every answer goes out in ``pieces`` (chunked, each write its own network send, a delay between
them); a target's :class:`Hostility` changes its admin answers, and the fleet's ``stages``,
``ranks``, ``causes`` and ``values`` its Prometheus answers (``target_values``: one target's own,
on any series, so hostile targets share a fleet with healthy ones). The rule: every input the
controller takes from a target (a series it queries, an admin answer, a header) belongs here, with
a case in ``test_hostile_targets.py`` that sends it hostile.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer
from prometheus_client import CollectorRegistry

from governor.common.secrets import Secret
from governor.contracts import causes as verdict_causes
from governor.contracts.admission import AdmissionBound, requested
from governor.contracts.batching import BodyError
from governor.contracts.stages import Stage
from governor.controller.actuator import BatchingClient, Sleep
from governor.controller.audit import AuditLog
from governor.controller.config import ControllerConfig
from governor.controller.intake import AlertBook
from governor.controller.metrics import ControllerMetrics
from governor.controller.model import Limits, SloTargets, Target
from governor.controller.observe import PrometheusClient
from governor.controller.queries import QuerySet
from governor.controller.reconciler import Reconciler
from governor.controller.state import StateStore
from tests.controller.fakes import CEILING, FLOOR, FakeClock

TOKEN = "admin-token"
SLO = SloTargets(itl_seconds=0.12, itl_quantile=0.99, ttft_seconds=1.0, ttft_quantile=0.99)
# What a calm target reports: every input the law reads, inside the SLOs.
CALM: Mapping[str, float] = {
    "itl_tail_seconds": 0.05, "itl_median_seconds": 0.02, "itl_tail_long_seconds": 0.05,
    "itl_mean_seconds": 0.022, "itl_spike_seconds": 0.06, "ttft_tail_seconds": 0.3,
    "prompt_tokens_per_second": 4000.0, "generation_tokens_per_second": 900.0,
    "requests_running": 20.0, "requests_waiting": 0.0, "waiting_growth_per_second": 0.0,
    "kv_cache_usage_ratio": 0.3, "preemptions_per_second": 0.0, "ttft_good_per_second": 3.0,
    "ttft_per_second": 3.0, "itl_good_ratio": 0.999}
STAGES: tuple[str, ...] = tuple(stage.value for stage in Stage)


@dataclass(frozen=True, slots=True)
class Pieces:
    """How every answer is written: ``size`` bytes a network send, ``delay_seconds`` apart,
    after ``first_byte_seconds``."""

    size: int = 1 << 20
    delay_seconds: float = 0.0
    first_byte_seconds: float = 0.0


@dataclass
class Hostility:
    """One target's admin answers: a status, headers and a body of its own (the raw bytes, or
    a JSON value), in place of the fleet's report."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | Any = None
    stall: bool = False  # send nothing until the fleet's ``released`` is set


@dataclass
class HostileFleet:
    """``targets`` inference targets and their Prometheus, as one aiohttp application."""

    targets: int
    pieces: Pieces = field(default_factory=Pieces)
    ranks: int = 2  # data-parallel ranks per target (stock vLLM's ``ranks`` in each report)
    # The ``engine`` label values of each target's series (default: one per rank, "0", "1", …).
    engines: tuple[str, ...] | None = None
    stages: tuple[str, ...] = STAGES  # the ``stage`` label values each target's series carry
    causes: tuple[str, ...] = ()  # the ``cause`` label values of the verdict while it burns
    values: dict[str, float] = field(default_factory=lambda: dict(CALM))
    stage_seconds: float = 0.01
    # By target index: the values of that target's series in place of the fleet's, by the name
    # the controller's queries give them (a field of QuerySet.expressions, stage_expressions or
    # verdict_expressions, or "up"); a verdict series named here carries every cause.
    target_values: dict[int, dict[str, float]] = field(default_factory=dict)
    hostile: dict[int, Hostility] = field(default_factory=dict)  # by target index
    limits: dict[str, Limits] = field(default_factory=dict)
    puts: list[tuple[str, Any]] = field(default_factory=list)
    # The gate's bound on each target (``/admin/admission``, stock vLLM's: with vLLM's own
    # max_num_queued_tokens, unbounded until moved), and the bodies PUT to it.
    admission: dict[str, AdmissionBound] = field(default_factory=dict)
    admission_puts: list[tuple[str, Any]] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)  # (target, method), in order
    # How many pieces each answer took, by kind ("prometheus", "admin").
    sent: dict[str, list[int]] = field(default_factory=lambda: {"prometheus": [], "admin": []})
    queries: QuerySet = field(default_factory=lambda: replace(
        QuerySet.default(), service="inference", itl_slo="inter-token-latency",
        ttft_slo="time-to-first-token"))
    released: asyncio.Event = field(default_factory=asyncio.Event)  # ends every stall

    def names(self) -> list[str]:
        return [f"t{i:03d}:8000" for i in range(self.targets)]

    def static_targets(self, server: TestServer) -> tuple[Target, ...]:
        return tuple(Target(name, str(server.make_url(f"/t{i:03d}")))
                     for i, name in enumerate(self.names()))

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/v1/query", self._query)
        app.router.add_route("*", "/t{index:[0-9]+}/admin/batching", self._admin)
        app.router.add_route("*", "/t{index:[0-9]+}/admin/admission", self._admission)
        return app

    def series(self) -> list[str]:
        """Every series the controller reads from Prometheus, by the name ``target_values``
        takes."""
        queries = self.queries
        return ["up", *queries.expressions(), *queries.stage_expressions(),
                *queries.verdict_expressions()]

    @contextlib.asynccontextmanager
    async def controller(self, server: TestServer, tmp: Path, *, timeout_seconds: float = 120.0,
                         sleep: Sleep = asyncio.sleep, **config: Any) -> AsyncIterator[Stack]:
        """A controller with the real Prometheus and admin clients, managing every target of
        the fleet; ``timeout_seconds`` generous, so a loaded machine does not fail a test;
        ``sleep``: how the admin client waits between its attempts. Stalled answers are
        released as it closes."""
        async with aiohttp.ClientSession() as session:
            settings = ControllerConfig(
                slo=SLO, queries=self.queries, static_targets=self.static_targets(server),
                state_path=tmp / "state.json", audit_path=tmp / "audit.jsonl", **config)
            registry, clock = CollectorRegistry(), FakeClock()
            reconciler = Reconciler(
                settings,
                PrometheusClient(session, str(server.make_url("/")), self.queries,
                                 timeout_seconds=timeout_seconds),
                BatchingClient(session, Secret(TOKEN), timeout_seconds=timeout_seconds,
                               sleep=sleep),
                StateStore(settings.state_path, clock=clock), AuditLog(settings.audit_path),
                ControllerMetrics(registry), AlertBook(), clock=clock)
            try:
                yield Stack(reconciler, registry, clock, tmp)
            finally:
                self.released.set()

    # ---- Prometheus ------------------------------------------------------------------------

    async def _query(self, request: web.Request) -> web.StreamResponse:
        samples = self._samples(request.query.get("query", ""))
        body = {"status": "success", "data": {"resultType": "vector", "result": samples}}
        return await self._send(request, "prometheus", 200, json.dumps(body).encode(), {})

    def _samples(self, expr: str) -> list[dict[str, Any]]:
        queries = self.queries
        if expr == queries.targets():
            return self._each("up", 1.0, "job", ("inference",))
        fields = {e: n for n, e in queries.expressions().items()}
        if expr in fields:
            engines = self.engines or tuple(str(rank) for rank in range(self.ranks))
            return self._each(fields[expr], self.values.get(fields[expr]), "engine", engines)
        staged = {e: n for n, e in queries.stage_expressions().items()}
        if expr in staged:
            return self._each(staged[expr], self.stage_seconds, "stage", self.stages)
        verdicts = {e: n for n, e in queries.verdict_expressions().items()}
        if expr in verdicts:
            return self._each(verdicts[expr], 0.5 if self.causes else None, "cause",
                              self.causes or verdict_causes.NAMES)
        return []

    def _each(self, series: str, value: float | None, label: str, label_values: tuple[str, ...]
              ) -> list[dict[str, Any]]:
        """One sample per target and label value: the target's own value of ``series``, else
        ``value`` (``None``: the target has no such series)."""
        out: list[dict[str, Any]] = []
        for index, name in enumerate(self.names()):
            own = self.target_values.get(index, {}).get(series, value)
            if own is not None:
                out.extend(_sample({"instance": name, label: v}, own) for v in label_values)
        return out

    # ---- the admin API ---------------------------------------------------------------------

    async def _admin(self, request: web.Request) -> web.StreamResponse:
        index = int(request.match_info["index"])
        name = f"t{index:03d}:8000"
        self.calls.append((name, request.method))
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return await self._send(request, "admin", 401, b'{"error": {"message": "no"}}', {})
        wanted = await request.json() if request.method == "PUT" else None
        if wanted is not None:
            self.puts.append((name, wanted))
        hostile = self.hostile.get(index)
        if hostile is not None:
            if hostile.stall:
                await self.released.wait()
            body = hostile.body if isinstance(hostile.body, bytes) else \
                json.dumps(hostile.body).encode()
            return await self._send(request, "admin", hostile.status, body, hostile.headers)
        if wanted is not None:
            current = self.limits.get(name, CEILING)
            self.limits[name] = Limits(wanted.get("max_num_seqs", current.max_num_seqs),
                                       wanted.get("max_num_batched_tokens",
                                                  current.max_num_batched_tokens))
        return await self._send(request, "admin", 200, json.dumps(self.report(name)).encode(),
                                {})

    async def _admission(self, request: web.Request) -> web.StreamResponse:
        """The gate's bound, as the route in front of stock vLLM answers it: a ``PUT`` checked
        by the contract (422 out of range), and the bound in force."""
        name = f"t{int(request.match_info['index']):03d}:8000"
        self.calls.append((name, request.method))
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return await self._send(request, "admin", 401, b'{"error": {"message": "no"}}', {})
        bound = self.admission.get(name, AdmissionBound(1.0, None, vllm_queued_tokens=True))
        if request.method == "PUT":
            wanted = await request.json()
            self.admission_puts.append((name, wanted))
            try:
                bound = self.admission[name] = requested(wanted, bound)
            except BodyError as exc:
                error = {"error": {"message": exc.message, "param": exc.param}}
                return await self._send(request, "admin", exc.status, json.dumps(error).encode(),
                                        {})
        body = {**bound.as_dict(), "deadlines": {"default": bound.deadline_slack}}
        return await self._send(request, "admin", 200, json.dumps(body).encode(), {})

    def report(self, name: str) -> dict[str, Any]:
        """What stock vLLM with Governor's plugins answers: the limits, and each rank's own."""
        current = self.limits.get(name, CEILING)
        rank = {"strategy": "scheduler_config", **current.as_dict(),
                "ceiling": CEILING.as_dict(), "steps": 123456, "retunes": 7}
        return {**current.as_dict(), "floor": FLOOR.as_dict(), "ceiling": CEILING.as_dict(),
                "ranks": [rank] * self.ranks}

    # ---- the wire ----------------------------------------------------------------------------

    async def _send(self, request: web.Request, kind: str, status: int, body: bytes,
                    headers: Mapping[str, str]) -> web.StreamResponse:
        pieces = self.pieces
        response = web.StreamResponse(status=status, headers={
            "Content-Type": "application/json", **headers})
        response.enable_chunked_encoding()
        await asyncio.sleep(pieces.first_byte_seconds)
        await response.prepare(request)
        count = 0
        for start in range(0, len(body), pieces.size):
            if count:
                await asyncio.sleep(pieces.delay_seconds)
            await response.write(body[start:start + pieces.size])
            count += 1
        await response.write_eof()
        self.sent[kind].append(count)
        return response


@dataclass
class Stack:
    """The controller under test, its registry, clock and files."""

    reconciler: Reconciler
    registry: CollectorRegistry
    clock: FakeClock
    tmp: Path

    def audit(self) -> list[dict[str, Any]]:
        path = self.tmp / "audit.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] \
            if path.exists() else []

    def series(self, name: str) -> int:
        """How many samples the controller's registry exposes under ``name``."""
        return sum(1 for family in self.registry.collect() for sample in family.samples
                   if sample.name == name)

    def labels(self, name: str) -> list[dict[str, str]]:
        """The label sets of the samples the controller's registry exposes under ``name``."""
        return [sample.labels for family in self.registry.collect()
                for sample in family.samples if sample.name == name]

    def metric(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, labels)


def _sample(labels: dict[str, str], value: float) -> dict[str, Any]:
    text = "NaN" if math.isnan(value) else repr(value) if math.isfinite(value) else \
        ("+Inf" if value > 0 else "-Inf")
    return {"metric": labels, "value": [1_700_000_000.0, text]}
