"""``governor recommend``: the benchmark's best static limits for a request log, as text and as
the JSON the controller starts from; every bad input one clear line."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from governor import cli
from governor.bench.controller import main as bench
from governor.bench.controller.recommend import main
from governor.controller.start_limits import FORMAT, StartLimits

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data" / "request_logs"
COMMON = ["--slo", str(ROOT / "slo.yaml"), "--deploy", str(ROOT / "deploy"), "--jobs", "1"]
# One point of the grid beside vLLM's defaults: enough to choose, cheap to run.
GRID = ["--budgets", "2048", "--seqs", "1024"]


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two minutes of chats (12.5/s) beside documents of 7,000 prompt tokens (one every
    0.6 s), as BurstGPT logs them: at vLLM's default budget the documents' prefill stalls every
    decoding chat past its inter-token SLO, at 2,048 it does not."""
    chats = [(k * 0.08, 800, 300) for k in range(1500)]
    docs = [(k * 0.6 + 0.06, 7000, 20) for k in range(200)]
    return log_of(tmp_path_factory.mktemp("logs") / "documents.csv", chats + docs)


@pytest.fixture(scope="module")
def recommended(documents: Path) -> tuple[dict[str, Any], str]:
    """``--json`` on the documents' log, run once: the record and the text on stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main(["--workload", str(documents), *GRID, *COMMON, "--json"]) == 0
    (line,) = out.getvalue().splitlines()
    return json.loads(line), err.getvalue()


def test_the_recommendation_is_the_benchmarks_best_static_on_the_same_log(
    recommended: tuple[dict[str, Any], str], documents: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    rec, _ = recommended
    assert bench(["--workload", str(documents), *GRID, *COMMON, "--no-plots",
                  "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    summary = json.loads((tmp_path / "documents" / "summary.json").read_text())
    assert rec["recommended"] == summary["best_static"]["limits"]
    assert rec["recommended"] == {"max_num_batched_tokens": 2048, "max_num_seqs": 1024}
    predicted, default = rec["predicted"], rec["default"]
    assert predicted["goodput_rps"] == summary["best_static"]["goodput_rps"]
    assert predicted["attainment"] == summary["best_static"]["attainment"]
    assert default["limits"] == summary["default_static"]["limits"]
    assert default["predicted"]["goodput_rps"] == summary["default_static"]["goodput_rps"]
    assert predicted["goodput_vs_default"] > 2.0  # the premise: the log tells them apart


def test_the_json_says_what_it_is_and_what_it_assumed(
    recommended: tuple[dict[str, Any], str],
) -> None:
    rec, _ = recommended
    assert rec["v"] == FORMAT
    assert "prediction of the simulated engine on the recorded log" in str(rec["basis"])
    assert "calibration" in str(rec["basis"])
    assert (rec["preset"], rec["seed"], rec["speed"], rec["workload"]) == \
        ("llama-3-8b@h200", 1, 1.0, "documents")
    assert rec["request_log"]["requests"] == 1700
    assert [(g["max_num_batched_tokens"], g["max_num_seqs"]) for g in rec["grid"]] == \
        [(8192, 1024), (2048, 1024)]
    assert rec["admission"] is None


def test_the_controller_starts_from_the_file_it_writes(
    recommended: tuple[dict[str, Any], str], tmp_path: Path,
) -> None:
    rec, _ = recommended
    path = tmp_path / "recommendation.json"
    path.write_text(json.dumps(rec) + "\n")
    start = StartLimits.parse(str(path))
    assert start.limits.as_dict() == rec["recommended"]
    assert "documents" in start.source and "llama-3-8b@h200" in start.source


def test_the_text_names_the_limits_the_prediction_and_its_basis(
    recommended: tuple[dict[str, Any], str],
) -> None:
    _, text = recommended
    assert "preset llama-3-8b@h200, seed 1" in text
    assert "a prediction of the simulated engine on the recorded log" in text
    assert "recommended:     max_num_batched_tokens 2048, max_num_seqs 1024" in text
    assert "vLLM's defaults: max_num_batched_tokens 8192, max_num_seqs 1024" in text
    assert "governor controller --start-limits 2048,1024" in text


def log_of(path: Path, rows: list[tuple[float, int, int]]) -> Path:
    path.write_text("Timestamp,Request tokens,Response tokens\n"
                    + "".join(f"{t:.3f},{p},{o}\n" for t, p, o in sorted(rows)))
    return path


def admission(log: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["--workload", str(log), *GRID, *COMMON, "--json", "--admission",
                 "--bounds", "8192"]) == 0
    rec: dict[str, Any] = json.loads(capsys.readouterr().out)
    return rec


def test_with_admission_the_gate_that_serves_more_is_named_with_what_it_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """Documents every 0.15 s ask ~47k prompt tokens/s, past the preset's prefill: no limits
    serve the chats' first tokens in time, a gate that refuses some documents does."""
    burst = log_of(tmp_path / "burst.csv", [(k * 0.08, 800, 300) for k in range(1500)]
                   + [(k * 0.15 + 0.06, 7000, 20) for k in range(800)])
    rec = admission(burst, capsys)
    gate = rec["admission"]
    assert gate["gate"] in ("deadlines", "bound")
    assert gate["serve_options"][0] in ("--deadlines", "--max-tokens-ahead")
    assert gate["predicted"]["goodput_rps"] > 2 * rec["predicted"]["goodput_rps"]
    assert 0 < gate["turned_away"] < rec["request_log"]["requests"]


def test_with_admission_no_gate_is_named_where_none_serves_more(
    documents: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    gate = admission(documents, capsys)["admission"]
    assert gate == {"gate": "none", "serve_options": [], "predicted": None}


@pytest.mark.parametrize(("argv", "problem"), [
    (["--workload", "/nonexistent/log.csv"], "/nonexistent/log.csv: cannot read"),
    (["--workload", str(ROOT / "README.md")], "no known request-log schema"),
    (["--workload", str(DATA / "burstgpt-3.csv"), "--preset", "gpt-5@tpu"],
     "unknown sim preset 'gpt-5@tpu'"),
    (["--workload", str(DATA / "burstgpt-3.csv"), "--slice", "1h:5m"], "slice"),
    (["--workload", str(DATA / "burstgpt-3.csv"), "--slo", "/nonexistent/slo.yaml"],
     "/nonexistent/slo.yaml"),
], ids=["a missing log", "a file that is no request log", "an unknown preset",
        "a slice past the end", "a missing spec"])
def test_bad_input_is_one_clear_line_and_exit_2(
    argv: list[str], problem: str, capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*COMMON, *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("governor recommend: error: ")
    assert problem in captured.err and "Traceback" not in captured.err


@pytest.mark.parametrize(("argv", "problem"), [
    ([], "--workload"), (["--workload", "x.csv", "--speed", "0"], "--speed"),
    (["--workload", "x.csv", "--budgets", "0"], "--budgets"),
], ids=["no log", "no speed", "a zero budget"])
def test_bad_options_are_usage_errors(argv: list[str], problem: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    assert problem in capsys.readouterr().err


def test_governor_dispatches_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 0
    assert "recommend" in capsys.readouterr().out
    with pytest.raises(SystemExit) as caught:
        cli.main(["recommend", "--help"])
    assert caught.value.code == 0
    assert "--start-limits" in capsys.readouterr().out
