"""The boards of a stock vLLM fleet (``kubernetes.server: vllm``): panel by panel, vLLM's own
series, the controller's gauges or a note saying what stock vLLM lacks — never a panel whose
series no stock vLLM exports. ``tests/dashboards/test_live_stock_vllm.py`` runs them against a
real ``vllm serve``."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from governor.contracts.metrics import controller as c
from governor.contracts.metrics import dcgm, gpu_health, vllm
from governor.contracts.metrics import gpu as g
from governor.contracts.metrics import service as svc
from governor.dashboards.readback import panels, queries
from governor.dashboards.render import render_all
from governor.generation.catalog import load_checked_spec
from tests.dashboards.boards import EXAMPLES, boards, metric_references
from tests.dashboards.test_boards import base_name, declared, exprs, known_metrics, panel_titled

STOCK = load_checked_spec(EXAMPLES["stock-vllm"])


def stock_boards() -> dict[str, dict[str, Any]]:
    return boards(render_all(STOCK))


def test_no_inference_panel_reads_a_series_of_governor_serve() -> None:
    """Stock vLLM exports vLLM's series; Governor's own come from the controller, the GPU
    exporter and the recording rules."""
    theirs = declared(svc)
    found = {(q.board, q.panel, name) for q in stock_queries()
             for name in metric_references(q.expr) if base_name(name) in theirs}
    assert found == set()


def stock_queries() -> list[Any]:
    from governor.dashboards.readback import queries

    return [q for board in stock_boards().values() for q in queries(board)]


# Prometheus's own series of each scrape: the dcgm board's view of dcgm-exporter's health.
SCRAPE_SERIES = frozenset({"scrape_samples_scraped", "scrape_duration_seconds", "up"})


def test_every_query_selects_a_series_something_on_the_stock_fleet_exports() -> None:
    """vLLM's, the controller's, the GPU exporter's (dcgm-exporter's fields under each release's
    names where the example reads it) or a recording rule's; a typo fails too."""
    exported = known_metrics() - declared(svc)
    if STOCK.targets.gpu.dcgm:
        exported |= {f.name for r in (*dcgm.READINGS, *dcgm.UNPINNED)
                     for f in r.fields} | SCRAPE_SERIES
    unknown = {(q.where, name) for q in stock_queries() for name in metric_references(q.expr)
               if base_name(name) not in exported}
    assert unknown == set()


def test_the_latency_panels_read_vllms_histograms_with_the_slo_lines_and_no_exemplars() -> None:
    board = stock_boards()["governor-inference"]
    itl, ttft = panel_titled(board, "Inter-token latency"), panel_titled(board, "Time to first")
    assert itl["title"] == "Inter-token latency (SLO: p99 ≤ 0.1 s)"
    assert ttft["title"] == "Time to first token (SLO: p99 ≤ 1 s)"
    for panel, histogram, line in ((itl, vllm.INTER_TOKEN_LATENCY, 0.1),
                                   (ttft, vllm.TIME_TO_FIRST_TOKEN, 1.0)):
        assert all(histogram.bucket in t["expr"] for t in panel["targets"])
        assert not any(t.get("exemplar") for t in panel["targets"])  # vLLM keeps no trace ids
        assert [s["value"] for s in panel["fieldConfig"]["defaults"]["thresholds"]["steps"]] \
            == [None, line]
    assert "vLLM's engine" in itl["description"]
    duration = panel_titled(board, "Request duration")
    assert duration["title"] == "Request duration (end to end in vLLM)"
    assert vllm.E2E_REQUEST_LATENCY.bucket in duration["targets"][0]["expr"]
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    assert rows[0] == "Latency as vLLM measures it"


def test_requests_by_status_read_vllms_http_counter_and_say_what_the_slo_counts() -> None:
    panel = panel_titled(stock_boards()["governor-inference"], "Requests by status")
    (target,) = panel["targets"]
    assert target["expr"].startswith(f"sum by (handler, status) (rate({vllm.HTTP_REQUESTS.total}{{")
    assert target["legendFormat"] == "{{handler}} {{status}}"
    assert '`http_requests_total{handler=~"/v1/chat/completions|/v1/completions", ' \
           'status="5xx"}` count against the availability SLO.' in panel["description"]


def test_admission_rejections_are_vllms_own_by_reason() -> None:
    panel = panel_titled(stock_boards()["governor-inference"], "Admission rejections")
    assert panel["type"] == "timeseries"
    assert [t["expr"] for t in panel["targets"]] == [
        'sum by (reason) (rate(vllm:admission_rejections_total{job=~"$job", '
        'namespace=~"$namespace", instance=~"$instance"}[$__rate_interval]))']
    assert [t["legendFormat"] for t in panel["targets"]] == ["{{reason}}"]
    assert (panel["gridPos"]["w"], panel["gridPos"]["h"]) == (8, 8)  # the grid as before
    waiting = panel_titled(stock_boards()["governor-inference"], "Running and waiting")
    assert [t["legendFormat"] for t in waiting["targets"]] == ["running", "waiting (engine)"]


@pytest.mark.parametrize("param", [svc.PARAM_MAX_NUM_BATCHED_TOKENS, svc.PARAM_MAX_NUM_SEQS])
def test_the_limits_in_force_are_the_controllers_as_it_read_each_target(param: str) -> None:
    panel = panel_titled(stock_boards()["governor-inference"], param)
    job = STOCK.targets.controller.job
    assert [t["expr"] for t in panel["targets"]] == [
        f'{metric.name}{{job="{job}", target=~"$instance", param="{param}"}}'
        for metric in (c.TARGET_LIMITS, c.TARGET_FLOOR, c.TARGET_CEILING)]
    assert [t["legendFormat"] for t in panel["targets"]] == [
        "in force {{target}}", "floor {{target}}", "ceiling {{target}}"]
    assert "as the controller last read them" in panel["description"]


def test_the_boards_variables_list_what_vllm_exports_under_the_specs_job() -> None:
    variables = {v["name"]: v for v in stock_boards()["governor-inference"]["templating"]["list"]}
    assert variables["job"]["current"]["value"] == STOCK.targets.inference.job == "vllm"
    for name in ("job", "instance"):
        assert vllm.NUM_REQUESTS_RUNNING.name in variables[name]["query"]
    assert "class" not in variables  # no request classes on stock vLLM


def test_the_slo_and_controller_boards_are_the_specs_like_any_other() -> None:
    """Both read only recorded SLO series and the controller's own: the same on any server."""
    slo, controller = (stock_boards()[uid] for uid in ("governor-slo", "governor-controller"))
    assert [p["title"] for p in slo["panels"] if p["type"] == "row"] == [
        "inter-token-latency: 99% over 30d", "time-to-first-token: 99% over 30d",
        "availability: 99.9% over 30d", "Why it burns"]
    summary = next(p for p in panels(slo) if p["type"] == "text")["options"]["content"]
    assert "`vllm:inter_token_latency_seconds` at or below 0.1 s" in summary
    observed = panel_titled(controller, "Observed latency")
    assert [s["value"] for s in observed["fieldConfig"]["defaults"]["thresholds"]["steps"]] \
        == [None, 0.1]
    assert not re.search(r"governor_(?!controller_)", exprs(controller))


def test_the_heat_maps_read_vllms_histograms_and_its_phases() -> None:
    heatmaps = {p["title"]: p["targets"][0] for p in panels(stock_boards()["governor-inference"])
                if p["type"] == "heatmap"}
    assert {title: target["expr"].split("{")[0] for title, target in heatmaps.items()} == {
        "Time to first token (heat map)": f"sum by (le) (rate({vllm.TIME_TO_FIRST_TOKEN.bucket}",
        "Inter-token latency (heat map)": f"sum by (le) (rate({vllm.INTER_TOKEN_LATENCY.bucket}",
        "Request duration (heat map)": f"sum by (le) (rate({vllm.E2E_REQUEST_LATENCY.bucket}",
        "Queue (heat map)": f"sum by (le) (rate({vllm.REQUEST_QUEUE_TIME.bucket}",
        "Prefill (heat map)": f"sum by (le) (rate({vllm.REQUEST_PREFILL_TIME.bucket}",
        "Decode (heat map)": f"sum by (le) (rate({vllm.REQUEST_DECODE_TIME.bucket}"}
    assert all(t["format"] == "heatmap" and not t.get("exemplar") for t in heatmaps.values())


def test_the_example_reads_dcgm_exporter_and_its_gpu_board_only_dcgm_fields() -> None:
    """The example a team with the GPU Operator copies stays on dcgm-exporter: its spec's GPU
    source, and the GPU board committed beside it, whose every series is a DCGM field (or
    Prometheus's own of each scrape, or the GPU-state rules computed from those fields), none of
    Governor's exporter's; and no exporter of Governor's in its manifests."""
    gpu = STOCK.targets.gpu
    assert (gpu.source, gpu.job, gpu.dcgm) == ("dcgm", "nvidia-dcgm-exporter", True)
    deploy = EXAMPLES["stock-vllm"].parent / "deploy"
    board = json.loads((deploy / "grafana" / "dashboards" / "governor-gpu.json").read_text())
    selected = {name for q in queries(board) for name in metric_references(q.expr)}
    fields = {name for name in selected if name.startswith("DCGM_FI_")}
    assert fields >= {f.name for r in (*dcgm.READINGS, *dcgm.UNPINNED) for f in r.fields
                      if f.name.startswith("DCGM_FI_DEV_GPU_TEMP")}
    assert selected - fields <= SCRAPE_SERIES | declared(gpu_health), selected - fields
    assert not {base_name(name) for name in selected} & declared(g)
    # Governor's exporter is a DaemonSet (deploy/kubernetes/exporter.yaml): none here.
    assert not [p.name for p in (deploy / "kubernetes").iterdir()
                if "kind: DaemonSet" in p.read_text()]
