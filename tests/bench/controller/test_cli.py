"""``governor bench controller`` end to end on a short scenario, and its usage errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from governor.bench import BENCHES
from governor.bench.controller import main

REPO = Path(__file__).resolve().parents[3]


def test_the_benchmark_is_registered() -> None:
    assert BENCHES["controller"][0] == "governor.bench.controller"


@pytest.mark.slow
def test_a_short_run_prints_one_json_summary_and_writes_plots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["--minutes", "3", "--budgets", "2048", "--seqs", "1024", "--jobs", "1",
                 "--slo", str(REPO / "slo.yaml"), "--deploy", str(REPO / "deploy"),
                 "--out", str(tmp_path)])
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    summary = json.loads(lines[0])
    assert set(summary) >= {"default_static", "best_static", "controller", "met", "pipeline"}
    assert summary["pipeline"]["scrape_s"] == 15.0
    assert summary["default_static"]["limits"] == {"max_num_seqs": 1024,
                                                   "max_num_batched_tokens": 8192}
    for key in ("attainment", "windows_missed", "goodput_rps", "goodput_vs_best_static",
                "worst_recovery_seconds"):
        assert key in summary["controller"]
    assert summary["attainment"]["target"] == summary["targets"]["attainment"] == 0.99
    assert summary["met"]["attainment"] is summary["attainment"]["met"]
    assert sorted(p.name for p in tmp_path.glob("*.png")) == [
        "comparison.png", "run-a.png", "run-b.png", "run-c.png"]
    assert json.loads((tmp_path / "summary.json").read_text()) == summary


@pytest.mark.slow
def test_admission_runs_the_gates_side_by_side(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["--minutes", "2", "--budgets", "2048", "--seqs", "1024", "--jobs", "1",
                 "--admission", "--bounds", "16384", "--no-plots",
                 "--slo", str(REPO / "slo.yaml"), "--deploy", str(REPO / "deploy"),
                 "--out", str(tmp_path)])
    assert code == 0
    captured = capsys.readouterr()
    admission = json.loads(captured.out)["admission"]
    assert set(admission["runs"]) == {"a", "a+", "b", "b*", "b+", "c", "c+"}
    assert list(admission["bounded"]) == ["static 2048/1024 + bound 16k"]
    assert admission["runs"]["a"]["goodput_vs_default"] == 1.0
    assert admission["runs"]["b*"]["goodput_vs_best_static"] == 1.0
    assert set(admission["met"]) == {"goodput_vs_best_static", "goodput_vs_default"}
    assert "(c+) controller + deadlines" in captured.err


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--deploy", "/nonexistent"], "governor generate"),
     (["--slo", "/nonexistent/slo.yaml"], "slo.yaml")],
    ids=["no generated stack", "no spec"],
)
def test_a_missing_input_is_one_clear_line(capsys: pytest.CaptureFixture[str],
                                           argv: list[str], message: str) -> None:
    base = ["--slo", str(REPO / "slo.yaml"), "--deploy", str(REPO / "deploy")]
    assert main([*base, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv", [["--budgets", "a,b"], ["--budgets", "0"], ["--jobs", "0"],
                                  ["--minutes", "soon"], ["--minutes", "0"],
                                  ["--bounds", "0"], ["--deadline-slack", "0"],
                                  ["--deadline-slack", "nan"], ["--deadline-slack", "0.001"]])
def test_malformed_options_are_refused_by_the_parser(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2


def test_several_workloads_print_one_json_line_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    workloads = REPO / "benchmarks" / "workloads"
    code = main(["--workload", str(workloads / "ramp-down.yaml"), "--workload",
                 str(workloads / "overload.yaml"), "--minutes", "2", "--budgets", "2048",
                 "--seqs", "1024", "--jobs", "1", "--no-plots", "--slo", str(REPO / "slo.yaml"),
                 "--deploy", str(REPO / "deploy"), "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 0
    lines = [json.loads(line) for line in captured.out.splitlines() if line.startswith("{")]
    assert [line["workload"] for line in lines] == ["ramp-down", "overload"]
    assert (tmp_path / "overload" / "summary.json").is_file()
    assert "run: 3/3" in captured.err and "ETA" in captured.err


def test_a_bad_workload_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: governor/workload/v1\nduration: 1m\n")
    assert main(["--workload", str(bad), "--no-plots", "--out", str(tmp_path)]) == 2
    assert "classes" in capsys.readouterr().err
