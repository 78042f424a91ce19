"""The scale-out signal over two replicas: the fleet's size counts both replicas' capacity.

Two targets behind a round-robin get the same demand. Each is overloaded by a quarter (demand
10 req/s, 8 served): together they need 2.5 replicas' worth, three replicas. The gauge carries
each target's share unrounded, so the autoscaler's sum, rounded up once, asks for three; each
target rounded up alone would have asked for four. On a fake clock, through the real law and
reconciler.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from prometheus_client import CollectorRegistry

from governor.contracts.metrics import controller as names
from governor.controller.audit import AuditLog
from governor.controller.config import ControllerConfig
from governor.controller.intake import AlertBook
from governor.controller.law.tuning import LawConfig
from governor.controller.metrics import ControllerMetrics
from governor.controller.model import Limits, Observation, SloTargets, Target
from governor.controller.queries import QuerySet
from governor.controller.reconciler import Reconciler
from governor.controller.state import StateStore
from tests.controller.fakes import FakeActuator, FakeClock, FakeObserver

SLO = SloTargets(0.12, 0.99, 1.0, 0.99)
A, B = Target("a:8000", "http://a:8000"), Target("b:8000", "http://b:8000")
# Prefill saturated, a backlog growing by 2 req/s, first tokens late, decode at the SLO.
OVERLOADED = Observation(
    itl_tail_seconds=0.118, itl_median_seconds=0.02, itl_tail_long_seconds=0.118,
    ttft_tail_seconds=30.0, ttft_good_per_second=0.5, ttft_per_second=8.0, itl_good_ratio=0.99,
    prompt_tokens_per_second=36000.0, generation_tokens_per_second=9000.0,
    requests_running=64.0, requests_waiting=400.0, waiting_growth_per_second=2.0,
    kv_cache_usage_ratio=0.2, preemptions_per_second=0.0)
CALM = replace(OVERLOADED, itl_tail_seconds=0.009, itl_tail_long_seconds=0.009,
               ttft_tail_seconds=0.2, ttft_good_per_second=5.0, ttft_per_second=5.0,
               requests_waiting=0.0, waiting_growth_per_second=0.0)


async def advice_after_a_while(tmp_path: Path, a: Observation, b: Observation
                               ) -> dict[str, float]:
    """Each target's gauge once the law has had ``overload_seconds`` and more to judge."""
    clock, registry = FakeClock(), CollectorRegistry()
    config = ControllerConfig(slo=SLO, queries=QuerySet.default(), static_targets=(A, B),
                              state_path=tmp_path / "state.json",
                              audit_path=tmp_path / "audit.jsonl")
    actuator = FakeActuator({A.name: Limits(1024, 2048), B.name: Limits(1024, 2048)})
    reconciler = Reconciler(config, FakeObserver({A.name: a, B.name: b}), actuator,
                            StateStore(config.state_path), AuditLog(config.audit_path),
                            ControllerMetrics(registry), AlertBook(), clock=clock)
    for _ in range(math.ceil(LawConfig().overload_seconds / 15) + 4):
        await reconciler.reconcile_once()
        clock.now += 15
    return {metric.labels["target"]: metric.value
            for family in registry.collect() if family.name == names.DESIRED_REPLICAS.name
            for metric in family.samples}


async def test_two_replicas_overloaded_by_a_quarter_each_ask_for_three_not_four(
        tmp_path: Path) -> None:
    advice = await advice_after_a_while(tmp_path, OVERLOADED, OVERLOADED)
    assert advice == {A.name: 1.25, B.name: 1.25}  # demand 10 by 8 served, each
    assert math.ceil(sum(advice.values())) == 3  # the autoscalers' sum, rounded up once


async def test_one_overloaded_replica_beside_a_calm_one_counts_the_calm_one_as_one(
        tmp_path: Path) -> None:
    advice = await advice_after_a_while(tmp_path, OVERLOADED, CALM)
    assert advice == {A.name: 1.25, B.name: 1.0}
    assert math.ceil(sum(advice.values())) == 3
