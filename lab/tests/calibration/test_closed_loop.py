"""The closed-loop replay of ``vllm bench serve``'s random workload on the simulator, and its
comparison with a measured table the preset was not fitted to."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from governor.inference.engines.sim.presets import get_preset
from lab.calibration import sim_fidelity
from lab.calibration.closed_loop import (
    DEFAULT_MEASURED,
    ClosedLoop,
    Comparison,
    Measured,
    Row,
    from_vllm_bench,
    render,
    simulate,
    summary,
)

REPO = Path(__file__).resolve().parents[3]
H200 = get_preset("llama-3-8b@h200")


def test_one_stream_decodes_at_the_single_request_pace() -> None:
    row = simulate(H200, ClosedLoop(1, input_len=512, output_len=64, prompts_per_stream=2))
    assert 4.0 < row.itl_p50_ms < 6.0  # a lone decode step on the H200 preset
    assert row.ttft_p50_ms > 10.0  # a 512-token prefill
    assert 150 < row.output_tokens_per_second < 250


def test_the_replay_is_deterministic_for_a_seed() -> None:
    workload = ClosedLoop(8, input_len=256, output_len=32, prompts_per_stream=2)
    assert simulate(H200, workload, seed=3) == simulate(H200, workload, seed=3)


def test_waves_of_simultaneous_prefills_break_the_itl_tail_at_vllms_default_budget() -> None:
    """128 streams arriving together prefill in 8192-token steps that stall every decoder."""
    row = simulate(H200, ClosedLoop(128, prompts_per_stream=2))
    assert row.itl_p50_ms < 20.0 < 120.0 < row.itl_p99_ms


def test_a_vllm_bench_serve_result_file_becomes_a_row() -> None:
    result = {"max_concurrency": 32, "median_ttft_ms": 371.5, "p99_ttft_ms": 425.0,
              "median_itl_ms": 5.8, "p99_itl_ms": 7.05, "output_throughput": 4311.3}
    assert from_vllm_bench(result) == Row(32, 371.5, 425.0, 5.8, 7.05, 4311.3)


def test_a_comparison_says_whether_the_breach_is_reproduced() -> None:
    measured = Row(128, 700.0, 1600.0, 8.7, 180.0, 8700.0)
    close = Comparison(Row(128, 650.0, 1400.0, 9.5, 160.0, 8800.0), measured, 0.12)
    missed = Comparison(Row(128, 650.0, 1400.0, 9.5, 100.0, 8800.0), measured, 0.12)
    assert close.breach_reproduced and not missed.breach_reproduced
    assert close.within("itl_p99_ms") and not missed.within("itl_p99_ms")
    assert round(close.error("ttft_p50_ms"), 3) == round(650 / 700 - 1, 3)
    text = render([close.simulated], [close], 0.12)
    assert "reproduced by the simulator" in text and "| 128 | itl_p99_ms | 180.0 |" in text
    assert summary([close, missed])["breaches_reproduced"] == 1


def test_the_committed_h200_table_is_out_of_sample_and_every_breach_is_reproduced() -> None:
    """The issue's hard target on the closed-loop table: the 120 ms breach, or its absence,
    reproduced at every concurrency (the ±15%/±25% cells are reported, not asserted)."""
    measured = Measured.load(REPO / DEFAULT_MEASURED)
    assert sorted(measured.rows) == [1, 32, 128, 256]
    workload = measured.workload
    for concurrency, row in measured.rows.items():
        simulated = simulate(H200, ClosedLoop(concurrency, workload["input_len"],
                                              workload["output_len"],
                                              workload["num_prompts_per_stream"]))
        assert Comparison(simulated, row, 0.12).breach_reproduced, concurrency


def test_the_command_prints_json_lines_and_the_validation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    table = tmp_path / "measured.json"
    table.write_text(json.dumps({"workload": {}, "rows": [
        {"concurrency": 2, "ttft_p50_ms": 20.0, "ttft_p99_ms": 30.0, "itl_p50_ms": 5.0,
         "itl_p99_ms": 6.0, "output_tokens_per_second": 400.0}]}))
    code = sim_fidelity.main(["--closed-loop", "--concurrency", "1,2", "--input-len", "128",
                              "--output-len", "16", "--measured", str(table)])
    out = capsys.readouterr().out
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines() if line.startswith('{"concurrency"')]
    assert [r["concurrency"] for r in rows] == [1, 2]
    assert "validation (out of sample)" in out
    assert json.loads(out.strip().splitlines()[-1])["validation"]["concurrencies"] == 1


def test_without_a_measured_table_the_command_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    code = sim_fidelity.main(["--closed-loop", "--concurrency", "1", "--input-len", "64",
                              "--output-len", "8", "--measured", str(tmp_path / "none.json")])
    assert code == 0
    assert "nothing to compare with" in capsys.readouterr().out


@pytest.mark.parametrize("bad", ["0", "a,b", ""])
def test_bad_concurrency_is_a_usage_error(bad: str) -> None:
    with pytest.raises(SystemExit) as exc:
        sim_fidelity.main(["--closed-loop", "--concurrency", bad])
    assert exc.value.code == 2
