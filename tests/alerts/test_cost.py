"""Energy and cost per token (``cost.yml``): what the rules read on each exporter, with and
without a GPU-hour price, and their promtool test of hand-worked answers, which a broken rule
fails."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from governor.alerts.render import render_all, write_all
from governor.contracts.metrics import cost as c
from governor.contracts.metrics import dcgm, gpu, vllm
from governor.generation.catalog import parse_checked_spec
from tests.alerts.cases import ROOT, TESTDATA

RULES = "prometheus/rules/cost.yml"
TESTS = "prometheus/tests/cost.test.yml"
SPECS = {"governor": ROOT / "slo.yaml", "dcgm": TESTDATA / "dcgm.yaml",
         "stock": ROOT / "examples/stock-vllm/slo.yaml"}


def _files(spec: str = "governor", price: float | None = 3.5) -> dict[str, str]:
    data: dict[str, Any] = yaml.safe_load(SPECS[spec].read_text(encoding="utf-8"))
    data.pop("cost", None)
    if price is not None:
        data["cost"] = {"gpu_hour_price": price}
    return render_all(parse_checked_spec(data))


def _rules(files: dict[str, str]) -> dict[str, str]:
    groups = yaml.safe_load(files[RULES])["groups"]
    return {rule["record"]: rule["expr"] for group in groups for rule in group["rules"]}


def test_the_rules_read_the_energy_counter_and_vllms_token_counters() -> None:
    rules = _rules(_files())
    assert f"rate({gpu.ENERGY.total}{{job=\"gpu\"}}[5m])" in rules[c.NODE_WATTS]
    assert f"{gpu.UP.name}{{job=\"gpu\"}}" in rules[c.NODE_GPUS]
    out = rules[c.recorded(c.OUTPUT_TOKENS, c.LEVEL_TARGET)]
    assert f"rate({vllm.GENERATION_TOKENS.total}{{job=\"inference\"}}[5m])" in out
    assert out.startswith("sum by (job, instance, model_name, node) (")  # its node kept
    cost = rules[c.recorded(c.COST_PER_SECOND, c.LEVEL_TARGET)]
    assert f"({c.NODE_GPUS} * 3.5 / 3600)" in cost
    for quantity in (*c.ENERGY_RESULTS, *c.COST_RESULTS):
        for level in (c.LEVEL_TARGET, c.LEVEL_MODEL):
            assert c.recorded(quantity, level) in rules


def test_without_a_price_only_energy_is_recorded() -> None:
    rules = _rules(_files(price=None))
    assert not any("cost" in name for name in rules)
    assert c.recorded(c.JOULES_PER_OUTPUT_TOKEN, c.LEVEL_MODEL) in rules
    assert "cost_per_million" not in _files(price=None)[TESTS]


def test_on_dcgm_the_energy_is_read_under_each_releases_name_in_joules() -> None:
    watts = _rules(_files("dcgm"))[c.NODE_WATTS]
    old, new = (dcgm.ENERGY.in_release(r) for r in (dcgm.RELEASE_4_8, dcgm.RELEASE_4_9))
    assert old is not None and new is not None
    assert f"rate({new.name}{{" in watts and f"rate({old.name}{{" in watts
    assert "* 0.001" in watts and "gpu_" not in watts.replace("gpu-operator", "")


def _promtool(files: dict[str, str], tmp_path: Path, promtool: str) -> str:
    write_all(files, tmp_path)
    result = subprocess.run([promtool, "test", "rules", str(tmp_path / TESTS)],
                            capture_output=True, text=True, timeout=300, check=False)
    return result.stdout + result.stderr


@pytest.mark.integration
@pytest.mark.parametrize(("spec", "price"), [
    ("governor", 3.5), ("governor", None), ("governor", 0.07), ("dcgm", 3.5), ("stock", 2.0)],
    ids=["Governor's exporter", "no price", "a small price", "dcgm-exporter", "stock vLLM"])
def test_the_hand_worked_answers_pass(promtool: str, tmp_path: Path, spec: str,
                                      price: float | None) -> None:
    output = _promtool(_files(spec, price), tmp_path, promtool)
    assert "FAILED" not in output and "SUCCESS" in output, output


@pytest.mark.integration
@pytest.mark.parametrize(("broken", "replacement"), [
    ("/ 3600)", "/ 60)"),  # a GPU minute's price, not an hour's
    (f"({c.NODE_OUTPUT_TOKENS} > 0)", "(1 + 0 * node:output_tokens_per_second:rate5m)"),
    ("[5m]) * 0.001", "[5m])"),  # mJ read as J
    ("max by (node, instance, gpu) (", "sum by (node, instance, gpu) ("),  # MIG instances summed
], ids=["per minute", "not shared by tokens", "millijoules", "a MIG GPU counted per instance"])
def test_a_broken_rule_fails_them(promtool: str, tmp_path: Path, broken: str,
                                  replacement: str) -> None:
    files = _files("dcgm")
    assert broken in files[RULES], broken
    files[RULES] = files[RULES].replace(broken, replacement)
    output = _promtool(files, tmp_path, promtool)
    assert "FAILED" in output, output
