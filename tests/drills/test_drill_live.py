"""``governor drill`` end to end on the real stack (the service on the simulated engine, the
fake GPUs, the controller, Prometheus and Alertmanager): a healthy drill sees no verdict, and a
fault drill ends on a JSON line a script can score. Whether the verdict is right is the drill
matrix's to judge (docs/drills.md), not this test's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from governor.common.process import free_ports
from governor.drills.catalog import by_name
from governor.drills.stack import ports_from

# The drills' stacks run in the real vLLM engine tests' process, one after another with them
# (tests/support/parallel.py): an engine on the CPU takes every core it finds, and the healthy
# drill's 120 ms inter-token SLO would then measure what CPU it left the stack, not the stack.
pytestmark = pytest.mark.xdist_group("vllm")

ROOT = Path(__file__).resolve().parents[2]
FIELDS = ("drill", "spec", "seed", "injected", "found", "verdict", "onset_to_verdict_seconds",
          "alerts", "controller_changes", "controller_reasons", "notes")


def free_port_base() -> int:
    return free_ports(len(vars(ports_from(1024))), consecutive=True)[0]


def drill(tmp_path: Path, *argv: str) -> tuple[list[str], dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "governor", "drill", *argv, "--slo", str(ROOT / "slo.yaml"),
         "--port-base", str(free_port_base()), "--run-dir", str(tmp_path / argv[0])],
        capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    return lines, json.loads(lines[-1])


@pytest.mark.integration
@pytest.mark.slow
def test_a_healthy_drill_sees_no_verdict(tmp_path: Path) -> None:
    lines, result = drill(tmp_path, "healthy", "--onset", "20", "--wait", "40")
    assert all(field in result for field in FIELDS)
    assert (result["drill"], result["found"], result["verdict"]) == ("healthy", None, [])
    assert result["verdict_polls"] == 0 and result["onset_to_verdict_seconds"] is None
    assert any("injected: nothing" in line for line in lines)


@pytest.mark.integration
@pytest.mark.slow
def test_a_fault_drill_injects_its_fault_and_reports_what_it_saw(tmp_path: Path) -> None:
    lines, result = drill(tmp_path, "gpu_throttled", "--onset", "30", "--wait", "90",
                          "--settle", "5", "--seed", "2")
    assert all(field in result for field in FIELDS)
    assert result["drill"] == result["expected"] == "gpu_throttled" and result["seed"] == 2
    faults = by_name("gpu_throttled").faults  # the catalog's, as PUT on the simulated GPU
    assert result["injected"]["faults"] == json.loads(json.dumps(dict(faults)))
    assert isinstance(result["controller_changes"], int)
    ratio = faults["clock_ratio"]
    assert any(f'injected: faults {{"clock_ratio": {ratio}' in line for line in lines)
    # Its clients were answered all along.
    logs = tmp_path / "gpu_throttled" / "logs"
    assert (logs / "load-healthy.log").read_text().count('"200"') > 0
