"""The controller's queries on stock vLLM's series, evaluated by the real Prometheus engine.

Each expression of :class:`governor.controller.queries.QuerySet`, built from a spec whose SLIs
are vLLM's histograms (its default buckets, or custom ones), becomes a recording rule that
``promtool test rules`` evaluates over synthetic vLLM series: one instance with two data-parallel
engines (``engine="0"``, ``engine="1"``) whose samples differ, so every input of the law must
answer one value per engine (the law judges the worst rank, :mod:`governor.controller.ranks`),
and the good-event queries must find the ``le`` bucket at the threshold as vLLM writes it.
Engine 1 alone breaches the inter-token SLO, by a tail that the two engines' merged histogram
would hide. The expected quantiles come from the benchmark's model of ``histogram_quantile``,
which is thereby checked against Prometheus's.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from governor.bench.controller.monitoring import histogram_quantile
from governor.contracts.metrics import vllm
from governor.contracts.metrics.scrape import LABEL_INSTANCE, LABEL_JOB, LABEL_LE
from governor.contracts.promql import Selector, eq, equal_to, exposition_float, format_number
from governor.controller.queries import SPIKE_QUANTILE
from governor.controller.ranks import judge
from governor.controller.slo import objectives
from governor.generation.catalog import histogram_edges, load_checked_spec, parse_checked_spec
from governor.slo.spec import SloSpec

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
STOCK = ROOT / "examples" / "stock-vllm" / "slo.yaml"
INSTANCE = "vllm-0:8000"
STEP = 15  # seconds between samples; every counter grows by the same amount each step
STEPS = 40
EVAL = "10m"
ENGINES = ("0", "1")
# Per engine and per step: inter-token gaps and first tokens (seconds), and the engine's counters
# and gauges. Engine 1 holds the slow gaps (1.5% of its own, 0.75% of both engines': its P99
# breaches, the merged one does not) and the slow first token, so a query that sums the engines,
# or reads one of them for both, answers something else.
ITL = {"0": [0.02] * 200, "1": [0.02] * 197 + [0.18] * 3}
TTFT = {"0": [0.3] * 9, "1": [2.0]}
PROMPT = {"0": 1500, "1": 4500}
GENERATION = {"0": 150, "1": 250}
PREEMPTIONS = {"0": 0, "1": 3}
RUNNING = {"0": 5, "1": 7}
KV = {"0": 0.3, "1": 0.6}
WAITING_START = {"0": 0, "1": 2}
WAITING_GROWTH = {"0": 1, "1": 0}  # per step
TOLERANCE = 1e-9  # relative


def spec_with_custom_buckets() -> SloSpec:
    data: dict[str, Any] = yaml.safe_load(STOCK.read_text(encoding="utf-8"))
    data["vllm"] = {"custom_histogram_buckets": {
        "inter_token_latency": [0.01, 0.025, 0.05, 0.1, 0.12, 0.15, 0.2, 0.5, 1]}}
    data["slos"][0]["sli"]["latency"]["threshold"] = "120ms"
    return parse_checked_spec(data)


SPECS = {"vLLM's default buckets (100 ms)": lambda: load_checked_spec(STOCK),
         "custom buckets (120 ms)": spec_with_custom_buckets}


def labels(spec: SloSpec, engine: str, **extra: str) -> dict[str, str]:
    return {**dict(spec.targets.inference.selector), LABEL_JOB: spec.targets.inference.job,
            LABEL_INSTANCE: INSTANCE, vllm.LABEL_ENGINE: engine, vllm.LABEL_MODEL: "llama",
            **extra}


def counter(name: str, series_labels: dict[str, str], per_step: float,
            start: float = 0.0) -> dict[str, str]:
    return {"series": Selector(name, equal_to(series_labels)).render(),
            "values": f"{start:g}+{per_step:g}x{STEPS}"}


def histogram(spec: SloSpec, metric: str, samples: dict[str, list[float]], *,
              normalised: bool) -> list[dict[str, str]]:
    """``normalised``: ``le`` as Prometheus 3 stores it (``1``), not as vLLM writes it (``1.0``)."""
    edges = histogram_edges(spec)[metric]
    series = []
    for engine, values in samples.items():
        for edge in (*edges, float("inf")):
            if edge == float("inf"):
                le = "+Inf"
            else:
                le = format_number(edge) if normalised else exposition_float(edge)
            count = sum(1 for v in values if v <= edge)
            series.append(counter(metric + "_bucket", labels(spec, engine, **{LABEL_LE: le}),
                                  count))
        series.append(counter(metric + "_count", labels(spec, engine), len(values)))
        series.append(counter(metric + "_sum", labels(spec, engine), sum(values)))
    return series


def input_series(spec: SloSpec, *, normalised: bool = False) -> list[dict[str, str]]:
    series = [*histogram(spec, vllm.INTER_TOKEN_LATENCY.name, ITL, normalised=normalised),
              *histogram(spec, vllm.TIME_TO_FIRST_TOKEN.name, TTFT, normalised=normalised)]
    for engine in ENGINES:
        at = labels(spec, engine)
        series += [counter(vllm.PROMPT_TOKENS.total, at, PROMPT[engine]),
                   counter(vllm.GENERATION_TOKENS.total, at, GENERATION[engine]),
                   counter(vllm.NUM_PREEMPTIONS.total, at, PREEMPTIONS[engine]),
                   counter(vllm.NUM_REQUESTS_RUNNING.name, at, 0, RUNNING[engine]),
                   counter(vllm.KV_CACHE_USAGE.name, at, 0, KV[engine]),
                   counter(vllm.NUM_REQUESTS_WAITING.name, at, WAITING_GROWTH[engine],
                           WAITING_START[engine])]
    return series


def quantile(spec: SloSpec, metric: str, samples: list[float], q: float) -> float:
    edges = histogram_edges(spec)[metric]
    values = np.asarray(samples)
    counts = np.asarray([np.sum(values <= e) for e in (*edges, np.inf)], dtype=float)
    return histogram_quantile(q, edges, counts)


def expected(spec: SloSpec, engine: str) -> dict[str, float]:
    """Every input of the law as one engine's series alone give it."""
    itl_threshold, ttft_threshold = (slo.sli.threshold_seconds for slo in spec.slos[:2])  # type: ignore[union-attr]
    gaps, firsts = ITL[engine], TTFT[engine]
    itl, ttft = vllm.INTER_TOKEN_LATENCY.name, vllm.TIME_TO_FIRST_TOKEN.name
    return {
        "itl_tail_seconds": quantile(spec, itl, gaps, 0.99),
        "itl_median_seconds": quantile(spec, itl, gaps, 0.5),
        "itl_tail_long_seconds": quantile(spec, itl, gaps, 0.99),
        "itl_spike_seconds": quantile(spec, itl, gaps, SPIKE_QUANTILE),
        "itl_mean_seconds": sum(gaps) / len(gaps),
        "itl_good_ratio": sum(1 for v in gaps if v <= itl_threshold) / len(gaps),
        "ttft_tail_seconds": quantile(spec, ttft, firsts, 0.99),
        "ttft_per_second": len(firsts) / STEP,
        "ttft_good_per_second": sum(1 for v in firsts if v <= ttft_threshold) / STEP,
        "prompt_tokens_per_second": PROMPT[engine] / STEP,
        "generation_tokens_per_second": GENERATION[engine] / STEP,
        "preemptions_per_second": PREEMPTIONS[engine] / STEP,
        "requests_running": RUNNING[engine],
        "requests_waiting": WAITING_START[engine] + WAITING_GROWTH[engine] * 600 // STEP,
        "waiting_growth_per_second": WAITING_GROWTH[engine] / STEP,
        "kv_cache_usage_ratio": KV[engine],
    }


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not installed (Debian: apt-get install prometheus)")
    return path


def run_promtool(promtool: str, folder: Path, exprs: dict[str, str],
                 series: Sequence[dict[str, str]], want: dict[str, dict[str, float]]) -> str:
    """``want``: per expression, the value each engine's sample must hold."""
    (folder / "rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "controller", "rules": [
        {"record": f"q:{name}", "expr": expr} for name, expr in sorted(exprs.items())]}]}))
    # promtool compares exactly; the float noise of rate() arithmetic is not what is tested. An
    # answer with another number of series (engines summed) or another label set still fails.
    checks = [{"expr": f'abs(q:{name}{{{vllm.LABEL_ENGINE}="{engine}"}} - {value!r}) '
                       f"< bool {TOLERANCE * max(abs(value), 1)!r}",
               "eval_time": EVAL, "exp_samples": [
                   {"labels": Selector("", (eq(LABEL_INSTANCE, INSTANCE),
                                            eq(vllm.LABEL_ENGINE, engine))).render(),
                    "value": 1}]}
              for name, values in sorted(want.items()) for engine, value in sorted(values.items())]
    (folder / "test.yml").write_text(yaml.safe_dump({
        "rule_files": ["rules.yml"], "evaluation_interval": f"{STEP}s",
        "tests": [{"interval": f"{STEP}s", "input_series": list(series),
                   "promql_expr_test": checks}]}))
    result = subprocess.run([promtool, "test", "rules", str(folder / "test.yml")],
                            capture_output=True, text=True, timeout=120, check=False)
    return "" if result.returncode == 0 else result.stdout + result.stderr


RULE_OUTPUTS = frozenset({"itl_verdict_burn"})
# Governor's own gate in front of vLLM: its series, one per API server, checked below.
GATE_INPUTS = frozenset({"deadline_slack", "admission_refused_per_second",
                         "vllm_max_num_queued_tokens"})


@pytest.mark.parametrize("normalised", [False, True],
                         ids=["le as vLLM writes it", "le as Prometheus 3 stores it"])
@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_input_of_the_law_is_one_value_per_engine_of_vllm(
        promtool: str, tmp_path: Path, name: str, normalised: bool) -> None:
    spec = SPECS[name]()
    exprs = objectives(spec).queries.expressions()
    per_engine = {engine: expected(spec, engine) for engine in ENGINES}
    want = {field: {engine: per_engine[engine][field] for engine in ENGINES}
            for field in per_engine["0"]}
    # Every query the controller sends on vLLM's series is checked; the verdict rules' own
    # outputs are checked against the rules (test_queries.py).
    assert set(exprs) - RULE_OUTPUTS - GATE_INPUTS == set(want)
    exprs = {k: v for k, v in exprs.items() if k not in GATE_INPUTS}
    assert run_promtool(promtool, tmp_path, exprs, input_series(spec, normalised=normalised),
                        want) == ""


def test_the_gate_s_slack_and_its_refusals_at_arrival_are_read_per_instance(
        promtool: str, tmp_path: Path) -> None:
    """The admission knob's inputs: the slack the gate reports, vLLM's own bound as the gate
    reports it, and its refusals by deadline or bound per second (not its sheds or full queues,
    which are no refusal at arrival)."""
    spec = load_checked_spec(STOCK)
    exprs = objectives(spec).queries.expressions()
    at = {k: v for k, v in labels(spec, "0").items() if k != vllm.LABEL_ENGINE}
    series = [counter("governor_admission_rejections_total", {**at, "reason": reason,
                                                                "class": "chat"}, per_step)
              for reason, per_step in (("deadline", 30), ("tokens_ahead", 15),
                                       ("queue_full", 150), ("deadline_passed", 150))]
    series.append(counter("governor_admission_deadline_slack", at, 0, 0.7))
    series.append(counter("governor_admission_vllm_max_num_queued_tokens", at, 0, 9361))
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "q", "rules": [
        {"record": f"q:{name}", "expr": exprs[name]} for name in sorted(GATE_INPUTS)]}]}))
    instance = Selector("", (eq(LABEL_INSTANCE, INSTANCE),)).render()
    (tmp_path / "test.yml").write_text(yaml.safe_dump({
        "rule_files": ["rules.yml"], "evaluation_interval": f"{STEP}s",
        "tests": [{"interval": f"{STEP}s", "input_series": series, "promql_expr_test": [
            {"expr": f"q:{name}", "eval_time": EVAL,
             "exp_samples": [{"labels": f"q:{name}{instance}", "value": value}]}
            for name, value in (("deadline_slack", 0.7),
                                ("admission_refused_per_second", 3.0),
                                ("vllm_max_num_queued_tokens", 9361))]}]}))
    result = subprocess.run([promtool, "test", "rules", str(tmp_path / "test.yml")],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", sorted(SPECS))
def test_a_breach_on_rank_1_alone_is_seen_where_both_ranks_merged_would_hide_it(
        name: str) -> None:
    """What the promtool test above confirms Prometheus answers, against the SLO: the law
    judges rank 1 over it, where one histogram of both ranks sits far under it."""
    spec = SPECS[name]()
    goals = objectives(spec)
    itl = vllm.INTER_TOKEN_LATENCY.name
    merged = quantile(spec, itl, [v for gaps in ITL.values() for v in gaps], 0.99)
    by_rank = {field: {engine: expected(spec, engine)[field] for engine in ENGINES}
               for field in expected(spec, "0")}
    judged = judge(by_rank)
    assert merged < goals.slo.itl_seconds < judged.values["itl_tail_seconds"]  # type: ignore[operator]
    assert judged.rank == "1"
    assert judged.values["prompt_tokens_per_second"] == PROMPT["1"] / STEP
    assert judged.values["kv_cache_usage_ratio"] == max(KV.values())


def test_the_good_event_queries_read_vllms_own_le_at_the_threshold() -> None:
    default = objectives(load_checked_spec(STOCK)).queries.expressions()
    custom = objectives(spec_with_custom_buckets()).queries.expressions()
    assert 'le="0.12"' in custom["itl_good_ratio"]
    assert 'le="0.1"' in default["itl_good_ratio"]
    # prometheus_client's 1.0 (vLLM's), or the 1 that Prometheus 3 normalises it to.
    assert 'le=~"1|1\\\\.0"' in default["ttft_good_per_second"]
    assert 'job="vllm"' in default["prompt_tokens_per_second"]
