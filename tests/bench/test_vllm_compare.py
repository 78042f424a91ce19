"""``governor bench vllm``: argument translation, round aggregation, the table, bad options."""

from __future__ import annotations

from typing import Any

import pytest

from governor.bench import BENCHES
from governor.bench.vllm_compare import (
    OURS,
    THEIRS,
    BenchConfig,
    combine_rounds,
    governor_argv,
    parse_args,
    render,
    vllm_argv,
)


def test_the_benchmark_is_listed() -> None:
    assert BENCHES["vllm"][0] == "governor.bench.vllm_compare"


CONFIG = BenchConfig(model="/m", engine_args=("dtype=float32",), max_num_seqs=64,
                     max_num_batched_tokens=2048, max_model_len=1024, concurrencies=(1, 16),
                     requests_per_slot=3, min_requests=16, rate_per_slot=2.0, max_tokens=64,
                     startup_seconds=60.0)


def test_both_servers_get_the_same_engine_options_and_tracing() -> None:
    ours = governor_argv(CONFIG, 8001, "http://127.0.0.1:4318")
    theirs = vllm_argv(CONFIG, 8002, "http://127.0.0.1:4318")
    for flag, value in (("--max-num-seqs", "64"), ("--max-num-batched-tokens", "2048"),
                        ("--max-model-len", "1024")):
        assert ours[ours.index(flag) + 1] == value == theirs[theirs.index(flag) + 1]
    assert ours[ours.index("--model") + 1] == "/m" == theirs[theirs.index("serve") + 1]
    assert ours[ours.index("--engine-arg") + 1] == "dtype=float32"
    assert theirs[theirs.index("--dtype") + 1] == "float32"
    assert ours[ours.index("--otlp-endpoint") + 1] == "http://127.0.0.1:4318"
    assert theirs[theirs.index("--otlp-traces-endpoint") + 1] == "http://127.0.0.1:4318/v1/traces"


def summary(tokens: float, ttft: float, errors: int = 0) -> dict[str, Any]:
    return {"output_tokens_per_second": tokens, "errors": errors, "frontend_cpu_us_per_token": 80.0,
            "ttft_seconds": {"p50": ttft, "p99": ttft * 2},
            "itl_seconds": {"p50": 0.01, "p99": None}}


def test_rounds_combine_into_medians_and_errors_add_up() -> None:
    rounds = [[{"concurrency": 4, OURS: summary(v, v / 1000, 1), THEIRS: summary(100, 0.1)}]
              for v in (90.0, 110.0, 130.0)]
    (row,) = combine_rounds(rounds)
    assert row[OURS]["output_tokens_per_second"] == 110.0
    assert row[OURS]["ttft_seconds"] == {"p50": 0.11, "p99": 0.22}
    assert row[OURS]["itl_seconds"]["p99"] is None
    assert row[OURS]["errors"] == 3 and row[THEIRS]["errors"] == 0


def test_the_table_shows_both_servers_and_the_ratios() -> None:
    report = {"config": {"rounds": 1}, "rows": [
        {"concurrency": 16, OURS: summary(200.0, 0.05), THEIRS: summary(100.0, 0.1)}]}
    table = render(report)
    assert "governor" in table and "vllm-server" in table
    ratio_line = next(line for line in table.splitlines() if "ratio" in line and "x" in line)
    assert "2.00x" in ratio_line and "0.50x" in ratio_line and "-" in ratio_line


@pytest.mark.parametrize(
    "argv", [["--rate-per-slot", "0"], ["--concurrency", "0"], ["--max-tokens", "many"],
             ["--rounds", "-1"]],
)
def test_bad_options_are_refused_without_a_traceback(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as raised:
        parse_args(argv)
    assert raised.value.code == 2
    assert "governor bench vllm" in capsys.readouterr().err
