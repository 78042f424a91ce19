"""Request logs as workloads: each schema told by its columns, slices, speed, the context cap,
classes by the spec's rules, and every bad file or row a located error or a counted skip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from governor.bench.controller import main
from governor.bench.controller.request_logs import (
    FAILED,
    ReplayOptions,
    RequestLog,
    load_request_log,
    load_traffic,
    parse_slice,
    read_rows,
)
from governor.bench.controller.workload import WorkloadError
from governor.generation.catalog import load_checked_spec

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data" / "request_logs"
SPEC = load_checked_spec(ROOT / "slo.yaml")


def replay(path: Path, **options: object) -> RequestLog:
    return load_request_log(path, ReplayOptions(classes=SPEC.classes, **options))  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "schema", "requests", "first"), [
    ("azure-code-2023.csv", "azure", 6, (0.0, 4808, 10)),
    ("mooncake-conversation.jsonl", "mooncake", 5, (0.0, 6758, 500)),
    ("burstgpt-1.csv", "burstgpt", 3, (0.0, 472, 18)),
    ("burstgpt-3.csv", "burstgpt", 4, (0.0, 906, 446)),
], ids=["Azure's datetime stamps", "Mooncake's milliseconds", "BurstGPT's first layout",
        "BurstGPT's layout with sessions"])
def test_each_public_schema_is_told_by_its_columns(name: str, schema: str, requests: int,
                                                   first: tuple[float, int, int]) -> None:
    found, _rows, _ = read_rows(DATA / name)
    assert found == schema
    log = replay(DATA / name, context_tokens=100_000)
    a = log.arrivals(seed=1)[0]
    assert (a.at, a.prompt_tokens, a.output_tokens) == first
    assert log.report["requests"] == requests


def test_times_are_relative_to_the_first_request_in_each_clock() -> None:
    azure = [round(a.at, 4) for a in replay(DATA / "azure-code-2023.csv").arrivals(1)]
    assert azure[:3] == [0.0, 0.052, 0.0982]
    burst = [a.at for a in replay(DATA / "burstgpt-3.csv").arrivals(1)]
    assert burst == [0.0, 51.0, 82.0, 144.0]


def test_burstgpts_failure_rows_are_skipped_and_counted() -> None:
    log = replay(DATA / "burstgpt-1.csv")
    assert log.report["skipped"] == {FAILED: 1}
    assert [a.output_tokens for a in log.arrivals(1)] == [18, 230, 276]


def test_speed_slice_and_the_context_cap() -> None:
    log = replay(DATA / "burstgpt-3.csv", speed=2.0, start_seconds=50.0, duration_seconds=60.0)
    assert [a.at for a in log.arrivals(1)] == [0.5, 16.0]  # (51 - 50) / 2, (82 - 50) / 2
    assert log.duration_seconds == 30.0
    capped = replay(DATA / "azure-code-2023.csv", context_tokens=4096)
    prompts = [a.prompt_tokens for a in capped.arrivals(1)]
    assert prompts == [4086, 3180, 110, 4082, 34, 374]  # prompt + output fit 4 096
    assert capped.report["capped_to_context"] == 2


def test_classes_come_from_the_specs_rules() -> None:
    kinds = [a.kind for a in replay(DATA / "azure-code-2023.csv").arrivals(1)]
    assert kinds == ["doc", "doc", "chat", "doc", "chat", "chat"]  # doc: prompts of 3 000+


def test_a_slice_past_the_end_is_a_located_error() -> None:
    with pytest.raises(WorkloadError, match="slice: the log spans 144 s; nothing from 500 s on"):
        replay(DATA / "burstgpt-3.csv", start_seconds=500.0, duration_seconds=60.0)


@pytest.mark.parametrize(("text", "problem"), [
    ("", "empty: not a request log"),
    ("a,b,c\n1,2,3\n", "line 1: no known request-log schema in the columns"),
    ('{"t": 1, "in": 2}\n', "line 1: no known request-log schema in the keys"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,x,1\n",
     r"no usable request among 1 rows \(1 unreadable\)"),
    ("\x00\x01\x02\xff" * 100, "no known request-log schema"),
], ids=["an empty file", "unknown columns", "unknown keys", "no usable row", "binary"])
def test_a_file_that_is_no_request_log_is_a_located_error(tmp_path: Path, text: str,
                                                           problem: str) -> None:
    path = tmp_path / "log.csv"
    path.write_bytes(text.encode("utf-8", errors="surrogateescape") if text.isprintable() or
                     not text else text.encode("latin-1"))
    with pytest.raises(WorkloadError, match=problem):
        replay(path)


def test_bad_rows_are_skipped_counted_and_the_first_located(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    lines = ['{"timestamp": 0, "input_length": 100, "output_length": 10}',
             '{"timestamp": "soon", "input_length": 100, "output_length": 10}',
             "not json",
             "[1, 2]",
             '{"timestamp": 1000, "input_length": -5, "output_length": 10}',
             '{"timestamp": 2000, "input_length": 100, "output_length": 1e400}',
             "{" + '"x": ' * 1000,
             '{"timestamp": 3000, "input_length": 200, "output_length": 20}']
    path.write_text("\n".join(lines) + "\n" + "x" * 70_000 + "\n")
    log = replay(path)
    assert [a.prompt_tokens for a in log.arrivals(1)] == [100, 200]
    assert log.report["skipped"] == {"unreadable": 7}
    assert log.report["problems"][0].endswith("log.jsonl:2: not a time in seconds: 'soon'")
    assert any(":3: not JSON" in p for p in log.report["problems"])


def test_governors_own_log_keeps_its_recorded_class_and_skips_what_was_not_served(
    tmp_path: Path,
) -> None:
    base = {"v": "governor/request-log/v1", "route": "/v1/chat/completions", "ttft_seconds": 0.2,
            "itl_p99_seconds": 0.03, "status": "200"}
    records = [{**base, "at": 1700000010.0, "request_class": "doc", "prompt_tokens": 50,
                "output_tokens": 9},
               # Written when they ended, so out of arrival order.
               {**base, "at": 1700000000.0, "request_class": "chat", "prompt_tokens": 40,
                "output_tokens": 7},
               {**base, "at": 1700000005.0, "request_class": "chat", "prompt_tokens": 40,
                "output_tokens": 0, "status": "429", "ttft_seconds": None}]
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    log = replay(path)
    assert [(a.at, a.kind) for a in log.arrivals(1)] == [(0.0, "chat"), (10.0, "doc")]
    assert log.report["skipped"] == {"not served (no output token)": 1}


def test_a_named_replay_merges_its_logs_on_their_clock_at_its_speed(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                    "2023-11-16 18:00:00,100,10\n2023-11-16 18:00:10,100,10\n")
    (tmp_path / "b.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                    "2023-11-16 18:00:04,5000,10\n")
    named = tmp_path / "both.yaml"
    named.write_text("version: governor/workload/v1\nname: both\nrequest_logs: [a.csv, b.csv]\n"
                     "speed: 2\n")
    log = load_traffic(named, ReplayOptions(speed=1.5, classes=SPEC.classes))
    assert isinstance(log, RequestLog) and log.name == "both"
    assert [(round(a.at, 3), a.kind) for a in log.arrivals(1)] == [
        (0.0, "chat"), (round(4 / 3, 3), "doc"), (round(10 / 3, 3), "chat")]
    named.write_text("version: governor/workload/v1\nrequest_logs: []\nspeed: -1\nextra: 1\n")
    with pytest.raises(WorkloadError) as caught:
        load_traffic(named, ReplayOptions())
    assert [e.split(":")[0] for e in caught.value.errors] == ["extra", "request_logs", "speed"]


@pytest.mark.parametrize(("text", "seconds"), [("10m:5m", (600.0, 300.0)), ("0:90s", (0.0, 90.0)),
                                            (":1h", (0.0, 3600.0))])
def test_a_slice_is_start_and_duration(text: str, seconds: tuple[float, float]) -> None:
    assert parse_slice(text) == seconds


@pytest.mark.parametrize("text", ["10m", "a:b", "5m:-1m"])
def test_a_malformed_slice_says_what_it_expects(text: str) -> None:
    with pytest.raises(ValueError, match="--slice: expected START:DURATION"):
        parse_slice(text)


def test_the_benchmark_replays_a_log_and_reports_what_it_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    log = tmp_path / "chats.csv"
    log.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                   + "".join(f"{k},ChatGPT,500,60,560,Conversation log\n" for k in range(240))
                   + "240,ChatGPT,500,0,500,API log\n")
    code = main(["--workload", str(log), "--speed", "2", "--slice", "0:4m", "--budgets", "2048",
                 "--seqs", "256", "--jobs", "1", "--no-plots", "--out", str(tmp_path / "out")])
    assert code == 0
    summary = json.loads((tmp_path / "out" / "chats" / "summary.json").read_text())
    assert summary["requests"] == 240 and summary["minutes"] == 2.0
    assert summary["request_log"]["skipped"] == {FAILED: 1}
    assert summary["request_log"]["speed"] == 2.0
    assert "replaying chats: 240 requests of 241 rows (burstgpt), speed 2x" in \
        capsys.readouterr().err


@pytest.mark.parametrize(("argv", "problem"), [
    (["--speed", "0"], "--speed"), (["--slice", "5m"], "--slice"),
], ids=["no speed", "no duration"])
def test_bad_replay_options_are_usage_errors(argv: list[str], problem: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([*argv, "--no-plots", "--jobs", "1"])
    assert problem in capsys.readouterr().err


def test_a_missing_log_is_an_error_not_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--workload", "/nonexistent/log.csv", "--no-plots", "--jobs", "1"]) == 2
    assert "/nonexistent/log.csv: cannot read" in capsys.readouterr().err
