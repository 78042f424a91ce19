"""The GPU health alerts of a dcgm-exporter spec (targets.gpu.source: dcgm): Governor's alerts on
DCGM's fields, under every release's names, and promtool tests that notice when a release's
names are not read."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from governor.alerts.render import render_all, write_all
from governor.contracts.metrics import dcgm
from governor.generation.catalog import load_checked_spec
from tests.alerts.cases import CASES, ROOT
from tests.alerts.test_tools import _mutate

SPEC, ENDPOINTS, PARAMS = CASES["dcgm"]
HEALTH = "prometheus/rules/health.yml"
HEALTH_TESTS = "prometheus/tests/health.test.yml"


def files() -> dict[str, str]:
    return render_all(load_checked_spec(SPEC), ENDPOINTS, PARAMS)


def alerts(rendered: dict[str, str]) -> dict[str, dict[str, Any]]:
    groups = yaml.safe_load(rendered[HEALTH])["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"] if "alert" in rule}


def test_the_gpu_alerts_are_governors_but_the_exporters_staleness() -> None:
    governors = alerts(render_all(load_checked_spec(ROOT / "slo.yaml")))
    mine = alerts(files())
    # DCGM has no per-process series: the process count's and the idle memory's alerts are not
    # in DCGM (docs/dcgm.md).
    not_in_dcgm = {"GpuExporterStale", "GpuProcessCountHigh", "GpuMemoryGrowsWhileIdle"}
    assert list(mine) == [name for name in governors if name not in not_in_dcgm]
    for name, rule in mine.items():
        assert rule["labels"] == governors[name]["labels"], name
        assert rule.get("for") == governors[name].get("for"), name
        assert rule["annotations"]["summary"] == governors[name]["annotations"]["summary"]


def test_the_gpu_alerts_read_dcgm_exporters_job_and_fields_only() -> None:
    gpu_rules = {name: rule["expr"] for name, rule in alerts(files()).items()
                 if name.startswith("Gpu")}
    for name, expr in gpu_rules.items():
        assert "gpu_" not in expr, name
        assert 'job="nvidia-dcgm-exporter", namespace="gpu-operator"' in expr, name
    text = "\n".join(gpu_rules.values())
    for reading in (dcgm.PRESENCE, dcgm.XID, dcgm.ECC_UNCORRECTED, dcgm.CLOCK_EVENT_REASONS,
                    dcgm.FB_USED, dcgm.FB_CAPACITY):
        for field in reading.fields:
            assert f"{field.name}{{" in text, field.name
    assert f"{dcgm.FB_FREE.names[0][1].name}{{" in text  # before 4.9, the total is used + free
    # An XID alert carries the code as Governor's does (label xid), from dcgm's err_code.
    assert 'label_replace(' in gpu_rules["GpuXidErrors"]
    assert '"xid", "$1", "err_code"' in gpu_rules["GpuXidErrors"]


def test_the_scenarios_mix_releases_so_each_names_generation_is_tested() -> None:
    tests = yaml.safe_load(files()[HEALTH_TESTS])["tests"]
    for test in tests:
        name = test["name"].split(":")[0]
        if not name.startswith("Gpu"):
            continue
        series = " ".join(s["series"] for s in test["input_series"])
        assert "Hostname=" in series and "hostname=" in series, name  # 4.8's and 4.9's labels


def _renamed(text: str, release: str) -> str:
    """The rules with the names of a renamed field that ``release``'s collectors use misspelt
    (4.8: the old names; 4.9: those it renamed)."""
    for reading in dcgm.READINGS:
        field, oldest = reading.in_release(release), reading.names[0][1]
        if field is not None and len(reading.fields) > 1 and (
                release == dcgm.RELEASE_4_8 or field != oldest):
            text = re.sub(rf"\b{field.name}\{{", f"{field.name}_MISSING{{", text)
    return text


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("mutation", ["4.8's names unread", "4.9's names unread",
                                      "alerts that never fire", "alerts that always fire"])
def test_the_unit_tests_notice_rules_that_miss_a_release_or_a_threshold(
        promtool: str, tmp_path: Path, mutation: str) -> None:
    rendered = files()
    text = rendered[HEALTH]
    mutated = {"4.8's names unread": lambda: _renamed(text, dcgm.RELEASE_4_8),
               "4.9's names unread": lambda: _renamed(text, dcgm.RELEASE_4_9),
               "alerts that never fire": lambda: _mutate(text, always=False),
               "alerts that always fire": lambda: _mutate(text, always=True)}[mutation]()
    assert mutated != text
    write_all({**rendered, HEALTH: mutated}, tmp_path)
    result = subprocess.run([promtool, "test", "rules", str(tmp_path / HEALTH_TESTS)],
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode != 0, f"{mutation}: the tests passed against broken alerts"
    failed = set(re.findall(r"alertname: (Gpu\w+)", result.stdout + result.stderr))
    if mutation.endswith("unread"):
        # every GPU alert reading a renamed field notices; the ECC one reads a name both share
        assert failed >= {"GpuExporterSeesNoGpus", "GpuLost", "GpuXidErrors",
                          "GpuThermalThrottling", "GpuPowerThrottling",
                          "GpuMemoryNearlyFull"}, failed


def test_docs_dcgm_says_how_dcgm_shapes_each_gpu_alert() -> None:
    text = (ROOT / "docs" / "dcgm.md").read_text(encoding="utf-8")
    for name in alerts(files()):
        if name.startswith(("Gpu", "GovernorTargetDown")):
            assert re.search(rf"^\| [^|]*\b{name}\b", text, flags=re.MULTILINE), name
    assert "`GpuExporterStale` is left out" in text
