"""The prefix-cache hit-ratio alert: what it reads, and its promtool scenario under every kind of
``alerting.prefix_cache`` (relative to a baseline, a fixed floor, no quiet-server guard)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from governor.alerts.cache_alert import NAME
from governor.alerts.render import render_all, write_all
from governor.contracts.metrics import vllm
from governor.generation.catalog import parse_checked_spec
from tests.alerts.cases import ROOT

HEALTH = "prometheus/rules/health.yml"


def _files(prefix_cache: dict[str, object] | None = None) -> dict[str, str]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "slo.yaml").read_text(encoding="utf-8"))
    if prefix_cache is not None:
        data.setdefault("alerting", {})["prefix_cache"] = prefix_cache
    return render_all(parse_checked_spec(data))


def _rule(files: dict[str, str]) -> dict[str, Any]:
    groups = yaml.safe_load(files[HEALTH])["groups"]
    rule: dict[str, Any] = next(r for g in groups for r in g["rules"] if r.get("alert") == NAME)
    return rule


def test_by_default_the_ratio_is_compared_with_half_its_median_while_busy() -> None:
    rule = _rule(_files())
    expr = rule["expr"]
    assert rule["labels"]["severity"] == "ticket" and rule["for"] == "15m"
    assert f"rate({vllm.PREFIX_CACHE_HITS.total}{{" in expr
    assert f"rate({vllm.PREFIX_CACHE_QUERIES.total}{{" in expr
    assert "< 0.5 * quantile_over_time(0.5, (" in expr and ")[6h:1m])" in expr
    # The quiet-server guard, on the alert and on the baseline it is measured against.
    assert expr.count(">= 50") == 2
    assert "sum by (job, instance, model_name)" in expr


def test_a_fixed_floor_replaces_the_baseline() -> None:
    rule = _rule(_files({"below": 0.3, "min_queried_tokens_per_second": 10, "for": "30m"}))
    assert "quantile_over_time" not in rule["expr"]
    assert "\n< 0.3\nand\n" in rule["expr"] and rule["expr"].endswith(">= 10")
    assert rule["for"] == "30m"
    assert "below 30%" in rule["annotations"]["description"]


def _promtool(files: dict[str, str], tmp_path: Path, promtool: str) -> str:
    write_all(files, tmp_path)
    result = subprocess.run([promtool, "test", "rules",
                             str(tmp_path / "prometheus/tests/health.test.yml")],
                            capture_output=True, text=True, timeout=300, check=False)
    return result.stdout + result.stderr


@pytest.mark.integration
@pytest.mark.parametrize("option", [
    None, {"below": 0.3}, {"below_baseline": 0.8, "baseline": "1d"},
    {"min_queried_tokens_per_second": 0}, {"min_queried_tokens_per_second": 500, "for": "5m"},
], ids=["the default", "a fixed floor", "a one-day baseline", "no quiet-server guard",
        "a busier guard"])
def test_the_generated_scenario_passes_for_each_option(
        promtool: str, tmp_path: Path, option: dict[str, object] | None) -> None:
    output = _promtool(_files(option), tmp_path, promtool)
    assert "FAILED" not in output and "SUCCESS" in output, output


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize(("broken", "replacement"), [
    ("< 0.5 * quantile_over_time", "< 0.1 * quantile_over_time"),  # would miss the drop
    ("[5m])) >= 50\n", "[5m])) >= 0\n"),  # would page for the quiet server
    ("< 0.5 * quantile_over_time", "< 0.5 + quantile_over_time"),  # fires on a steady ratio
], ids=["a threshold too low", "no quiet-server guard", "not relative"])
def test_the_scenario_catches_a_broken_rule(promtool: str, tmp_path: Path, broken: str,
                                            replacement: str) -> None:
    files = _files()
    assert broken in files[HEALTH]
    files[HEALTH] = files[HEALTH].replace(broken, replacement)
    output = _promtool(files, tmp_path, promtool)
    assert "FAILED" in output and NAME in output.split("FAILED", 1)[1]
