"""The recorder of ``budget_tables``: what goes in comes back out of its compressed files."""

from __future__ import annotations

import gc
import math
from pathlib import Path

import numpy as np
import pytest

from lab.gpu.budget_recorder import STEP_COLUMNS, Kind, Raw, Recorder, load, save


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _recorded() -> tuple[Recorder, Clock]:
    clock = Clock()
    recorder = Recorder(clock)
    clock.now += 0.5
    rid = recorder.request(Kind.DECODER, slot=3, prompt_tokens=128, max_tokens=256)
    for step in range(1, 4):
        clock.now += 0.007
        recorder.event(rid, step)
    recorder.probe(0.5123456, 0.0004567)
    recorder.gc_callback("start", {"generation": 2})
    clock.now += 0.040
    recorder.gc_callback("stop", {"generation": 2, "collected": 17})
    # Absolute monotonic times, as the engine core sends them; NaN: scheduling not seen.
    recorder.steps([(100.501, 100.508, 100.5081, 2064, 65, 2000, 65, 0),
                    (math.nan, 100.515, 100.5151, 64, 64, 0, 64, 1)])
    return recorder, clock


def test_a_saved_cut_loads_back_to_the_microsecond(tmp_path: Path) -> None:
    recorder, _ = _recorded()
    raw = recorder.cut()
    save(tmp_path / "a.npz", raw)
    back = load([tmp_path / "a.npz"])
    assert back.event_tokens.tolist() == [1, 2, 3]
    assert back.event_time == pytest.approx(raw.event_time, abs=1e-6)
    assert back.request_kind.tolist() == [Kind.DECODER]
    assert back.request_slot.tolist() == [3]
    assert back.request_submitted == pytest.approx([0.5], abs=1e-6)
    assert back.probe_lag == pytest.approx([0.000457], abs=1e-6)
    assert back.gc_duration == pytest.approx([0.040], abs=1e-6)
    assert back.gc_generation.tolist() == [2]
    assert back.gc_collected.tolist() == [17]
    assert back.steps.shape == (2, len(STEP_COLUMNS))
    assert math.isnan(back.step_column("scheduled")[1])
    assert back.step_column("output_ready") == pytest.approx([0.508, 0.515], abs=1e-6)
    assert back.step_column("prefill_tokens").tolist() == [2000, 0]


def test_cuts_are_disjoint_and_request_ids_keep_counting(tmp_path: Path) -> None:
    recorder, clock = _recorded()
    save(tmp_path / "a.npz", recorder.cut())
    clock.now += 1.0
    rid = recorder.request(Kind.LONG, slot=-1, prompt_tokens=7000, max_tokens=256)
    recorder.event(rid, 1)
    save(tmp_path / "b.npz", recorder.cut())
    both = load([tmp_path / "a.npz", tmp_path / "b.npz"])
    assert both.request_id.tolist() == [0, 1]
    assert both.request_slot.tolist() == [3, -1]
    assert both.event_request.tolist() == [0, 0, 0, 1]
    assert np.all(np.diff(both.event_time) >= 0)
    assert both.steps.shape[0] == 2


def test_an_empty_cut_round_trips(tmp_path: Path) -> None:
    save(tmp_path / "empty.npz", Recorder(Clock()).cut())
    back = load([tmp_path / "empty.npz"])
    assert back.event_time.size == 0
    assert back.steps.shape == (0, len(STEP_COLUMNS))


def test_times_that_go_back_cannot_be_delta_encoded(tmp_path: Path) -> None:
    recorder, _ = _recorded()
    raw = recorder.cut()
    broken = Raw(**{**raw.__dict__, "event_time": raw.event_time[::-1].copy()})
    with pytest.raises(ValueError, match="must not decrease"):
        save(tmp_path / "bad.npz", broken)


def test_no_files_is_an_error() -> None:
    with pytest.raises(ValueError, match="no raw files"):
        load([])


def test_a_real_collection_is_recorded_until_stopped() -> None:
    recorder = Recorder(Clock())
    stop = recorder.watch_gc()
    try:
        gc.collect()
    finally:
        stop()
    gc.collect()
    raw = recorder.cut()
    assert raw.gc_generation.tolist() == [2]
