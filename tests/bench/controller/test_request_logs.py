"""Request logs as workloads: each schema told by its columns, slices, speed, the context cap,
classes by the spec's rules, and every bad file or row a located error or a counted skip."""

from __future__ import annotations

import io
import json
import tracemalloc
from pathlib import Path
from unittest.mock import patch

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from governor.bench.controller import main, request_logs
from governor.bench.controller.classes import ClassPlan
from governor.bench.controller.request_logs import (
    FAILED,
    ReplayOptions,
    RequestLog,
    describe,
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


# ---- bounds: the replayed span, line length, line ends (docs/reliability.md, N7 to N9) -------

def burstgpt(path: Path, times: list[str]) -> Path:
    path.write_text("Timestamp,Request tokens,Response tokens\n"
                    + "".join(f"{t},100,10\n" for t in times))
    return path


def test_one_stray_time_is_a_located_error_not_a_replay_of_54_years(tmp_path: Path) -> None:
    log = burstgpt(tmp_path / "trace.csv",
                   ["1700000000", "0", *(str(1700000000 + k) for k in range(1, 40))])
    with pytest.raises(WorkloadError) as caught:
        replay(log)
    first, gap = caught.value.errors
    assert "the log spans 53.9 years, from " in first
    assert f"from {log}:3 (0 s) to {log}:42 (1700000039 s)" in first
    assert "a replay lasts at most 7 days" in first
    assert f"largest gap, 53.9 years, is between {log}:3 and {log}:2" in gap
    assert "--slice START:DURATION" in gap


@pytest.mark.parametrize(("name", "text", "where"), [
    ("azure.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n0001-01-01 00:00:00,100,10\n"
                  "9999-12-31 23:59:59,100,10\n",
     ":2 (0001-01-01 00:00:00 UTC) to {log}:3 (9999-12-31 23:59:59 UTC)"),
    ("burst.csv", "Timestamp,Request tokens,Response tokens\n0,100,10\n1e12,100,10\n",
     ":2 (0 s) to {log}:3 (1000000000000 s)"),
    ("mooncake.jsonl", '{"timestamp": 0, "input_length": 100, "output_length": 10}\n'
                       '{"timestamp": 1e300, "input_length": 100, "output_length": 10}\n',
     ":1 (0 s) to {log}:2 (1e+297 s)"),
], ids=["Azure's dates 0001 to 9999", "BurstGPT over 1e12 s", "Mooncake over 1e297 s"])
def test_spans_past_any_replay_are_located_errors_not_tracebacks(
    tmp_path: Path, name: str, text: str, where: str, capsys: pytest.CaptureFixture[str],
) -> None:
    log = tmp_path / name
    log.write_text(text)
    with pytest.raises(WorkloadError, match="a replay lasts at most 7 days") as caught:
        replay(log)
    assert f"from {log}" + where.format(log=log) in caught.value.errors[0]
    assert main(["--workload", str(log), "--no-plots", "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"governor bench controller: error: {log}: the log spans")
    assert "Traceback" not in err


def test_the_bound_is_on_the_replay_a_week_at_most_and_a_slice_or_speed_brings_it_within(
    tmp_path: Path,
) -> None:
    log = burstgpt(tmp_path / "trace.csv", ["0", "600000", "1200000"])
    with pytest.raises(WorkloadError, match=r"the log spans 13\.9 days"):
        replay(log)
    assert replay(log, speed=2.0).duration_seconds == 600000.0
    assert len(replay(log, start_seconds=600000.0).arrivals(1)) == 2
    with pytest.raises(WorkloadError, match="slice: 10 days of the log replay for 10 days; a "
                                            "replay lasts at most 7 days"):
        replay(log, duration_seconds=864000.0)


def test_dev_zero_is_refused_at_once(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="/dev/zero: line 1: longer than 64 KiB: not a "
                                            "request log"):
        replay(Path("/dev/zero"))


def test_a_line_without_end_stops_the_read_at_its_bound(tmp_path: Path) -> None:
    log = burstgpt(tmp_path / "trace.csv", ["0", "1"])
    with log.open("ab") as handle:  # a sparse run of zeros: 64 MiB read as one line before
        handle.truncate(log.stat().st_size + 64 * 1024 * 1024)
    with pytest.raises(WorkloadError, match=r"trace.csv: line 4: no line end in its first "
                                            r"1024 KiB: not a request log"):
        replay(log)


def test_a_long_line_is_skipped_without_being_held(tmp_path: Path) -> None:
    log = tmp_path / "trace.csv"
    log.write_bytes(b"Timestamp,Request tokens,Response tokens\n0,100,10\n"
                    + b"1," + b"9" * 900_000 + b",10\n2,100,10\n")
    tracemalloc.start()
    try:
        _, rows, tally = read_rows(log)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [r.time for r in rows] == [0.0, 2.0]
    assert tally.problems == [f"{log}:3: longer than 64 KiB"]
    assert peak < 500_000  # the 900 kB line was never in memory whole


@pytest.mark.parametrize("end", [b"\r", b"\r\n", b"\n"], ids=["CR (old Mac)", "CRLF", "LF"])
def test_lines_may_end_in_cr_crlf_or_lf(tmp_path: Path, end: bytes) -> None:
    log = tmp_path / "trace.csv"
    log.write_bytes(end.join([b"Timestamp,Request tokens,Response tokens", b"1,2,3", b"5,6,7",
                              b""]))
    assert [(r.time, r.prompt_tokens) for r in read_rows(log)[1]] == [(1.0, 2), (5.0, 6)]


def test_a_stray_cr_in_the_header_is_a_located_error(tmp_path: Path) -> None:
    log = tmp_path / "trace.csv"
    log.write_bytes(b"Timestamp,Request tokens\r,Response tokens\n1,2,3\n")
    with pytest.raises(WorkloadError, match=r"line 1: no known request-log schema in the "
                                            r"columns \['Request tokens', 'Timestamp'\]"):
        replay(log)
    log.write_bytes(b'Timestamp,"Request tokens,Response tokens\n1,2,3\n')
    with pytest.raises(WorkloadError, match="line 1: "):
        replay(log)


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(st.binary(max_size=12).filter(lambda b: b"\r" not in b and b"\n" not in b),
                      max_size=8),
       ends=st.lists(st.sampled_from([b"\n", b"\r\n", b"\r"]), min_size=8, max_size=8),
       last=st.booleans(), chunk=st.integers(1, 9))
def test_lines_are_split_alike_whatever_the_chunks(lines: list[bytes], ends: list[bytes],
                                                   last: bool, chunk: int) -> None:
    # A CR end before an empty line's LF reads as one CRLF: not two lines, whatever the reader.
    assume(not any(ends[k] == b"\r" and not lines[k + 1] for k in range(len(lines) - 1)))
    data = b"".join(line + end for line, end in zip(lines, ends, strict=False))
    if lines and not last:
        data = data.removesuffix(ends[len(lines) - 1])
    expected = [line if len(line) <= 10 else None for line in lines]
    if expected and not last and expected[-1] == b"":
        expected.pop()  # an empty last line without an end is no line
    with patch.multiple(request_logs, CHUNK_BYTES=chunk, MAX_LINE_BYTES=10,
                        MAX_RUNAWAY_BYTES=10 ** 6):
        assert list(request_logs._split(io.BytesIO(data))) == expected


# ---- the classes a Governor request log recorded (docs/reliability.md, N15) -----------------

def governor_log(path: Path, classes: list[str]) -> Path:
    base = {"v": "governor/request-log/v1", "route": "/v1/chat/completions", "ttft_seconds": 0.2,
            "itl_p99_seconds": 0.03, "status": "200", "prompt_tokens": 300, "output_tokens": 20}
    path.write_text("".join(json.dumps({**base, "at": 1700000000.0 + k, "request_class": c})
                            + "\n" for k, c in enumerate(classes)))
    return path


def test_per_class_scoring_keeps_the_class_the_log_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    log = governor_log(tmp_path / "requests.jsonl", ["doc"] * 40 + ["chat"] * 80)
    code = main(["--workload", str(log), "--classes", "spec", "--budgets", "2048",
                 "--seqs", "256", "--jobs", "1", "--no-plots", "--out", str(tmp_path / "out")])
    assert code == 0
    summary = json.loads((tmp_path / "out" / "requests" / "summary.json").read_text())
    scored = summary["classes"]["runs"]["controller"]
    assert (scored["doc"]["requests"], scored["chat"]["requests"]) == (40, 80)
    assert summary["request_log"]["undeclared_classes"] == {}
    plan = ClassPlan.of(SPEC, itl_slo="inter-token-latency", ttft_slo=None, apply=True)
    assert {plan.classify(a).name for a in replay(log).arrivals(1)[:40]} == {"doc"}


def test_a_recorded_class_the_spec_does_not_declare_is_reported_and_classified_by_its_rules(
    tmp_path: Path,
) -> None:
    log = replay(governor_log(tmp_path / "requests.jsonl", ["vip"] * 40 + ["doc"] * 2))
    assert log.report["undeclared_classes"] == {"vip": 40}
    assert [a.kind for a in log.arrivals(1)] == ["chat"] * 40 + ["doc"] * 2  # 300-token prompts
    assert [a.recorded_class for a in log.arrivals(1)] == [None] * 40 + ["doc"] * 2
    assert ("recorded classes the spec does not declare, classified by its rules instead: "
            "{'vip': 40}") in describe(log)
