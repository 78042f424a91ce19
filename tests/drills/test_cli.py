"""``governor drill``'s arguments and the mistakes a user can make: each a one-line error, never
a traceback, and nothing started."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from governor.common.process import free_ports
from governor.contracts import causes
from governor.drills import catalog
from governor.drills.cli import EXIT_FAILED, EXIT_USAGE, main
from governor.drills.matrix import JSONL
from governor.drills.stack import ports_from

ROOT = Path(__file__).resolve().parents[2]


def test_every_cause_but_unknown_has_a_drill_and_healthy_is_one() -> None:
    names = {c.name for c in causes.CAUSES} - {causes.UNKNOWN.name}
    assert set(catalog.NAMES) == names | {catalog.HEALTHY_NAME}


def test_an_unknown_cause_is_refused_with_the_list_of_causes(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gpu_on_fire"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no drill 'gpu_on_fire'" in err
    assert all(name in err for name in catalog.NAMES)
    assert "unknown" not in err.split(":", 2)[2].replace("'gpu_on_fire'", "")


def test_a_spec_that_is_not_there_is_refused(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["healthy", "--slo", str(tmp_path / "nope.yaml")]) == EXIT_USAGE
    assert "nope.yaml: no such spec file" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["healthy", "--load-scale", "0"],
                                  ["healthy", "--onset", "soon"],
                                  ["all", "--seeds", "one,two"]])
def test_bad_option_values_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == EXIT_USAGE


def test_list_names_every_drill_and_what_it_injects(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out] == list(catalog.NAMES)


def test_summarize_prints_the_score_without_running(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    record = {"drill": "queue", "seed": 1, "expected": "queue", "found": "queue",
              "onset_to_verdict_seconds": 30.0, "controller_changes": 0}
    (tmp_path / JSONL).write_text(json.dumps(record) + "\n")
    assert main(["all", "--summarize", str(tmp_path)]) == 0
    assert "leading cause right in 1/1" in capsys.readouterr().out
    assert main(["all", "--summarize", str(tmp_path / "none")]) == EXIT_FAILED


def test_a_port_in_use_is_refused_before_anything_starts(tmp_path: Path) -> None:
    base = free_ports(len(vars(ports_from(1024))), consecutive=True)[0]
    port = base + 3  # the stack's Prometheus port is the one taken
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        done = subprocess.run(
            [sys.executable, "-m", "governor", "drill", "healthy", "--slo",
             str(ROOT / "slo.yaml"), "--port-base", str(base), "--run-dir", str(tmp_path)],
            capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == EXIT_FAILED
    assert f"already in use: port {port} (prometheus): pid {os.getpid()}" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "logs").exists()


def test_a_port_base_out_of_range_is_refused(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "governor", "drill", "healthy", "--slo", str(ROOT / "slo.yaml"),
         "--port-base", "65533", "--run-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == EXIT_FAILED
    assert "ports must lie in 1024-65535" in done.stderr and "Traceback" not in done.stderr
