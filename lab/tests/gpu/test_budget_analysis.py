"""From raw samples to the original H200 run's cells: each figure means what the original run
meant, on a hand-made run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.gpu import budget_analysis as analysis
from lab.gpu.budget_recorder import Kind, Raw, Recorder, save


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


WINDOW = analysis.Window(prompt_tokens=2000, budget=8192, rep=1, start=1.0, end=2.0)


def _run() -> Raw:
    """Decoder 0: first token at 0.95, then 1.00, 1.01, 1.05 (two tokens merged), 2.01.
    Long prompts submitted at 0.80, 1.20 (first token 1.26) and 1.90 (first token 2.05)."""
    clock = Clock()
    recorder = Recorder(clock)
    ids: dict[str, int] = {}

    def at(t: float) -> None:
        clock.now = t

    at(0.80)
    ids["early"] = recorder.request(Kind.LONG, slot=-1, prompt_tokens=2000, max_tokens=4)
    at(0.90)
    ids["decoder"] = recorder.request(Kind.DECODER, slot=0, prompt_tokens=128, max_tokens=9)
    for t, tokens in ((0.95, 1), (1.00, 1), (1.01, 1)):
        at(t)
        recorder.event(ids["decoder"], tokens)
    at(1.02)
    recorder.event(ids["early"], 1)
    at(1.05)
    recorder.event(ids["decoder"], 2)
    at(1.20)
    ids["inside"] = recorder.request(Kind.LONG, slot=-1, prompt_tokens=2000, max_tokens=4)
    for t in (1.26, 1.27):
        at(t)
        recorder.event(ids["inside"], 1)
    at(1.90)
    ids["late"] = recorder.request(Kind.LONG, slot=-1, prompt_tokens=2000, max_tokens=4)
    at(2.01)
    recorder.event(ids["decoder"], 1)
    at(2.05)
    recorder.event(ids["late"], 1)
    recorder.probe(1.5, 0.0002)
    recorder.probe(1.6, 0.0300)
    recorder.probe(2.5, 0.9)  # outside the window
    recorder.gc_callback("start", {})
    at(2.06)
    recorder.gc_callback("stop", {"generation": 0, "collected": 1})
    # Steps (absolute = relative: the clock started at 0): decode, the 2000-token chunk, decode.
    recorder.steps([
        (1.190, 1.200, 1.2001, 64, 64, 0, 64, 0),
        (1.195, 1.245, 1.2451, 2064, 65, 2000, 65, 0),
        (1.246, 1.252, 1.2521, 65, 65, 0, 65, 0),
    ])
    return recorder.cut()


def test_itls_are_gaps_between_a_decoders_events_delivered_in_the_window() -> None:
    itls = analysis.itl_samples(analysis.index(_run()), 1.0, 2.0)
    assert itls.tolist() == pytest.approx([0.05, 0.01, 0.04])


def test_ttft_counts_long_prompts_submitted_and_answered_in_the_window() -> None:
    assert analysis.ttft_samples(analysis.index(_run()), 1.0, 2.0).tolist() == pytest.approx([0.06])


def test_a_step_lasts_from_the_previous_output_or_its_own_scheduling() -> None:
    durations = analysis.step_durations(_run())
    assert durations.tolist() == pytest.approx([0.010, 0.045, 0.006])


def test_window_stats_reports_the_cells_and_what_lies_behind_them() -> None:
    stats = analysis.window_stats(analysis.index(_run()), WINDOW)
    p50, _, _, worst, ttft_p50, ttft_p99 = stats.cells_ms
    assert p50 == pytest.approx(40.0)
    assert worst == pytest.approx(50.0)
    assert ttft_p50 == ttft_p99 == pytest.approx(60.0)
    assert (stats.itl_samples, stats.ttft_samples, stats.merged_events) == (3, 1, 1)
    assert stats.probe_lag_max_ms == pytest.approx(30.0)
    assert stats.gc_passes == 0  # the only pass started after the window
    assert (stats.steps, stats.long_prefill_steps) == (3, 1)
    assert stats.long_prefill_step_max_ms == pytest.approx(45.0)
    assert stats.longest_step_ms == pytest.approx(45.0)


def test_an_empty_window_has_no_cells_rather_than_an_error() -> None:
    stats = analysis.window_stats(analysis.index(_run()), analysis.Window(2000, 512, 1, 10.0, 11.0))
    assert all(v != v for v in stats.cells_ms)  # NaN
    assert "-" in analysis.render([stats])


def _stats(budget: int, itl_p99: float, rep: int) -> analysis.WindowStats:
    base = analysis.window_stats(analysis.index(_run()), WINDOW)
    cells = list(base.cells_ms)
    cells[2] = itl_p99
    return analysis.WindowStats(**{**base.__dict__, "cells_ms": tuple(cells),
                                   "window": analysis.Window(2000, budget, rep, 1.0, 2.0)})


def test_cells_put_every_repetition_next_to_section_6_and_mark_the_disputed() -> None:
    lines = analysis.render_cells([_stats(8192, 30.0, 1), _stats(8192, 40.0, 2),
                                   _stats(512, 40.0, 1)])
    disputed = next(line for line in lines if "| 8192 | ITL p99 **(disputed)**" in line)
    assert "| 35.40 | 30.00 / 40.00 | 30.00-40.00 | yes |" in disputed
    at_512 = next(line for line in lines if "| 512 | ITL p99 |" in line)
    assert "| 15.80 | 40.00 | 40.00-40.00 | no (0.40x) |" in at_512


def test_a_lone_prompt_gets_its_ttft_its_step_and_the_decoders_gap() -> None:
    clock = Clock()
    recorder = Recorder(clock)
    decoder = recorder.request(Kind.DECODER, slot=0, prompt_tokens=128, max_tokens=99)
    for t in (0.100, 0.107):
        clock.now = t
        recorder.event(decoder, 1)
    clock.now = 0.108
    lone = recorder.request(Kind.LONE_BUSY, slot=-1, prompt_tokens=2000, max_tokens=1)
    clock.now = 0.160
    recorder.event(lone, 1)
    clock.now = 0.161
    recorder.event(decoder, 1)
    recorder.steps([(0.100, 0.107, 0.1071, 64, 64, 0, 64, 0),
                    (0.109, 0.159, 0.1591, 2064, 65, 2000, 65, 0)])
    (row,) = analysis.lone_rows(analysis.index(recorder.cut()))
    assert (row.setting, row.prompt_tokens) == ("busy", 2000)
    assert row.ttft_ms == pytest.approx([52.0])
    assert row.prefill_step_ms == pytest.approx([50.0])  # from its scheduling at 0.109
    assert row.decoder_max_itl_ms == pytest.approx([54.0])
    assert "| 2000 | busy | 52.00 (52.00-52.00, n=1) |" in analysis.render_lone([row])


def test_the_command_re_renders_a_saved_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                            ) -> None:
    save(tmp_path / "budget_raw_w2000.npz", _run())
    summary = {"raw_files": ["budget_raw_w2000.npz"], "windows": [WINDOW.__dict__]}
    (tmp_path / "budget_summary.json").write_text(json.dumps(summary))
    assert analysis.main([str(tmp_path)]) == 0
    assert "| 2000 | 8192 | ITL max **(disputed)** | 41.30 | 50.00 |" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("summary", "why"),
    [
        (None, "No such file"),
        ("{not json", "Expecting property name"),
        ('{"windows": []}', "raw_files"),
        ('{"raw_files": ["missing.npz"], "windows": []}', "missing.npz"),
        ('{"raw_files": ["../../etc/passwd"], "windows": []}', "passwd"),
    ],
    ids=["no summary", "malformed JSON", "no raw files listed", "a raw file missing",
         "a path outside the run"],
)
def test_a_broken_run_directory_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], summary: str | None, why: str
) -> None:
    if summary is not None:
        (tmp_path / "budget_summary.json").write_text(summary)
    assert analysis.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "cannot read the run" in err
    assert why in err
    assert "Traceback" not in err


def test_a_long_prompt_gets_its_loop_stall_and_the_held_step_before_its_first_chunk() -> None:
    clock = Clock()
    recorder = Recorder(clock)
    clock.now = 1.100
    long_id = recorder.request(Kind.LONG, slot=-1, prompt_tokens=2000, max_tokens=4)
    recorder.probe(1.106, 0.0055)  # tokenization held the loop
    recorder.probe(1.300, 0.0001)  # too late to be this prompt's
    clock.now = 1.180
    recorder.event(long_id, 1)
    # A decode step whose outputs waited 30 ms for the chunk step's preparation, then the chunk.
    recorder.steps([(1.100, 1.107, 1.1071, 64, 64, 0, 64, 0),
                    (1.101, 1.140, 1.1401, 64, 64, 0, 64, 0),
                    (1.108, 1.160, 1.1601, 2064, 65, 2000, 65, 0)])
    (row,) = analysis.prompt_rows(analysis.index(recorder.cut()), [WINDOW])
    assert (row.setting, row.prompt_tokens, row.budget) == ("stream", 2000, 8192)
    assert row.loop_stall_ms == pytest.approx([5.5])
    assert row.held_step_ms == pytest.approx([33.0])
    assert row.first_chunk_step_ms == pytest.approx([20.0])
    rendered = analysis.render_prompts([row])
    assert "| 2000 | stream | 8192 | 5.50 (5.50-5.50, n=1) | 33.00" in rendered


def test_a_stream_prompt_outside_every_window_is_left_out() -> None:
    clock = Clock()
    recorder = Recorder(clock)
    clock.now = 5.0
    recorder.request(Kind.LONG, slot=-1, prompt_tokens=2000, max_tokens=4)
    assert analysis.prompt_rows(analysis.index(recorder.cut()), [WINDOW]) == []
