"""``governor generate``: writes, checks, and answers a user's mistakes without a traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from governor.alerts.cli import main
from governor.alerts.render import PROMETHEUS_CONFIG
from governor.cli import COMMANDS
from governor.cli import main as governor
from tests.alerts.cases import DEPLOY, ROOT


def test_generate_writes_every_file_then_reports_nothing_changed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--slo", str(ROOT / "slo.yaml"), "--out", str(tmp_path)]) == 0
    assert "13 files under" in capsys.readouterr().out
    assert main(["--slo", str(ROOT / "slo.yaml"), "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip().endswith("13 files under " + str(tmp_path)
                                                    + ", 0 changed")
    for relative in ("prometheus/prometheus.yml", "alertmanager/alertmanager.yml",
                     "prometheus/rules/control.yml", "prometheus/tests/health.test.yml",
                     "kubernetes/prometheusrule.yaml"):
        assert (tmp_path / relative).is_file()


def test_check_passes_on_the_committed_deploy_directory() -> None:
    assert main(["--slo", str(ROOT / "slo.yaml"), "--out", str(DEPLOY), "--check"]) == 0


def test_check_names_the_stale_files_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(DEPLOY, tmp_path, dirs_exist_ok=True)
    spec = tmp_path / "slo.yaml"
    spec.write_text((ROOT / "slo.yaml").read_text(encoding="utf-8").replace(
        "objective: 99.9", "objective: 99.5"), encoding="utf-8")
    before = (tmp_path / "prometheus/rules/slo-availability.yml").read_text(encoding="utf-8")
    assert main(["--slo", str(spec), "--out", str(tmp_path), "--check"]) == 1
    err = capsys.readouterr().err
    assert f"stale: {tmp_path}/prometheus/rules/slo-availability.yml" in err
    assert "run: governor generate" in err
    assert (tmp_path / "prometheus/rules/slo-availability.yml").read_text(
        encoding="utf-8") == before


def test_local_and_explicit_targets_reach_prometheus_yml(tmp_path: Path) -> None:
    assert main(["--out", str(tmp_path / "a"), "--slo", str(ROOT / "slo.yaml"), "--local",
                 "--scrape-interval", "5s", "--fast-window", "20s"]) == 0
    text = (tmp_path / "a" / PROMETHEUS_CONFIG).read_text(encoding="utf-8")
    assert "127.0.0.1:8000" in text
    assert "scrape_interval: 5s" in text
    assert main(["--out", str(tmp_path / "b"), "--slo", str(ROOT / "slo.yaml"),
                 "--inference-targets", "gpu-a:8000, gpu-b:8000"]) == 0
    text = (tmp_path / "b" / PROMETHEUS_CONFIG).read_text(encoding="utf-8")
    assert "- gpu-a:8000\n          - gpu-b:8000" in text


def test_a_broken_spec_prints_every_problem_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "slo.yaml"
    spec.write_text("version: governor/v1\nservice: x\nperiod: 1d\nslos: []\nextra: 1\n",
                    encoding="utf-8")
    assert main(["--slo", str(spec), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "3 problems in the SLO spec" in err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--scrape-interval", "soon"], "not a duration"),
        (["--scrape-interval", "1.5s"], "whole seconds only"),
        (["--scrape-interval", "60s", "--fast-window", "1m"], "at least two scrapes"),
        (["--inference-targets", "no-port"], "expected host:port"),
        (["--bogus"], "unrecognized arguments"),
    ],
)
def test_bad_options_are_usage_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_options_read_governor_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOVERNOR_SLO", str(ROOT / "slo.yaml"))
    monkeypatch.setenv("GOVERNOR_OUT", str(tmp_path))
    monkeypatch.setenv("GOVERNOR_EXPORTER_TARGETS", "gpu-node:9400")
    assert main([]) == 0
    assert "gpu-node:9400" in (tmp_path / PROMETHEUS_CONFIG).read_text(encoding="utf-8")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_an_unwritable_output_is_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) \
        -> None:
    tmp_path.chmod(0o500)
    try:
        assert main(["--slo", str(ROOT / "slo.yaml"), "--out", str(tmp_path / "out")]) == 1
    finally:
        tmp_path.chmod(0o700)
    assert "cannot write under" in capsys.readouterr().err


def test_an_output_path_that_is_a_file_is_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "out"
    blocker.write_text("not a directory", encoding="utf-8")
    assert main(["--slo", str(ROOT / "slo.yaml"), "--out", str(blocker)]) == 1
    assert "cannot write under" in capsys.readouterr().err


def test_the_governor_command_dispatches_generate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert governor(["generate", "--slo", str(ROOT / "slo.yaml"), "--out", str(tmp_path)]) == 0
    assert governor([]) == 0
    usage = capsys.readouterr().out
    assert any(line.split(None, 1) == ["generate", COMMANDS["generate"].summary]
               for line in usage.splitlines())


def test_python_dash_m_alerts_runs_the_same_command(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "governor.alerts", "--slo", str(ROOT / "slo.yaml"),
         "--out", str(tmp_path), "--check"],
        capture_output=True, text=True, cwd=ROOT, timeout=60, check=False,
    )
    assert result.returncode == 1  # the empty directory is stale
    assert "stale:" in result.stderr
