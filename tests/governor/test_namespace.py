"""Everything lives under ``governor.*``: a user's ``common.py`` or ``alerts.py`` shadows nothing.

The packages used to be installed as top-level ``common``, ``alerts``, ``inference``,
``dashboards`` and ``controller``, so a script run from a folder holding a file of one of those
names broke the tool (``'common' is not a package``). Python puts a script's folder, or the
current folder under ``-m`` and ``-c``, first on ``sys.path``; these tests make such a folder and
run the tool from it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHADOWS = ("common", "slo", "alerts", "inference", "dashboards", "controller", "exporters",
           "render",
           "bench", "lab")
MODULES = (
    "governor.common.cli", "governor.alerts.render", "governor.inference.app",
    "governor.dashboards.render", "governor.controller.law.decide", "governor.exporters.server",
    "governor.bench.controller", "governor.cli",
)


@pytest.fixture
def hostile_folder(tmp_path: Path) -> Path:
    """A folder whose every generic module name would explode if the tool imported it."""
    for name in SHADOWS:
        message = f"imported the user's {name}.py"
        (tmp_path / f"{name}.py").write_text(f"raise SystemExit({message!r})\n")
    return tmp_path


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
                          check=False)


def test_a_script_beside_user_modules_imports_every_package(hostile_folder: Path) -> None:
    script = hostile_folder / "script.py"
    script.write_text("import importlib\n"
                      f"for name in {MODULES!r}:\n"
                      "    importlib.import_module(name)\n"
                      "print('ok')\n")
    result = run([sys.executable, str(script)], hostile_folder)
    assert (result.returncode, result.stdout.strip()) == (0, "ok"), result.stderr


@pytest.mark.parametrize("command", ["serve", "exporter", "controller", "generate", "up", "bench"])
def test_every_command_answers_help_from_that_folder(hostile_folder: Path, command: str) -> None:
    result = run([sys.executable, "-m", "governor", command, "--help"], hostile_folder)
    assert result.returncode == 0, result.stderr
    assert "usage" in result.stdout.lower()


def test_generate_writes_the_stack_from_that_folder(hostile_folder: Path) -> None:
    out = hostile_folder / "out"
    result = run([sys.executable, "-m", "governor", "generate", "--slo", str(ROOT / "slo.yaml"),
                  "--out", str(out)], hostile_folder)
    assert result.returncode == 0, result.stderr
    assert (out / "prometheus" / "prometheus.yml").is_file()
    assert (out / "grafana" / "dashboards" / "governor-slo.json").is_file()
