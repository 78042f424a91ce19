"""Each GPU's recorded state and the two process alerts: what they read, and their promtool
scenarios under several ``alerting.gpu_health`` options, on both exporters, and against broken
rules."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from governor.alerts.render import render_all, write_all
from governor.contracts.metrics import dcgm, gpu, vllm
from governor.contracts.metrics import gpu_health as h
from governor.generation.catalog import parse_checked_spec
from tests.alerts.cases import ROOT, TESTDATA

HEALTH = "prometheus/rules/health.yml"
SPECS = {"governor": ROOT / "slo.yaml", "dcgm": TESTDATA / "dcgm.yaml"}


def _files(spec: str = "governor", option: dict[str, object] | None = None) -> dict[str, str]:
    data: dict[str, Any] = yaml.safe_load(SPECS[spec].read_text(encoding="utf-8"))
    if option is not None:
        data.setdefault("alerting", {})["gpu_health"] = option
    return render_all(parse_checked_spec(data))


def _rules(files: dict[str, str]) -> list[dict[str, Any]]:
    groups = yaml.safe_load(files[HEALTH])["groups"]
    return [rule for group in groups for rule in group["rules"]]


def _reasons(files: dict[str, str]) -> dict[str, str]:
    """reason → the expression of its recording rule."""
    return {rule["labels"]["reason"]: rule["expr"]
            for rule in _rules(files) if rule.get("record") == h.REASON.name}


def test_every_reason_is_recorded_at_its_severity_and_the_state_is_their_worst() -> None:
    files = _files()
    reasons = _reasons(files)
    assert set(reasons) == set(h.REASONS)
    for reason, expr in reasons.items():
        assert f"* {h.REASONS[reason]}\nor\n" in expr and expr.endswith("* 0"), reason
    (state,) = [r for r in _rules(files) if r.get("record") == h.STATE.name]
    assert state["expr"] == (f'max by (job, instance, gpu) ({h.REASON.name}{{job="gpu"}})')
    assert f"min_over_time({gpu.PROCESS_COUNT.name}{{job=\"gpu\"}}[15m]) > 1" in \
        reasons[h.REASON_PROCESSES]
    idle = reasons[h.REASON_IDLE_GROWTH]
    assert "> 536870912" in idle and "offset 30m" in idle
    assert f"max_over_time({vllm.NUM_REQUESTS_RUNNING.name}{{job=\"inference\"}}[30m])" in idle


def test_dcgm_records_the_reasons_its_fields_tell_and_not_the_process_ones() -> None:
    reasons = _reasons(_files("dcgm"))
    assert set(reasons) == set(h.REASONS) - set(h.NOT_IN_DCGM)
    text = "\n".join(reasons.values())
    assert "gpu_" not in text.replace("gpu-operator", "")
    for reading in (dcgm.PRESENCE, dcgm.XID, dcgm.CLOCK_EVENT_REASONS, dcgm.ROW_REMAP_FAILED):
        for field in reading.fields:
            assert f"{field.name}{{" in text, field.name


def test_the_spec_s_options_reach_the_rules_and_alerts() -> None:
    files = _files(option={"max_processes": 3, "processes_for": "5m", "idle_growth": "1Gi",
                           "idle_window": "2h"})
    reasons = _reasons(files)
    assert "[5m]) > 3" in reasons[h.REASON_PROCESSES]
    assert "> 1073741824" in reasons[h.REASON_IDLE_GROWTH]
    assert "offset 2h" in reasons[h.REASON_IDLE_GROWTH]
    alerts = {r["alert"]: r for r in _rules(files) if "alert" in r}
    assert alerts["GpuProcessCountHigh"]["for"] == "5m"
    assert alerts["GpuProcessCountHigh"]["expr"].endswith("> 3")
    assert "more than 1 GiB over 2h" in alerts["GpuMemoryGrowsWhileIdle"]["annotations"][
        "description"]


def _promtool(files: dict[str, str], tmp_path: Path, promtool: str) -> str:
    write_all(files, tmp_path)
    result = subprocess.run([promtool, "test", "rules",
                             str(tmp_path / "prometheus/tests/health.test.yml")],
                            capture_output=True, text=True, timeout=300, check=False)
    return result.stdout + result.stderr


@pytest.mark.integration
@pytest.mark.parametrize(("spec", "option"), [
    ("governor", None), ("governor", {"max_processes": 4, "processes_for": "1m",
                                      "idle_window": "1m", "idle_growth": "1Mi"}),
    ("governor", {"processes_for": "3h", "idle_window": "2h", "idle_growth": "8Gi"}),
    ("dcgm", None),
], ids=["the default", "the shortest windows", "long windows", "dcgm-exporter"])
def test_the_generated_scenarios_pass_for_each_option(
        promtool: str, tmp_path: Path, spec: str, option: dict[str, object] | None) -> None:
    output = _promtool(_files(spec, option), tmp_path, promtool)
    assert "FAILED" not in output and "SUCCESS" in output, output


@pytest.mark.integration
@pytest.mark.parametrize(("spec", "broken", "replacement", "caught"), [
    ("governor", " * 2\n", " * 1\n", h.STATE.name),  # a CRITICAL reason read as WARN
    ("governor", 'and gpu_process_memory_used_bytes{job="gpu"} offset 30m',
     'and gpu_process_memory_used_bytes{job="gpu"}',
     "GpuMemoryGrowsWhileIdle"),  # an engine's start read as a leak
    ("governor", ")) == 0\n", ")) == 1\n", "GpuMemoryGrowsWhileIdle"),  # busy, not idle
    ("governor", '[15m]) > 1', '[15m]) > 2', h.REASON.name),  # misses a count that is high
    ("dcgm", "floor(", "ceil(", h.STATE.name),  # the bitmask read wrong
], ids=["severity", "no start-up guard", "busy engine", "threshold", "dcgm bitmask"])
def test_the_scenarios_catch_a_broken_rule(promtool: str, tmp_path: Path, spec: str,
                                           broken: str, replacement: str, caught: str) -> None:
    files = _files(spec)
    assert broken in files[HEALTH], broken
    files[HEALTH] = files[HEALTH].replace(broken, replacement)
    output = _promtool(files, tmp_path, promtool)
    assert "FAILED" in output and caught in output.split("FAILED", 1)[1], output
