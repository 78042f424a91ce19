"""``governor generate`` writes rules and boards together; ``python -m governor.dashboards`` the
boards alone; a user's mistake is a message, never a traceback."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from governor.cli import COMMANDS
from governor.cli import main as governor
from governor.dashboards.cli import main as dashboards_main
from governor.dashboards.render import DASHBOARDS_DIR, DATASOURCES
from governor.generate import main as generate
from tests.dashboards.boards import DEPLOY, ROOT, SCHEMAS, boards

SLO = str(ROOT / "slo.yaml")
ALERTS_FILES = 13
GRAFANA_FILES = 6


def test_generate_writes_rules_and_boards_into_one_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert generate(["--slo", SLO, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"{ALERTS_FILES} files under {tmp_path}" in out
    assert f"{GRAFANA_FILES} Grafana files under {tmp_path}, {GRAFANA_FILES} changed" in out
    assert (tmp_path / "prometheus/prometheus.yml").is_file()
    assert (tmp_path / DASHBOARDS_DIR / "governor-slo.json").is_file()
    assert generate(["--slo", SLO, "--out", str(tmp_path)]) == 0
    assert f"{GRAFANA_FILES} Grafana files under {tmp_path}, 0 changed" in capsys.readouterr().out


def test_the_governor_command_runs_the_joint_generator(tmp_path: Path) -> None:
    assert COMMANDS["generate"].module == "governor.generate"
    assert governor(["generate", "--slo", SLO, "--out", str(tmp_path)]) == 0
    assert (tmp_path / DATASOURCES).is_file()


def test_check_passes_on_the_committed_deploy_directory() -> None:
    assert generate(["--slo", SLO, "--out", str(DEPLOY), "--check"]) == 0


def test_check_names_stale_boards_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(DEPLOY, tmp_path, dirs_exist_ok=True)
    spec = tmp_path / "slo.yaml"
    spec.write_text(Path(SLO).read_text(encoding="utf-8").replace("threshold: 120ms",
                                                                  "threshold: 100ms"),
                    encoding="utf-8")
    board = tmp_path / DASHBOARDS_DIR / "governor-inference.json"
    before = board.read_text(encoding="utf-8")
    assert generate(["--slo", str(spec), "--out", str(tmp_path), "--check"]) == 1
    err = capsys.readouterr().err
    assert f"stale: {tmp_path}/{DASHBOARDS_DIR}/governor-inference.json" in err
    assert f"stale: {tmp_path}/prometheus/rules/slo-inter-token-latency.yml" in err
    assert board.read_text(encoding="utf-8") == before


def test_a_broken_spec_is_reported_once_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "slo.yaml"
    spec.write_text("version: governor/v1\nservice: x\nperiod: 1d\nslos: []\nextra: 1\n",
                    encoding="utf-8")
    assert generate(["--slo", str(spec), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("3 problems in the SLO spec") == 1
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("text", [
    "\x00\xff binary",
    "slos: [" * 200,
    "version: governor/v1\nservice: x\nperiod: 30d\nslos:\n" + "  - name: a\n" * 5000,
], ids=["binary", "deeply nested", "oversized"])
def test_hostile_spec_files_are_messages(
    tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "slo.yaml"
    spec.write_text(text, encoding="utf-8", errors="surrogateescape")
    assert dashboards_main(["--slo", str(spec), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "SLO spec" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_hostile_text_in_a_valid_spec_stays_text(tmp_path: Path) -> None:
    """Markdown, HTML, quotes and a regex pipe in the spec reach the boards escaped."""
    data = yaml.safe_load(Path(SLO).read_text(encoding="utf-8"))
    data["slos"][0]["description"] = '</script><img src=x onerror=alert(1)> "quoted" | {{x}} ✓'
    data["slos"][2]["sli"]["ratio"]["errors"] = 'governor_requests_total{code=~"5..|429"}'
    spec = tmp_path / "slo.yaml"
    spec.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert dashboards_main(["--slo", str(spec), "--out", str(tmp_path / "out")]) == 0
    files = {str(p.relative_to(tmp_path / "out")): p.read_text(encoding="utf-8")
             for p in (tmp_path / "out").rglob("*.json")}
    board = boards(files)["governor-slo"]
    schema = json.loads((SCHEMAS / "dashboard.jsonschema.json").read_text())
    jsonschema.Draft7Validator(schema).validate(board)
    objective = next(p for p in board["panels"] if p.get("title") == "Objective")
    assert objective["description"].startswith('</script><img src=x onerror=alert(1)> "quoted"')
    table = next(p for p in board["panels"] if p["type"] == "text")["options"]["content"]
    row = next(line for line in table.splitlines() if line.startswith("| availability |"))
    assert row.count("|") - row.count("\\|") == 5  # four cells: the pipe is escaped


def test_python_dash_m_dashboards_checks_the_committed_files() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "governor.dashboards", "--slo", SLO, "--out", str(DEPLOY),
         "--check"],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert result.returncode == 0, result.stderr


def test_options_read_governor_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOVERNOR_SLO", SLO)
    monkeypatch.setenv("GOVERNOR_OUT", str(tmp_path))
    monkeypatch.setenv("GOVERNOR_LOCAL", "true")
    monkeypatch.setenv("GOVERNOR_SCRAPE_INTERVAL", "5s")
    assert dashboards_main([]) == 0
    datasources = (tmp_path / DATASOURCES).read_text(encoding="utf-8")
    assert "http://127.0.0.1:9090" in datasources and "timeInterval: 5s" in datasources


@pytest.mark.parametrize(("argv", "message"), [
    (["--scrape-interval", "soon"], "not a duration"),
    (["--scrape-interval", "0.5s"], "whole seconds only"),
    (["--bogus"], "unrecognized arguments"),
])
def test_bad_options_are_usage_errors(argv: list[str], message: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        dashboards_main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_an_output_path_that_is_a_file_is_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "out"
    blocker.write_text("not a directory", encoding="utf-8")
    assert dashboards_main(["--slo", SLO, "--out", str(blocker)]) == 1
    assert "cannot write under" in capsys.readouterr().err


def test_help_says_it_writes_the_grafana_files(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        generate(["--help"])
    assert "Grafana dashboards" in capsys.readouterr().out
