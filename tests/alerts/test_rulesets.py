"""Rule sets: found in their package, in a fixed order; a new rule set is one new module."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from governor.alerts import rulesets as rulesets_package
from governor.alerts.render import PROMETHEUS_RULE, render_all
from governor.alerts.rulesets import rulesets
from governor.generation.catalog import load_checked_spec, parse_checked_spec
from tests.alerts.cases import ROOT

EXTRA_RULESET = '''
from governor.alerts.ruleset import RuleSet
from governor.alerts.rules import AlertRule, RuleGroup

RULESET = RuleSet(
    name="extra",
    rules=lambda scope: (RuleGroup("extra", (AlertRule(
        f"{scope.the_slo.camel_name}Extra", "vector(1)", {"severity": "ticket"},
        {"summary": "an extra alert"}),)),),
    tests=lambda scope: (),
    applies=lambda scope: scope.the_slo.controller,
    per_slo=True,
)
'''


@pytest.fixture
def extra_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder that ``governor.alerts.rulesets`` also reads, as if it held one more module."""
    monkeypatch.setattr(rulesets_package, "__path__", [*rulesets_package.__path__, str(tmp_path)])
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:  # the folder's modules, so no other test sees them
        del sys.modules[name]


def rule_groups(files: dict[str, str]) -> list[str]:
    document: dict[str, Any] = yaml.safe_load(files[PROMETHEUS_RULE])
    return [group["name"] for group in document["spec"]["groups"]]


def test_the_rule_sets_come_per_slo_first_then_by_name() -> None:
    assert [(f.name, f.per_slo) for f in rulesets()] == [
        ("classes", True), ("slo", True), ("control", False), ("cost", False), ("health", False),
        ("scale", False), ("stages", False), ("verdict", False)]


def test_a_rule_set_applies_only_where_it_says() -> None:
    spec = load_checked_spec(ROOT / "slo.yaml")
    data = yaml.safe_load((ROOT / "slo.yaml").read_text(encoding="utf-8"))
    for slo in data["slos"]:
        slo["controller"] = False
    del data["classes"]
    files = render_all(parse_checked_spec(data))
    full = render_all(spec)
    assert "prometheus/rules/control.yml" in full
    assert not any("control" in path for path in files)
    # Per-class rules exist for the latency SLOs, and only while the spec declares classes.
    assert {p for p in full if p.startswith("prometheus/rules/classes-")} == {
        "prometheus/rules/classes-inter-token-latency.yml",
        "prometheus/rules/classes-time-to-first-token.yml"}
    assert {p for p in files if p.startswith("prometheus/rules/")} == {
        *(f"prometheus/rules/slo-{slo.name}.yml" for slo in spec.slos),
        "prometheus/rules/cost.yml", "prometheus/rules/health.yml",
        "prometheus/rules/stages.yml", "prometheus/rules/verdict.yml"}
    # Where the time went: only governor serve measures the stages, and only latency SLOs have
    # them (stock vLLM's example: none).
    stock = render_all(load_checked_spec(ROOT / "examples" / "stock-vllm" / "slo.yaml"))
    assert "prometheus/rules/stages.yml" not in stock
    data["slos"] = [slo for slo in data["slos"] if "ratio" in slo["sli"]]
    assert "prometheus/rules/stages.yml" not in render_all(parse_checked_spec(data))
    # Why a latency SLO burns: every fleet gets the verdict, and a spec of ratios alone none.
    assert "prometheus/rules/verdict.yml" in stock
    assert "prometheus/rules/verdict.yml" not in render_all(parse_checked_spec(data))


def test_a_new_rule_set_is_one_module_and_nothing_else(extra_module: Path) -> None:
    (extra_module / "extra.py").write_text(EXTRA_RULESET, encoding="utf-8")
    assert [f.name for f in rulesets()] == ["classes", "extra", "slo", "control", "cost",
                                            "health", "scale", "stages", "verdict"]
    files = render_all(load_checked_spec(ROOT / "slo.yaml"))
    assert "InterTokenLatencyExtra" in files["prometheus/rules/extra-inter-token-latency.yml"]
    assert not any("extra-availability" in path or path.startswith("prometheus/tests/extra")
                   for path in files)  # applies to the controller's SLO only; no tests
    groups = rule_groups(files)
    assert groups.index("extra") < groups.index("slo-sli-availability")


def test_a_module_without_a_rule_set_is_an_error(extra_module: Path) -> None:
    (extra_module / "stray.py").write_text("VALUE = 1\n", encoding="utf-8")
    with pytest.raises(TypeError, match="stray must define RULESET"):
        rulesets()


def test_two_rule_sets_of_one_name_are_an_error(extra_module: Path) -> None:
    (extra_module / "again.py").write_text(
        "from governor.alerts.rulesets.health import RULESET\n", encoding="utf-8")
    with pytest.raises(ValueError, match="'health' already exists"):
        rulesets()
