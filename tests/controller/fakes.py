"""Fakes of what the controller talks to: an admin API, an observer, an actuator, a clock."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from governor.controller.actuator import ActuationError, ErrorKind
from governor.controller.model import Limits, Observation, Target, TargetLimits
from governor.controller.observe import PrometheusError, Snapshot

FLOOR = Limits(1, 256)
CEILING = Limits(1024, 8192)


@dataclass
class FakeClock:
    now: float = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class AdminServer:
    """The inference service's admin API (docs/api.md), with scripted failures."""

    token: str = "admin-token"
    limits: Limits = CEILING
    failures: list[int] = field(default_factory=list)  # statuses to answer before succeeding
    puts: list[dict[str, Any]] = field(default_factory=list)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/admin/batching", self.get)
        app.router.add_put("/admin/batching", self.put)
        return app

    def _body(self) -> dict[str, Any]:
        return {**self.limits.as_dict(), "floor": FLOOR.as_dict(), "ceiling": CEILING.as_dict()}

    def _error(self, status: int, message: str) -> web.Response:
        headers = {"Retry-After": "0"} if status in (429, 503) else {}
        return web.json_response({"error": {"message": message, "type": "x", "param": None,
                                            "code": None}}, status=status, headers=headers)

    async def get(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return self._error(401, "a valid bearer token is required")
        return web.json_response(self._body())

    async def put(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return self._error(401, "a valid bearer token is required")
        if self.failures:
            return self._error(self.failures.pop(0), "scripted failure")
        body = await request.json()
        self.puts.append(body)
        wanted = Limits(body.get("max_num_seqs", self.limits.max_num_seqs),
                        body.get("max_num_batched_tokens", self.limits.max_num_batched_tokens))
        if not (FLOOR.max_num_seqs <= wanted.max_num_seqs <= CEILING.max_num_seqs
                and FLOOR.max_num_batched_tokens <= wanted.max_num_batched_tokens
                <= CEILING.max_num_batched_tokens):
            return self._error(422, "out of range")
        self.limits = wanted
        return web.json_response(self._body())


@dataclass
class FakeObserver:
    """Answers snapshots from a dict the test edits; ``error`` makes Prometheus 'down'."""

    observations: dict[str, Observation] = field(default_factory=dict)
    scraped: set[str] = field(default_factory=set)
    error: str | None = None

    async def snapshot(self, instances: Iterable[str]) -> Snapshot:
        if self.error:
            raise PrometheusError(self.error)
        return Snapshot(dict(self.observations), frozenset(self.scraped))


@dataclass
class FakeActuator:
    """An in-memory admin API; ``errors`` are raised (once each) before anything succeeds."""

    limits: dict[str, Limits] = field(default_factory=dict)
    errors: list[ActuationError] = field(default_factory=list)
    applied: list[tuple[str, Limits]] = field(default_factory=list)
    slacks: list[tuple[str, float]] = field(default_factory=list)
    queued_tokens: list[tuple[str, int | None]] = field(default_factory=list)
    reads: int = 0

    async def read(self, target: Target) -> TargetLimits:
        self.reads += 1
        if self.errors:
            raise self.errors.pop(0)
        return TargetLimits(self.limits.setdefault(target.name, CEILING), FLOOR, CEILING)

    async def apply(self, target: Target, limits: Limits) -> TargetLimits:
        self.applied.append((target.name, limits))
        self.limits[target.name] = limits
        return TargetLimits(limits, FLOOR, CEILING)

    async def set_slack(self, target: Target, slack: float) -> float:
        self.slacks.append((target.name, slack))
        return slack

    async def set_queued_tokens(self, target: Target, bound: int | None) -> int | None:
        self.queued_tokens.append((target.name, bound))
        return bound


def temporary(message: str = "HTTP 503: engine not ready") -> ActuationError:
    return ActuationError(ErrorKind.TEMPORARY, message, status=503)


def permanent(message: str = "HTTP 501: cannot retune live") -> ActuationError:
    return ActuationError(ErrorKind.PERMANENT, message, status=501)
