"""The generated artifacts checked by the real tools: promtool (2.42) and amtool (0.25).

Every generated alert has a promtool unit test; these run them, and then break the rules on
purpose to show that the same tests notice.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from governor.alerts.render import render_all, write_all
from governor.generation.catalog import load_checked_spec
from tests.alerts import promtool_run
from tests.alerts.cases import CASES, DEPLOY, EXAMPLES, GOLDEN, ROOT

pytestmark = pytest.mark.integration

OUTPUTS = ["deploy", *sorted(EXAMPLES), *sorted(CASES)]


def output_dir(name: str) -> Path:
    return DEPLOY if name == "deploy" else EXAMPLES.get(name, GOLDEN / name)


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("name", OUTPUTS)
def test_promtool_accepts_the_rules_with_every_lint(promtool: str, name: str) -> None:
    rules = sorted(str(p) for p in (output_dir(name) / "prometheus/rules").glob("*.yml"))
    result = run(promtool, "check", "rules", "--lint=all", "--lint-fatal", *rules)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", OUTPUTS)
def test_promtool_accepts_the_prometheus_config(promtool: str, name: str) -> None:
    result = run(promtool, "check", "config", str(output_dir(name) / "prometheus/prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rule files found" in result.stdout


@pytest.mark.parametrize("name", OUTPUTS)
def test_amtool_accepts_the_alertmanager_config(amtool: str, name: str) -> None:
    config = output_dir(name) / "alertmanager/alertmanager.yml"
    result = run(amtool, "check-config", str(config))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 receivers" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("name", OUTPUTS)
def test_every_generated_unit_test_passes(promtool: str, name: str, tmp_path: Path) -> None:
    tests = sorted((output_dir(name) / "prometheus/tests").glob("*.test.yml"))
    assert tests
    assert promtool_run.run_all(promtool, tests, tmp_path) == []


def test_the_split_run_keeps_every_group_and_reports_a_failing_one(
        promtool: str, tmp_path: Path) -> None:
    source = DEPLOY / "prometheus/tests/verdict.test.yml"
    groups = yaml.safe_load(source.read_text())["tests"]
    pieces = promtool_run.split([source], tmp_path / "split")
    assert [g for p in pieces for g in yaml.safe_load(p.read_text())["tests"]] == groups
    # One group's expectation broken: its piece, and only its piece, fails.
    broken = tmp_path / "broken" / "verdict.test.yml"
    broken.parent.mkdir()
    document = yaml.safe_load(source.read_text())
    document["rule_files"] = [str((source.parent / r).resolve()) for r in document["rule_files"]]
    document["tests"] = document["tests"][:promtool_run.GROUPS_PER_FILE + 1]  # two pieces
    last = document["tests"][-1]
    last["promql_expr_test"] = [{"expr": "vector(1)", "eval_time": "1m",
                                 "exp_samples": [{"labels": "{}", "value": 2}]}]
    broken.write_text(yaml.safe_dump(document, sort_keys=False))
    failures = promtool_run.run_all(promtool, [broken], tmp_path / "run")
    assert len(failures) == 1 and "FAILED" in failures[0], failures


# Mutations: alerts that can never fire, and alerts that always fire.
THRESHOLD = re.compile(r"(>=?|==) [0-9.e+]+")


def _mutate(text: str, always: bool) -> str:
    """Rewrite every alert condition: comparisons that nothing passes, or that everything does."""
    lines = text.splitlines(keepends=True)
    out, in_alert = [], False
    for line in lines:
        if line.lstrip().startswith("- alert:"):
            in_alert = True
        elif line.lstrip().startswith("- record:"):
            in_alert = False
        if in_alert and not line.lstrip().startswith(("summary:", "description:")):
            line = THRESHOLD.sub(">= -1e300" if always else "> 1e300", line)
        out.append(line)
    return "".join(out)


@pytest.mark.slow
@pytest.mark.parametrize("always", [False, True], ids=["alerts that never fire",
                                                       "alerts that always fire"])
@pytest.mark.parametrize("rules", ["slo-availability", "control", "health"])
def test_the_unit_tests_catch_broken_alerts(
    promtool: str, tmp_path: Path, rules: str, always: bool
) -> None:
    files = render_all(load_checked_spec(ROOT / "slo.yaml"))
    path = f"prometheus/rules/{rules}.yml"
    mutated = _mutate(files[path], always)
    assert mutated != files[path]
    write_all({**files, path: mutated}, tmp_path)
    result = run(promtool, "test", "rules", str(tmp_path / f"prometheus/tests/{rules}.test.yml"))
    assert result.returncode != 0, f"{rules}: the tests passed against broken alerts"
    assert "FAILED" in result.stdout + result.stderr


@pytest.mark.slow
def test_the_unit_tests_catch_a_period_ratio_that_averages_slices(
    promtool: str, tmp_path: Path
) -> None:
    """Sloth's period ratio averages 5-minute ratios; the generated test must reject that."""
    files = render_all(load_checked_spec(ROOT / "slo.yaml"))
    path = "prometheus/rules/slo-availability.yml"
    selector = '{slo="availability", service="inference"}'
    weighted = (f"sum_over_time(slo:sli_error_events:rate5m{selector}[30d])\n"
                f"          /\n          sum_over_time(slo:sli_events:rate5m{selector}[30d])")
    assert weighted in files[path]
    averaged = files[path].replace(
        weighted, f"avg_over_time(slo:sli_error:ratio_rate5m{selector}[30d])")
    write_all({**files, path: averaged}, tmp_path)
    result = run(promtool, "test", "rules",
                 str(tmp_path / "prometheus/tests/slo-availability.test.yml"))
    assert result.returncode != 0
    assert 'FAILED:\n    expr: "(slo:sli_error:ratio_period' in result.stderr
