"""``governor generate``: writes rules and boards in one pass, checks them, and answers a user's
mistakes without a traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from governor.alerts.render import PROMETHEUS_CONFIG, PROMETHEUS_TARGETS
from governor.cli import COMMANDS
from governor.cli import main as governor
from governor.dashboards.render import DASHBOARDS_DIR, DATASOURCES
from governor.generate import main
from governor.generation.catalog import load_checked_spec
from governor.slo.spec import SloSpec
from tests.alerts.cases import DEPLOY, EXAMPLES, ROOT

SLO = str(ROOT / "slo.yaml")
FILES = 40  # 28 on the rules side (the inference targets, 2 per-class rule files and their
# tests, the scale family, the stages family, the verdict and the cost rules, each with its test,
# the probe's SLO and its test), 6 for Grafana, 6
# Kubernetes manifests (the two autoscalers and the probe among them)


def test_generate_writes_rules_and_boards_then_reports_nothing_changed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--slo", SLO, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.strip().endswith(f"{FILES} files under {tmp_path}, {FILES} changed")
    assert out.count("wrote ") == FILES
    assert main(["--slo", SLO, "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == f"{FILES} files under {tmp_path}, 0 changed"
    for relative in ("prometheus/prometheus.yml", "alertmanager/alertmanager.yml",
                     "prometheus/rules/control.yml", "prometheus/tests/health.test.yml",
                     "kubernetes/prometheusrule.yaml", f"{DASHBOARDS_DIR}/governor-slo.json",
                     DATASOURCES):
        assert (tmp_path / relative).is_file()


def test_the_spec_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[Path] = []

    def counting(path: Path) -> SloSpec:
        reads.append(path)
        return load_checked_spec(path)

    monkeypatch.setattr("governor.generate.load_checked_spec", counting)
    assert main(["--slo", SLO, "--out", str(tmp_path)]) == 0
    assert reads == [Path(SLO)]


def test_check_passes_on_the_committed_deploy_directory() -> None:
    assert main(["--slo", SLO, "--out", str(DEPLOY), "--check"]) == 0


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_check_passes_on_each_committed_examples_output(example: str) -> None:
    """examples/<name>/slo.yaml beside its generated deploy/: regenerate both or the test fails
    (governor generate --slo examples/<name>/slo.yaml --out examples/<name>/deploy)."""
    out = EXAMPLES[example]
    assert main(["--slo", str(out.parent / "slo.yaml"), "--out", str(out), "--check"]) == 0


def test_check_names_stale_rules_and_boards_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(DEPLOY, tmp_path, dirs_exist_ok=True)
    spec = tmp_path / "slo.yaml"
    spec.write_text(Path(SLO).read_text(encoding="utf-8").replace(
        "objective: 99.9", "objective: 99.5").replace("threshold: 120ms", "threshold: 100ms"),
        encoding="utf-8")
    rules = tmp_path / "prometheus/rules/slo-availability.yml"
    board = tmp_path / DASHBOARDS_DIR / "governor-inference.json"
    before = rules.read_text(encoding="utf-8"), board.read_text(encoding="utf-8")
    assert main(["--slo", str(spec), "--out", str(tmp_path), "--check"]) == 1
    err = capsys.readouterr().err
    assert f"stale: {rules}" in err
    assert f"stale: {board}" in err
    assert f"stale: {tmp_path}/prometheus/rules/slo-inter-token-latency.yml" in err
    assert f"run: governor generate --slo {spec} --out {tmp_path}" in err
    assert (rules.read_text(encoding="utf-8"), board.read_text(encoding="utf-8")) == before


def test_writing_removes_stale_generated_files_and_keeps_hand_made_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--slo", SLO, "--out", str(tmp_path)]) == 0
    retired = {tmp_path / "prometheus/rules/slo-retired.yml":
               tmp_path / "prometheus/rules/slo-availability.yml",
               tmp_path / DASHBOARDS_DIR / "governor-retired.json":
               tmp_path / DASHBOARDS_DIR / "governor-slo.json",
               tmp_path / "grafana/provisioning/datasources/retired.yml": tmp_path / DATASOURCES}
    for stale, generated in retired.items():
        shutil.copy(generated, stale)
    mine = (tmp_path / "prometheus/rules/hand-written.yml",
            tmp_path / DASHBOARDS_DIR / "hand-made.json",
            tmp_path / "grafana/provisioning/datasources/mine.yml")
    for path in mine:
        path.write_text("{}\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["--slo", SLO, "--out", str(tmp_path), "--check"]) == 1
    assert sorted(capsys.readouterr().err.splitlines()[:-1]) == sorted(
        f"stale: {path}" for path in retired)
    assert main(["--slo", SLO, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert all(f"removed {path}" in out for path in retired)
    assert f"{FILES} files under {tmp_path}, {len(retired)} changed" in out
    assert not any(path.exists() for path in retired)
    assert all(path.exists() for path in mine)
    assert main(["--slo", SLO, "--out", str(tmp_path), "--check"]) == 0


def test_local_and_explicit_targets_reach_prometheus_and_grafana(tmp_path: Path) -> None:
    assert main(["--out", str(tmp_path / "a"), "--slo", SLO, "--local",
                 "--scrape-interval", "5s", "--fast-window", "20s"]) == 0
    text = (tmp_path / "a" / PROMETHEUS_CONFIG).read_text(encoding="utf-8")
    assert "scrape_interval: 5s" in text
    assert json.loads((tmp_path / "a" / PROMETHEUS_TARGETS).read_text())[0]["targets"] == [
        "127.0.0.1:8000"]
    datasources = (tmp_path / "a" / DATASOURCES).read_text(encoding="utf-8")
    assert "http://127.0.0.1:9090" in datasources and "timeInterval: 5s" in datasources
    assert main(["--out", str(tmp_path / "b"), "--slo", SLO,
                 "--inference-targets", "gpu-a:8000, gpu-b:8000"]) == 0
    assert json.loads((tmp_path / "b" / PROMETHEUS_TARGETS).read_text())[0]["targets"] == [
        "gpu-a:8000", "gpu-b:8000"]
    assert "http://prometheus:9090" in (tmp_path / "b" / DATASOURCES).read_text(encoding="utf-8")


def test_a_broken_spec_prints_every_problem_once_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "slo.yaml"
    spec.write_text("version: governor/v1\nservice: x\nperiod: 1d\nslos: []\nextra: 1\n",
                    encoding="utf-8")
    assert main(["--slo", str(spec), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("3 problems in the SLO spec") == 1
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()
    assert main(["--slo", str(spec), "--out", str(tmp_path / "out"), "--check"]) == 2


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
    monkeypatch.setenv("GOVERNOR_SLO", SLO)
    monkeypatch.setenv("GOVERNOR_OUT", str(tmp_path))
    monkeypatch.setenv("GOVERNOR_EXPORTER_TARGETS", "gpu-node:9400")
    monkeypatch.setenv("GOVERNOR_SCRAPE_INTERVAL", "5s")
    assert main([]) == 0
    assert "gpu-node:9400" in (tmp_path / PROMETHEUS_CONFIG).read_text(encoding="utf-8")
    assert "timeInterval: 5s" in (tmp_path / DATASOURCES).read_text(encoding="utf-8")
    monkeypatch.setenv("GOVERNOR_LOCAL", "true")
    assert main([]) == 0
    assert "http://127.0.0.1:9090" in (tmp_path / DATASOURCES).read_text(encoding="utf-8")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_an_unwritable_output_is_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) \
        -> None:
    tmp_path.chmod(0o500)
    try:
        assert main(["--slo", SLO, "--out", str(tmp_path / "out")]) == 1
    finally:
        tmp_path.chmod(0o700)
    assert "cannot write under" in capsys.readouterr().err


def test_an_output_path_that_is_a_file_is_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "out"
    blocker.write_text("not a directory", encoding="utf-8")
    assert main(["--slo", SLO, "--out", str(blocker)]) == 1
    assert "cannot write under" in capsys.readouterr().err


def test_the_governor_command_dispatches_generate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert COMMANDS["generate"].module == "governor.generate"
    assert governor(["generate", "--slo", SLO, "--out", str(tmp_path)]) == 0
    assert (tmp_path / DATASOURCES).is_file()
    assert governor([]) == 0
    usage = capsys.readouterr().out
    assert any(line.split(None, 1) == ["generate", COMMANDS["generate"].summary]
               for line in usage.splitlines())


def test_help_says_it_writes_rules_and_grafana_files(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "Prometheus rules" in out and "Grafana dashboards" in out


def test_python_dash_m_governor_generate_checks_from_the_command_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "governor", "generate", "--slo", SLO, "--out", str(tmp_path),
         "--check"],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
    )
    assert result.returncode == 1  # the empty directory is stale
    assert result.stderr.count("stale:") == FILES


def _edited(tmp_path: Path, old: str, new: str) -> tuple[Path, int]:
    """The repository's spec with ``old`` replaced once, and the line ``old`` started on."""
    text = (ROOT / "slo.yaml").read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "slo.yaml"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return path, text[:text.index(old)].count("\n") + 1


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("objective: 99.9", "objective: 1", None),
        ("objective: 99.9", "objective: 0.02", None),
        ("objective: 99.9", "objective: 5", None),
        ("objective: 99.9", "objective: " + "1" * 5000,
         "slo.yaml:{line}:16: an integer 5000 characters long (at most 100)"),
        ("threshold: 1s\n", "threshold: 1s\n    controller: true\n",
         "slo.yaml:{next}: slos[1].controller: only one SLO may drive the controller, and "
         "slos[0] already does"),
        # On the service's own histogram any threshold is one more edge (docs/slo-spec.md).
        ("threshold: 1s\n", "threshold: 1.1s\n", None),
    ],
    ids=["an availability objective of 1%", "an objective of 0.02 (2%)", "an objective of 5%",
         "a 5000-digit objective", "two SLOs driving the controller",
         "a threshold between the service's bucket edges"],
)
def test_generate_and_the_controller_agree_on_what_a_valid_spec_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, message: str | None
) -> None:
    from governor.controller.cli import main as controller

    path, line = _edited(tmp_path, old, new)
    spec = str(path)
    generated = main(["--slo", spec, "--out", str(tmp_path / "out")])
    # A state file in the temporary folder, and no listening: a valid spec stops at the token.
    started = controller(["--slo", spec, "--state-file", str(tmp_path / "state.json")], env={})
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if message is None:
        assert generated == 0
        assert "the webhook needs a bearer token" in err
    else:
        assert (generated, started) == (2, 2)
        assert err.count(message.format(line=line, next=line + 1)) == 2, err
