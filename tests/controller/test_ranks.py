"""Data-parallel ranks: the law judges the worst rank, and one change retunes the whole server.

Table-driven on :func:`governor.controller.ranks.judge`, then the whole chain on a fake clock: a
Prometheus answering vLLM's per-engine series for one server with two ranks, rank 1 alone over
the SLO, through the controller's real client, law and reconciler to one change of the server's
limits and an audit line that names the rank.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from prometheus_client import CollectorRegistry

from governor.contracts.metrics import controller as names
from governor.controller.audit import AuditLog
from governor.controller.config import ControllerConfig
from governor.controller.intake import AlertBook
from governor.controller.metrics import ControllerMetrics
from governor.controller.model import Target
from governor.controller.observe import PrometheusClient
from governor.controller.ranks import MAX_RANK_LENGTH, MAX_RANKS, judge, rank_order
from governor.controller.reconciler import Reconciler
from governor.controller.slo import objectives
from governor.controller.state import StateStore
from governor.generation.catalog import load_checked_spec
from tests.controller.fakes import CEILING, FakeActuator, FakeClock

ROOT = Path(__file__).resolve().parents[2]
STOCK = load_checked_spec(ROOT / "examples" / "stock-vllm" / "slo.yaml")
ServerFactory = Callable[[web.Application], Awaitable[TestServer]]


# -- which rank ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("by_rank", "rank", "tail"),
    [
        ({"itl_tail_seconds": {"0": 0.04, "1": 0.18}}, "1", 0.18),
        ({"itl_tail_seconds": {"0": 0.18, "1": math.nan}}, "0", 0.18),
        ({"itl_tail_seconds": {"": 0.15}, "prompt_tokens_per_second": {"0": 900.0, "1": 4000.0}},
         "1", 0.15),
        ({"itl_tail_seconds": {"0": 0.05, "1": 0.05}}, "0", 0.05),
        ({"itl_tail_seconds": {"2": 0.05, "10": 0.09}}, "10", 0.09),
        ({"itl_tail_seconds": {"0": math.nan, "1": math.nan}}, "0", None),
    ],
    ids=["the rank over its SLO", "a rank without data is never the worst",
         "the service's own tail names no rank: the rank prefilling most",
         "a tie: the lowest rank", "ranks compare as numbers", "no rank has a tail: no data"],
)
def test_the_law_judges_the_rank_with_the_highest_tail(
        by_rank: dict[str, dict[str, float]], rank: str, tail: float | None) -> None:
    seen = judge(by_rank)
    assert (seen.rank, seen.values["itl_tail_seconds"]) == (rank, tail)


def test_the_judged_ranks_own_numbers_except_what_any_rank_may_raise() -> None:
    seen = judge({
        "itl_tail_seconds": {"0": 0.04, "1": 0.18},
        "requests_running": {"0": 40.0, "1": 9.0},
        "prompt_tokens_per_second": {"0": 800.0, "1": 6000.0},
        "kv_cache_usage_ratio": {"0": 0.97, "1": 0.3},
        "preemptions_per_second": {"0": 0.5, "1": 0.0},
        "ttft_tail_seconds": {"0": 2.5, "1": 0.4},
        "stage_free_histogram": {"": 0.7},  # a series that names no rank counts for every rank
    })
    assert seen.rank == "1"
    assert seen.values == {
        "itl_tail_seconds": 0.18, "requests_running": 9.0, "prompt_tokens_per_second": 6000.0,
        "kv_cache_usage_ratio": 0.97, "preemptions_per_second": 0.5, "ttft_tail_seconds": 2.5,
        "stage_free_histogram": 0.7}
    assert seen.tails == {"0": 0.04, "1": 0.18}


def test_one_engine_names_no_rank() -> None:
    seen = judge({"itl_tail_seconds": {"0": 0.18}, "requests_running": {"0": 4.0}})
    assert (seen.rank, seen.tails, seen.values["requests_running"]) == (None, {}, 4.0)


def test_hostile_engine_labels_cannot_grow_the_observation() -> None:
    many = {str(i): 0.01 for i in range(MAX_RANKS * 4)}
    long = "9" * (MAX_RANK_LENGTH + 1)
    seen = judge({"itl_tail_seconds": {**many, long: 99.0, "x": 0.02}})
    assert len(seen.tails) == MAX_RANKS
    assert long not in seen.tails and seen.values["itl_tail_seconds"] == 0.01
    assert sorted(["x", "10", "2", "٣"], key=rank_order) == ["2", "10", "x", "٣"]


# -- the whole chain ----------------------------------------------------------------------------
INSTANCE = "vllm-0:8000"
# Per rank: rank 1 decodes beside documents' prefill and breaches; rank 0 serves chats calmly.
RANK_VALUES: dict[str, dict[str, float]] = {
    "itl_tail_seconds": {"0": 0.041, "1": 0.18},
    "itl_tail_long_seconds": {"0": 0.04, "1": 0.17},
    "itl_median_seconds": {"0": 0.006, "1": 0.007},
    "itl_mean_seconds": {"0": 0.007, "1": 0.012},
    "itl_spike_seconds": {"0": 0.05, "1": 0.19},
    "itl_good_ratio": {"0": 1.0, "1": 0.97},
    "prompt_tokens_per_second": {"0": 2000.0, "1": 9000.0},
    "generation_tokens_per_second": {"0": 4000.0, "1": 4000.0},
    "requests_running": {"0": 30.0, "1": 32.0},
    "requests_waiting": {"0": 0.0, "1": 0.0},
    "waiting_growth_per_second": {"0": 0.0, "1": 0.0},
    "kv_cache_usage_ratio": {"0": 0.2, "1": 0.3},
    "preemptions_per_second": {"0": 0.0, "1": 0.0},
    "ttft_tail_seconds": {"0": 0.2, "1": 0.3},
    "ttft_per_second": {"0": 6.0, "1": 6.0},
    "ttft_good_per_second": {"0": 6.0, "1": 6.0},
}


def prometheus(exprs: dict[str, str], targets: str) -> web.Application:
    """Answers each of the controller's expressions as Prometheus would for one server with
    two data-parallel ranks (one sample per ``instance`` and ``engine``)."""
    answers: dict[str, list[dict[str, Any]]] = {
        exprs[name]: [{"metric": {"instance": INSTANCE, "engine": rank}, "value": [0, str(v)]}
                      for rank, v in values.items()]
        for name, values in RANK_VALUES.items()}
    answers[targets] = [{"metric": {"instance": INSTANCE}, "value": [0, "1"]}]

    async def query(request: web.Request) -> web.Response:
        return web.json_response({"status": "success", "data": {
            "resultType": "vector", "result": answers.get(request.query["query"], [])}})

    app = web.Application()
    app.router.add_get("/api/v1/query", query)
    return app


async def test_a_breach_on_one_rank_retunes_the_server_and_the_audit_names_the_rank(
        aiohttp_server: ServerFactory, tmp_path: Path) -> None:
    goals = objectives(STOCK)
    exprs = goals.queries.expressions()
    # Every quantity the law reads per rank; the rules' burn ratio, per server, is not answered
    # here (no rules: the law acts at once), nor the admission gate's series (no gate: the law
    # leaves its slack alone).
    assert set(exprs) - {"itl_verdict_burn", "deadline_slack", "vllm_max_num_queued_tokens",
                         "admission_refused_per_second"} == set(RANK_VALUES)
    server = await aiohttp_server(prometheus(exprs, goals.queries.targets()))
    target = Target(INSTANCE, f"http://{INSTANCE}")
    config = ControllerConfig(slo=goals.slo, queries=goals.queries, static_targets=(target,),
                              state_path=tmp_path / "state.json",
                              audit_path=tmp_path / "audit.jsonl")
    actuator, registry = FakeActuator(), CollectorRegistry()
    async with aiohttp.ClientSession() as session:
        observer = PrometheusClient(session, str(server.make_url("/")), goals.queries)
        reconciler = Reconciler(config, observer, actuator, StateStore(config.state_path),
                                AuditLog(config.audit_path), ControllerMetrics(registry),
                                AlertBook(), clock=FakeClock())
        await reconciler.reconcile_once()
    # Rank 1 alone is over the SLO (100 ms on vLLM's buckets); rank 0 is well under it.
    assert goals.slo.itl_seconds == pytest.approx(0.1)
    ((name, limits),) = actuator.applied  # one change, for the server: every rank moves
    assert name == INSTANCE
    assert limits.max_num_batched_tokens < CEILING.max_num_batched_tokens
    line = reconciler.targets[INSTANCE].last_decision
    assert line is not None
    assert (line["action"], line["reason"]) == ("tighten", "itl_breach")
    assert line["ranks"] == {"judged": "1", "of": 2,
                             "itl_tail_seconds": {"0": 0.041, "1": 0.18}}
    assert "rank 1 of 2: ITL p99 180 ms" in line["explanation"]
    assert line["inputs"]["prompt_tokens_per_second"] == 9000.0  # rank 1's, not the sum
    assert registry.get_sample_value(names.OBSERVED.name, {
        "target": INSTANCE, "quantity": "itl_tail_seconds.rank.0"}) == 0.041

