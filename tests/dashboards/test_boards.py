"""What the boards show: derived from the spec and the components' metric names, nothing retyped."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from governor.contracts.declaration import Metric
from governor.contracts.metrics import controller as c
from governor.contracts.metrics import cost, gpu_health, probe, runtime, verdict, vllm
from governor.contracts.metrics import gpu as g
from governor.contracts.metrics import service as svc
from governor.contracts.metrics import slo as n
from governor.contracts.stages import Stage
from governor.controller import grafana as controller_grafana
from governor.controller.model import Action
from governor.dashboards import controller_events
from governor.dashboards.board import PROMETHEUS_UID
from governor.dashboards.provisioning import DASHBOARDS_PATH, JAEGER_UID, GrafanaParams
from governor.dashboards.readback import panels
from governor.dashboards.render import DATASOURCES, PROVIDERS, render_all
from governor.generation.catalog import load_checked_spec, parse_checked_spec
from governor.slo.burn import SLI_WINDOWS, TIERS
from tests.dashboards.boards import ROOT, all_queries, boards, default_files, metric_references

SPEC = load_checked_spec(ROOT / "slo.yaml")
SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_info")


def declared(module: ModuleType) -> set[str]:
    return {value.name for value in vars(module).values() if isinstance(value, Metric)}


def known_metrics() -> set[str]:
    recorded = {windowed.at(w).name for w in SLI_WINDOWS for windowed in
                (n.SLI_EVENTS_RATE, n.SLI_ERROR_EVENTS_RATE, n.SLI_ERROR_RATIO, n.BURN_RATE,
                 n.CLASS_SLI_EVENTS_RATE, n.CLASS_SLI_ERROR_EVENTS_RATE,
                 n.CLASS_SLI_ERROR_RATIO, n.CLASS_BURN_RATE)}
    return (declared(svc) | declared(vllm) | declared(g) | declared(c) | declared(n)
            | declared(verdict) | declared(probe) | declared(runtime) | declared(gpu_health)
            | set(cost.RECORDED) | recorded)


def base_name(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix) and name not in known_metrics():
            return name[: -len(suffix)]
    return name


def text_of(board: dict[str, Any]) -> str:
    return json.dumps(board)


def exprs(board: dict[str, Any]) -> str:
    return "\n".join(t["expr"] for p in panels(board) for t in p.get("targets", []))


def panel_titled(board: dict[str, Any], prefix: str) -> dict[str, Any]:
    return next(p for p in panels(board) if p["title"].startswith(prefix))


def test_every_metric_a_query_selects_is_one_a_component_exports() -> None:
    known = known_metrics()
    unknown = {(q.where, name) for q in all_queries() for name in metric_references(q.expr)
               if base_name(name) not in known}
    assert unknown == set()


def test_the_reference_check_notices_a_typo() -> None:
    assert base_name("gpu_sm_activ_ratio") not in known_metrics()
    assert base_name(vllm.NUM_PREEMPTIONS.total) in known_metrics()


# ---- SLO overview ------------------------------------------------------------------------------


def test_the_slo_board_has_a_row_per_slo_with_its_objective_and_period() -> None:
    board = boards()["governor-slo"]
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert rows == ["inter-token-latency: 99% over 30d", "time-to-first-token: 99% over 30d",
                    "availability: 99.9% over 30d", "probe-success: 99% over 30d",
                    "Why it burns"]


def test_the_why_row_draws_each_latency_slos_verdict_by_cause_and_target() -> None:
    board = boards()["governor-slo"]
    for name in ("inter-token-latency", "time-to-first-token"):
        panel = panel_titled(board, f"Why {name} burns")
        (target,) = panel["targets"]
        assert target["expr"] == f'verdict:cause:share{{slo="{name}", service="inference"}}'
        assert target["legendFormat"] == "{{cause}} on {{instance}}"
    assert not any(p["title"] == "Why availability burns" for p in panels(board))


@pytest.mark.parametrize("name", [n.OBJECTIVE.name, n.SLI_ERROR_RATIO_PERIOD.name,
                                  n.ERROR_BUDGET_REMAINING.name, n.BURN_RATE_PERIOD.name])
def test_the_slo_board_reads_each_slos_recorded_series(name: str) -> None:
    text = exprs(boards()["governor-slo"])
    for slo in SPEC.slos:
        assert f'{name}{{slo="{slo.name}", service="{SPEC.service}"}}' in text


def test_the_slo_board_lists_the_classes_and_burns_each_latency_slo_by_class() -> None:
    board = boards()["governor-slo"]
    summary = next(p for p in panels(board) if p["type"] == "text")["options"]["content"]
    doc = next(c for c in SPEC.classes.classes if c.name == "doc")
    assert (f"| doc | prompt ≥ 3000 tokens, or x-governor-class: doc | 10 | "
            f"{doc.max_in_flight} | {doc.max_queue} |") in summary
    assert "| chat | every other request | 0 | — | — | — |" in summary
    by_class = [p for p in panels(board) if p["title"] == "Burn rate by request class"]
    assert len(by_class) == 2  # the two latency SLOs; availability has no per-class rules
    assert "(doc ≤ 0.25, chat ≤ 0.12" in by_class[0]["description"].replace("s,", ",")
    assert [t["legendFormat"] for t in by_class[0]["targets"]] == ["{{class}} 5m",
                                                                   "{{class}} 1h"]
    assert n.CLASS_ERROR_BUDGET_REMAINING.name in exprs(board)


def test_burn_rates_cover_every_alert_window_with_the_tier_factors_drawn() -> None:
    board = boards()["governor-slo"]
    burn = panel_titled(board, "Burn rate by window")
    assert [t["legendFormat"] for t in burn["targets"]] == ["5m", "30m", "1h", "2h", "6h", "1d",
                                                            "3d"]
    steps = burn["fieldConfig"]["defaults"]["thresholds"]["steps"]
    factors = sorted(float(t.factor(SPEC.period_seconds)) for t in TIERS)
    assert sorted(s["value"] for s in steps if s["value"] is not None) == factors == [1, 3, 6,
                                                                                      14.4]


def test_a_28_day_period_moves_the_burn_lines_and_titles() -> None:
    spec = load_checked_spec(ROOT / "tests/alerts/testdata/period-28d-guarded.yaml")
    board = boards(render_all(spec))["governor-slo"]
    burn = panel_titled(board, "Burn rate by window")
    values = sorted(s["value"] for s in burn["fieldConfig"]["defaults"]["thresholds"]["steps"]
                    if s["value"] is not None)
    assert 13.44 in values and 14.4 not in values
    assert any("over 28d" in p["title"] for p in board["panels"] if p["type"] == "row")


def test_the_slo_summary_table_lists_every_slo() -> None:
    summary = next(p for p in panels(boards()["governor-slo"]) if p["type"] == "text")
    content = summary["options"]["content"]
    for slo in SPEC.slos:
        assert f"| {slo.name} |" in content
    assert "governor_inter_token_latency_seconds" in content and "0.12 s" in content


# ---- SLO lines on the inference board -----------------------------------------------------------


def test_latency_panels_draw_the_slo_thresholds_at_their_quantile() -> None:
    board = boards()["governor-inference"]
    itl = panel_titled(board, "Inter-token latency")
    ttft = panel_titled(board, "Time to first token")
    # The default spec's documents have thresholds of their own, drawn beside the SLO's.
    assert itl["title"] == "Inter-token latency (SLO: p99 ≤ 0.12 s; doc ≤ 0.25 s)"
    assert ttft["title"] == "Time to first token (SLO: p99 ≤ 1 s; doc ≤ 20 s)"
    for panel, lines in ((itl, [0.12, 0.25]), (ttft, [1.0, 20.0])):
        steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
        assert [s["value"] for s in steps] == [None, *lines]
        assert panel["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] == "dashed"
        assert [t["legendFormat"] for t in panel["targets"]] == [
            "p50 {{class}}", "p90 {{class}}", "p99 {{class}}"]
        assert all(t["exemplar"] for t in panel["targets"])
        assert all('class=~"$class"' in t["expr"] and "sum by (le, class)" in t["expr"]
                   for t in panel["targets"])


def test_without_classes_the_latency_panels_are_as_before() -> None:
    data = yaml.safe_load((ROOT / "slo.yaml").read_text())
    del data["classes"]
    board = boards(render_all(parse_checked_spec(data)))["governor-inference"]
    itl = panel_titled(board, "Inter-token latency")
    assert itl["title"] == "Inter-token latency (SLO: p99 ≤ 0.12 s)"
    assert [t["legendFormat"] for t in itl["targets"]] == ["p50", "p90", "p99"]
    assert not any(v["name"] == "class" for v in board["templating"]["list"])
    assert "class" not in exprs(board)


def test_changing_the_threshold_in_the_spec_moves_the_line() -> None:
    text = (ROOT / "slo.yaml").read_text().replace("threshold: 120ms", "threshold: 100ms")
    spec = parse_checked_spec(yaml.safe_load(text))
    itl = panel_titled(boards(render_all(spec))["governor-inference"], "Inter-token latency")
    assert itl["title"] == "Inter-token latency (SLO: p99 ≤ 0.1 s; doc ≤ 0.25 s)"
    assert itl["fieldConfig"]["defaults"]["thresholds"]["steps"][1]["value"] == 0.1


def test_a_99_9_percent_objective_adds_the_p99_9_line() -> None:
    text = (ROOT / "slo.yaml").read_text().replace("objective: 99\n", "objective: 99.9\n", 1)
    spec = parse_checked_spec(yaml.safe_load(text))
    itl = panel_titled(boards(render_all(spec))["governor-inference"], "Inter-token latency")
    assert [t["legendFormat"] for t in itl["targets"]] == [
        "p50 {{class}}", "p90 {{class}}", "p99.9 {{class}}"]
    assert "quantile(0.999," in itl["targets"][2]["expr"]


def test_the_inference_board_covers_the_brief() -> None:
    text = exprs(boards()["governor-inference"])
    for metric in (svc.TIME_TO_FIRST_TOKEN, svc.INTER_TOKEN_LATENCY, svc.REQUEST_DURATION,
                   vllm.PROMPT_TOKENS, vllm.GENERATION_TOKENS, svc.QUEUE_DEPTH,
                   vllm.NUM_REQUESTS_RUNNING, vllm.NUM_REQUESTS_WAITING, vllm.KV_CACHE_USAGE,
                   vllm.PREFIX_CACHE_HITS, vllm.PREFIX_CACHE_QUERIES, vllm.NUM_PREEMPTIONS,
                   svc.BATCHING_LIMIT, svc.BATCHING_FLOOR, svc.BATCHING_CEILING):
        assert metric.name in text, metric.name
    for param in (svc.PARAM_MAX_NUM_SEQS, svc.PARAM_MAX_NUM_BATCHED_TOKENS):
        assert f'{svc.LABEL_PARAM}="{param}"' in text


def test_the_gpu_board_covers_the_brief() -> None:
    text = exprs(boards()["governor-gpu"])
    for metric in (g.SM_ACTIVE, g.SM_OCCUPANCY, g.DRAM_BANDWIDTH_UTILIZATION, g.TENSOR_ACTIVE,
                   g.MEMORY_USED, g.POWER, g.POWER_LIMIT, g.CLOCK, g.CLOCK_EVENT_DURATION,
                   g.XID_ERRORS, g.TEMPERATURE, g.UP):
        assert metric.name in text, metric.name


def test_the_controller_board_covers_the_brief() -> None:
    board = boards()["governor-controller"]
    text = exprs(board)
    for metric in (c.DECISIONS, c.TARGET_LIMITS, c.RECONCILES, c.RECONCILE_DURATION, c.OBSERVED):
        assert metric.name in text, metric.name
    assert "by (action, reason)" in text
    observed = panel_titled(board, "Observed latency")
    assert [s["value"] for s in observed["fieldConfig"]["defaults"]["thresholds"]["steps"]] \
        == [None, 0.12]


# ---- annotations and variables ------------------------------------------------------------------


@pytest.mark.parametrize("uid", ["governor-slo", "governor-inference", "governor-controller"])
def test_controller_actions_are_annotations_from_prometheus(uid: str) -> None:
    found = {a["name"]: a for a in boards()[uid]["annotations"]["list"]}
    decisions, limits = found["Controller decisions"], found["Batching limit changes"]
    for annotation in (decisions, limits):
        assert annotation["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert annotation["enable"] is True
    assert c.DECISIONS.name in decisions["expr"] and 'action!="hold"' in decisions["expr"]
    assert decisions["titleFormat"] == "controller: {{action}}"
    assert f"changes({c.TARGET_LIMITS.name}" in limits["expr"]
    posted = found["Controller (posted to Grafana)"]
    assert posted["target"]["tags"] == [controller_grafana.TAG]


def test_the_annotation_contracts_match_the_controller() -> None:
    assert controller_events.CONTROLLER_TAG == controller_grafana.TAG
    assert Action.HOLD.value == controller_events.HOLD_ACTION


def test_every_board_reads_the_datasource_variable_defaulting_to_the_provisioned_one() -> None:
    for board in boards().values():
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert variables["datasource"]["current"]["value"] == PROMETHEUS_UID
        refs = {json.dumps(p.get("datasource"), sort_keys=True) for p in panels(board)
                if p["type"] != "text"}
        assert refs == {json.dumps({"type": "prometheus", "uid": "${datasource}"},
                                   sort_keys=True)}


def test_every_multi_value_variable_is_used_by_the_queries() -> None:
    for uid, board in boards().items():
        used = exprs(board)
        for variable in board["templating"]["list"]:
            if variable["type"] == "query":
                assert f'=~"${variable["name"]}"' in used, (uid, variable["name"])
                assert variable["multi"]
                # $job has no "All": a board of every job in Prometheus would mean nothing.
                assert variable.get("includeAll", False) == (variable["name"] != "job")
                assert variable.get("allValue", ".*") == ".*"


# ---- provisioning ------------------------------------------------------------------------------


def test_prometheus_exemplars_link_to_jaeger_by_trace_id() -> None:
    data = yaml.safe_load(default_files()[DATASOURCES])
    by_uid = {d["uid"]: d for d in data["datasources"]}
    prometheus = by_uid[PROMETHEUS_UID]
    assert prometheus["url"] == "http://prometheus:9090" and prometheus["isDefault"]
    assert prometheus["jsonData"]["exemplarTraceIdDestinations"] == [
        {"name": svc.EXEMPLAR_TRACE_ID, "datasourceUid": JAEGER_UID}]
    assert prometheus["jsonData"]["timeInterval"] == "15s"
    assert by_uid[JAEGER_UID]["type"] == "jaeger"
    assert by_uid[JAEGER_UID]["url"] == "http://jaeger:16686"


def test_the_dashboard_provider_reads_the_mounted_folder() -> None:
    provider = yaml.safe_load(default_files()[PROVIDERS])["providers"][0]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == DASHBOARDS_PATH == "/var/lib/grafana/dashboards"


def test_local_parameters_point_grafana_at_localhost() -> None:
    files = render_all(SPEC, GrafanaParams.local(5))
    text = files[DATASOURCES]
    assert "http://127.0.0.1:9090" in text and "http://127.0.0.1:16686" in text
    assert "timeInterval: 5s" in text


@pytest.mark.parametrize(("field", "value", "message"), [
    ("prometheus_url", "prometheus:9090", "http"),
    ("jaeger_url", "ftp://jaeger", "http"),
    ("scrape_interval_seconds", 0, "positive"),
])
def test_bad_parameters_are_refused_with_the_field_named(field: str, value: object,
                                                         message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(field) + ".*" + message):
        GrafanaParams(**{field: value})  # type: ignore[arg-type]


# ---- heat maps ----------------------------------------------------------------------------------


def _heatmaps(board: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["title"]: p for p in panels(board) if p["type"] == "heatmap"}


def test_latency_heat_maps_read_every_bucket_of_each_histogram_and_stage() -> None:
    found = _heatmaps(boards()["governor-inference"])
    histograms = {"Time to first token (heat map)": svc.TIME_TO_FIRST_TOKEN,
                  "Inter-token latency (heat map)": svc.INTER_TOKEN_LATENCY,
                  "Request duration (heat map)": svc.REQUEST_DURATION}
    histograms |= {f"Stage {stage.value} (heat map)": svc.REQUEST_STAGE for stage in Stage}
    assert set(found) == set(histograms)
    for title, metric in histograms.items():
        (target,) = found[title]["targets"]
        assert target["format"] == "heatmap" and target["legendFormat"] == "{{le}}"
        assert target["expr"].startswith(f"sum by (le) (rate({metric.bucket}{{")
        assert "[$__rate_interval]" in target["expr"]
        assert found[title]["options"]["calculate"] is False
        assert found[title]["options"]["yAxis"]["unit"] == "s"
    assert 'stage="prefill"' in found["Stage prefill (heat map)"]["targets"][0]["expr"]
    # The service's histograms carry trace ids: the heat map shows them too.
    assert found["Time to first token (heat map)"]["targets"][0]["exemplar"] is True


def test_gpu_heat_maps_have_a_row_per_gpu_on_a_fixed_scale() -> None:
    found = _heatmaps(boards()["governor-gpu"])
    assert set(found) == {"SM active per GPU (heat map)", "DRAM bandwidth per GPU (heat map)"}
    for panel, metric in ((found["SM active per GPU (heat map)"], g.SM_ACTIVE),
                          (found["DRAM bandwidth per GPU (heat map)"],
                           g.DRAM_BANDWIDTH_UTILIZATION)):
        (target,) = panel["targets"]
        assert target["expr"].startswith(f"{metric.name}{{") and "format" not in target
        assert "{{gpu}}" in target["legendFormat"]
        assert (panel["options"]["color"]["min"], panel["options"]["color"]["max"]) == (0, 1)
        assert panel["options"]["cellValues"]["unit"] == "percentunit"


# ---- scheduler ---------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [ROOT / "slo.yaml", ROOT / "examples" / "stock-vllm" / "slo.yaml"],
                         ids=["governor-serve", "stock-vllm"])
def test_tokens_per_step_are_drawn_beside_the_requests_running_not_against_the_budget(
        spec: Path) -> None:
    """vLLM counts a prompt whole at the step its prefill ends, so the upper quantiles are prompt
    lengths and exceed max_num_batched_tokens under chunked prefill: the panel compares its
    quantiles with the requests running (what a decode-only step counts), draws no budget, and
    says the budget is not what they are measured against."""
    board = boards(render_all(load_checked_spec(spec)))["governor-inference"]
    panel = panel_titled(board, "Tokens per engine step")
    read = [metric_references(t["expr"]) for t in panel["targets"]]
    assert read[:2] == [{vllm.ITERATION_TOKENS.bucket}] * 2
    assert read[2:] == [{vllm.NUM_REQUESTS_RUNNING.name}]
    assert panel["targets"][2]["legendFormat"].startswith("requests running")
    defaults = panel["fieldConfig"]["defaults"]
    assert [step["value"] for step in defaults["thresholds"]["steps"]] == [None]
    assert defaults["custom"]["thresholdsStyle"]["mode"] == "off"
    description = panel["description"]
    assert "beside the requests running" in description
    assert "may exceed that budget, which they are not measured against" in description
    assert "against the max_num_batched_tokens budget" not in description


# ---- cache health ------------------------------------------------------------------------------


def test_the_hit_ratio_panel_draws_the_cache_alerts_relative_threshold() -> None:
    panel = panel_titled(boards()["governor-inference"], "Prefix-cache hit ratio")
    ratio, threshold = panel["targets"]
    assert threshold["legendFormat"] == "alert below (0.5 of the 6h median)"
    assert threshold["expr"].startswith("0.5 * quantile_over_time(0.5, (\n" + ratio["expr"])
    assert threshold["expr"].endswith(")[6h:1m])")
    assert "VllmPrefixCacheHitRatioLow" in panel["description"]


def test_with_a_fixed_floor_the_hit_ratio_panel_draws_it_as_a_line() -> None:
    data = yaml.safe_load((ROOT / "slo.yaml").read_text())
    data["alerting"] = {"prefix_cache": {"below": 0.4}}
    board = boards(render_all(parse_checked_spec(data)))["governor-inference"]
    panel = panel_titled(board, "Prefix-cache hit ratio")
    assert len(panel["targets"]) == 1
    assert [s["value"] for s in panel["fieldConfig"]["defaults"]["thresholds"]["steps"]] == [
        None, 0.4]
    assert panel["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] == "dashed"
