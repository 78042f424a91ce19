"""Reading observations from Prometheus's HTTP API."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from governor.controller.model import Observation
from governor.controller.observe import (
    MAX_READING,
    PrometheusClient,
    PrometheusError,
    assemble,
    parse_vector,
    parse_vector_by,
)
from governor.controller.queries import QuerySet

ServerFactory = Callable[[web.Application], Awaitable[TestServer]]


def vector(*samples: tuple[str, str]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"instance": i}, "value": [1.0, v]} for i, v in samples]}}


def test_a_labelled_reading_past_any_measurement_is_no_data() -> None:
    # The stage guard adds a target's stage readings up: two near the float's largest sum to
    # +Inf, which the audit line cannot write.
    body = {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"instance": "a", "stage": stage}, "value": [1.0, value]}
        for stage, value in (("prefill", "1.7e308"), ("decode", repr(MAX_READING)),
                             ("read", "-1e16"), ("parse", "NaN"), ("render", "0.25"))]}}
    assert parse_vector_by(body, "stage") == {"a": {"decode": MAX_READING, "render": 0.25}}


def test_parse_vector_keeps_nan_and_infinity_for_the_law_to_reject() -> None:
    out = parse_vector(vector(("a", "NaN"), ("b", "+Inf"), ("c", "0.5")))
    assert math.isnan(out["a"])
    assert out["b"] == math.inf
    assert out["c"] == 0.5


@pytest.mark.parametrize(
    "body",
    [
        {"status": "error", "errorType": "bad_data", "error": "parse error"},
        {"status": "success", "data": {"resultType": "matrix", "result": []}},
        {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}}]}},
        {"status": "success", "data": {"resultType": "vector",
                                       "result": [{"metric": {"instance": "a"},
                                                   "value": [1, "x"]}]}},
        ["not", "an", "object"],
    ],
    ids=["error answer", "range vector", "sample without value", "non-numeric value",
         "not an object"],
)
def test_parse_vector_rejects_what_is_not_an_instant_vector(body: Any) -> None:
    with pytest.raises(PrometheusError):
        parse_vector(body)


def test_assemble_fills_absent_and_non_finite_values_with_none() -> None:
    obs = assemble({"itl_tail_seconds": {"a": {"": 0.2}, "b": {"": math.nan}},
                    "itl_median_seconds": {"a": {"": 0.01}}}, ["a", "b", "c"])
    assert obs["a"].itl_tail_seconds == 0.2
    assert obs["b"].itl_tail_seconds is None
    assert obs["c"].itl_median_seconds is None


def test_the_gates_slack_and_vllms_bound_outside_the_contract_are_refused_by_name() -> None:
    """Issue 32, N5: the two readings the law keeps and puts back are held to the admin API's
    contract where they enter; +Inf is vLLM's bound while unbounded, a reading, not a gap."""
    obs = assemble({"deadline_slack": {"a": {"": 1e30}, "b": {"": 0.7}, "c": {"": math.nan},
                                       "d": {"": 1e-6}},
                    "vllm_max_num_queued_tokens": {"a": {"": 8192.5}, "b": {"": math.inf},
                                                   "c": {"": 8192.0}}}, ["a", "b", "c", "d"])
    a, b, c = obs["a"], obs["b"], obs["c"]
    assert (a.deadline_slack, a.vllm_max_num_queued_tokens) == (None, None)
    assert a.refused == {
        "deadline_slack": "1e+30 is not a deadline slack within [0.01, 100]",
        "vllm_max_num_queued_tokens": "8192.5 is not a whole number from 1 to 1000000000000, or "
                                      "+Inf (unbounded)"}
    assert (b.deadline_slack, b.vllm_max_num_queued_tokens, b.refused) == (0.7, math.inf, {})
    assert (c.deadline_slack, c.vllm_max_num_queued_tokens) == (None, 8192.0)
    assert c.refused == {"deadline_slack": "nan is not a deadline slack within [0.01, 100]"}
    assert obs["d"].refused == {
        "deadline_slack": "1e-06 is not a deadline slack within [0.01, 100]"}


def test_a_reading_past_any_measurement_is_refused_and_no_data_is_not() -> None:
    """Any other reading past 10^15 is no measurement (the law's sums of two such overflow);
    NaN and ±Inf stay what they always were, no data."""
    obs = assemble({"itl_tail_seconds": {"a": {"": -1.7e308}, "b": {"": math.inf},
                                         "c": {"0": 0.05, "1": 1e30}}}, ["a", "b", "c"])
    assert obs["a"].itl_tail_seconds is None
    assert obs["a"].refused == {"itl_tail_seconds": "-1.7e+308 is not a number within ±1e+15"}
    assert (obs["b"].itl_tail_seconds, obs["b"].refused) == (None, {})
    assert obs["c"].itl_tail_seconds is None and obs["c"].rank_itl_tails == {}
    assert obs["c"].refused == {"itl_tail_seconds": "1e+30 is not a number within ±1e+15"}


def test_series_without_ranks_and_a_single_engine_read_as_they_always_did() -> None:
    """The service's own histograms name no rank and the sim's one engine is ``engine="0"``:
    the observation is the one the queries summed by instance before ranks were kept."""
    plain = Observation(0.2, 0.01, kv_cache_usage_ratio=0.4, requests_running=12.0)
    obs = assemble({"itl_tail_seconds": {"a": {"": 0.2}}, "itl_median_seconds": {"a": {"": 0.01}},
                    "kv_cache_usage_ratio": {"a": {"0": 0.4}},
                    "requests_running": {"a": {"0": 12.0}}}, ["a"])
    assert obs["a"] == plain
    assert obs["a"].ranks() is None
    assert not any(".rank." in name for name in obs["a"].as_inputs())


def prometheus_app(answers: dict[str, dict[str, Any]], status: int = 200) -> web.Application:
    async def query(request: web.Request) -> web.Response:
        expr = request.query["query"]
        return web.json_response(answers.get(expr, vector()), status=status)

    app = web.Application()
    app.router.add_get("/api/v1/query", query)
    return app


async def test_snapshot_queries_every_expression_and_discovers_scraped_instances(
    aiohttp_server: ServerFactory,
) -> None:
    queries = QuerySet.default()
    exprs = queries.expressions()
    answers = {
        queries.targets(): vector(("a:8000", "1"), ("b:8000", "0")),
        exprs["itl_tail_seconds"]: vector(("a:8000", "0.21")),
        exprs["itl_median_seconds"]: vector(("a:8000", "0.007")),
        exprs["kv_cache_usage_ratio"]: vector(("a:8000", "0.3"), ("b:8000", "0.1")),
    }
    server = await aiohttp_server(prometheus_app(answers))
    async with aiohttp.ClientSession() as session:
        client = PrometheusClient(session, str(server.make_url("/")), queries)
        snap = await client.snapshot(["static:9000"])
    assert snap.scraped_instances == {"a:8000", "b:8000"}
    assert set(snap.observations) == {"a:8000", "b:8000", "static:9000"}
    a = snap.observations["a:8000"]
    assert (a.itl_tail_seconds, a.itl_median_seconds, a.kv_cache_usage_ratio) == (0.21, 0.007,
                                                                                   0.3)
    assert snap.observations["static:9000"].itl_tail_seconds is None


async def test_the_stage_medians_and_the_engines_tails_reach_each_instances_observation(
    aiohttp_server: ServerFactory,
) -> None:
    queries = QuerySet.default()
    staged = queries.stage_expressions()

    def by_stage(*samples: tuple[str, str, str]) -> dict[str, Any]:
        return {"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": {"instance": i, "stage": s}, "value": [0, v]} for i, s, v in samples]}}

    answers = {
        queries.targets(): vector(("a:8000", "1"), ("b:8000", "1")),
        staged["stage_seconds"]: by_stage(("a:8000", "tokenize", "0.9"),
                                          ("a:8000", "decode", "2"), ("b:8000", "decode", "NaN")),
        staged["stage_seconds_long"]: by_stage(("a:8000", "tokenize", "0.01")),
        staged["stage_tail_seconds"]: by_stage(("a:8000", "admission", "0.005"),
                                               ("a:8000", "engine_queue", "0.02"),
                                               ("a:8000", "prefill", "0.2"),
                                               ("b:8000", "prefill", "0.5")),
    }
    server = await aiohttp_server(prometheus_app(answers))
    async with aiohttp.ClientSession() as session:
        client = PrometheusClient(session, str(server.make_url("/")), queries)
        snap = await client.snapshot([])
    a, b = snap.observations["a:8000"], snap.observations["b:8000"]
    assert a.stage_seconds == {"tokenize": 0.9, "decode": 2.0}
    assert a.stage_seconds_long == {"tokenize": 0.01}
    assert b.stage_seconds == {}  # a stage without requests in the window has no mean
    inputs = a.as_inputs()
    assert inputs["stage_growth_seconds.tokenize"] == pytest.approx(0.89)
    assert inputs["stage_growth_seconds.decode"] is None  # no long-window reading
    assert "stage_seconds" not in inputs
    # The engine's stages before the first token, together; not without each of them.
    assert a.stage_tail_seconds == {"admission": 0.005, "engine_queue": 0.02, "prefill": 0.2}
    assert inputs["ttft_engine_tail_seconds"] == pytest.approx(0.225)
    assert b.as_inputs()["ttft_engine_tail_seconds"] is None
    assert not any(name.startswith("stage_tail_seconds") for name in inputs)


@pytest.mark.parametrize("status", [500, 503, 429])
async def test_a_failing_prometheus_is_a_prometheus_error(aiohttp_server: ServerFactory,
                                                          status: int) -> None:
    server = await aiohttp_server(prometheus_app({}, status=status))
    async with aiohttp.ClientSession() as session:
        client = PrometheusClient(session, str(server.make_url("/")), QuerySet.default())
        with pytest.raises(PrometheusError, match=str(status)):
            await client.snapshot([])


async def test_an_unreachable_prometheus_is_a_prometheus_error() -> None:
    async with aiohttp.ClientSession() as session:
        client = PrometheusClient(session, "http://127.0.0.1:9", QuerySet.default(),
                                  timeout_seconds=1.0)
        with pytest.raises(PrometheusError):
            await client.query("up")


async def test_the_verdict_reaches_each_instances_observation(
    aiohttp_server: ServerFactory,
) -> None:
    queries = replace(QuerySet.default(), service="inference", itl_slo="inter-token-latency",
                      ttft_slo="time-to-first-token")
    verdicts = queries.verdict_expressions()

    def by_cause(*samples: tuple[str, str, str]) -> dict[str, Any]:
        return {"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": {"instance": i, "cause": c}, "value": [0, v]} for i, c, v in samples]}}

    answers = {
        queries.targets(): vector(("a:8000", "1"), ("b:8000", "1")),
        verdicts["itl_causes"]: by_cause(("a:8000", "gpu_throttled", "0.8"),
                                         ("a:8000", "batching", "0.2")),
        verdicts["ttft_causes"]: by_cause(("b:8000", "queue", "1")),
    }
    server = await aiohttp_server(prometheus_app(answers))
    async with aiohttp.ClientSession() as session:
        client = PrometheusClient(session, str(server.make_url("/")), queries)
        snap = await client.snapshot([])
    a, b = snap.observations["a:8000"], snap.observations["b:8000"]
    assert a.itl_causes == {"gpu_throttled": 0.8, "batching": 0.2} and a.ttft_causes == {}
    assert b.ttft_causes == {"queue": 1.0} and b.itl_causes == {}
    assert a.as_inputs()["itl_causes.gpu_throttled"] == 0.8


def test_the_bounded_readings_are_observation_fields_the_queries_read() -> None:
    """The law's two kept readings are named once (governor.controller.model): each must be a
    field of the observation, read by the queries, and checked where it enters."""
    from dataclasses import fields

    from governor.controller.law import admission, queued_tokens
    from governor.controller.model import QUEUED_TOKENS_FIELD, SLACK_FIELD
    from governor.controller.observe import BOUNDED
    names = {f.name for f in fields(Observation)}
    assert set(BOUNDED) == {SLACK_FIELD, QUEUED_TOKENS_FIELD} <= names
    assert (admission.FIELD, queued_tokens.FIELD) == (SLACK_FIELD, QUEUED_TOKENS_FIELD)
    assert set(BOUNDED) <= set(QuerySet.default().expressions())
