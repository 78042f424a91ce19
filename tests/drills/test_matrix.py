"""``governor drill all``: the plan, the JSON lines appended as drills end, the resume."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from governor.drills import catalog, matrix
from governor.drills.matrix import JSONL, MatrixOptions, plan, run_matrix
from governor.drills.report import Result
from governor.drills.run import DrillError, DrillOptions
from governor.drills.score import read_records

ROOT = Path(__file__).resolve().parents[2]


def options(out: Path, slo: Path = ROOT / "slo.yaml") -> MatrixOptions:
    return MatrixOptions(out, DrillOptions(drill="healthy", slo=slo), seeds=(1, 2, 3),
                         loads=(0.5, 1.0, 1.5))


def test_every_cause_on_every_seed_then_healthy_per_load() -> None:
    planned = plan(options(Path("out")), stock_vllm=False)
    faults = [d.name for d in catalog.DRILLS if d.cause is not None]
    assert [(o.drill, o.seed) for o in planned[:len(faults)]] == [(f, 1) for f in faults]
    assert [(o.drill, o.seed, o.load_scale) for o in planned[-3:]] == [
        ("healthy", 1, 0.5), ("healthy", 2, 1.0), ("healthy", 3, 1.5)]
    assert len({o.run_dir for o in planned}) == len(planned)
    assert not any(o.keep for o in planned)


def test_a_stock_vllm_spec_leaves_out_what_it_cannot_see() -> None:
    drills = {o.drill for o in plan(options(Path("out")), stock_vllm=True)}
    assert "client_stream" not in drills and "request_read" not in drills
    assert "gpu_throttled" in drills


def fake_drill(ran: list[str]) -> Callable[..., Result]:
    def run(drill: DrillOptions, write: Callable[[str], None],
            should_stop: Callable[[], bool], on_result: Callable[[Result], None]) -> Result:
        ran.append(drill.drill)
        cause = catalog.by_name(drill.drill).cause
        result = Result(drill=drill.drill, spec=str(drill.slo), seed=drill.seed, injected={},
                        found=cause, verdict=[], onset_to_verdict_seconds=30.0 if cause else None,
                        alerts=[], controller_changes=0, controller_reasons=[], notes=[],
                        load_scale=drill.load_scale, expected=cause)
        on_result(result)
        return result
    return run


def test_the_matrix_appends_each_line_and_resumes_where_it_stopped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []
    monkeypatch.setattr(matrix, "run_drill", fake_drill(ran))
    out: list[str] = []
    assert run_matrix(options(tmp_path), write=out.append) == 0
    planned = plan(options(tmp_path), stock_vllm=False)
    assert len(ran) == len(planned) == len(read_records(tmp_path / JSONL))
    assert "targets met" in out[-1]
    lines = (tmp_path / JSONL).read_text().splitlines()
    (tmp_path / JSONL).write_text("\n".join(lines[:5]) + "\n")  # cut short after five
    ran.clear()
    run_matrix(options(tmp_path), write=out.append)
    assert len(ran) == len(planned) - 5
    assert len(read_records(tmp_path / JSONL)) == len(planned)


def test_drills_run_side_by_side_each_on_its_own_ports(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []
    bases: dict[str, set[int]] = {}
    inner = fake_drill(ran)

    def run(drill: DrillOptions, write: Callable[[str], None],
            should_stop: Callable[[], bool], on_result: Callable[[Result], None]) -> Result:
        bases.setdefault(threading.current_thread().name, set()).add(drill.port_base)
        write("a line")
        return inner(drill, write, should_stop, on_result)
    monkeypatch.setattr(matrix, "run_drill", run)
    out: list[str] = []
    opts = dataclasses.replace(options(tmp_path), parallel=3)
    assert run_matrix(opts, write=out.append) == 0
    planned = plan(opts, stock_vllm=False)
    assert sorted(ran) == sorted(o.drill for o in planned)
    assert len(read_records(tmp_path / JSONL)) == len(planned)
    # Each worker keeps one port base, PORT_STRIDE apart from the others'.
    assert all(len(b) == 1 for b in bases.values())
    used = sorted(b for bs in bases.values() for b in bs)
    assert used == [opts.base.port_base + matrix.PORT_STRIDE * i for i in range(len(used))]
    assert any(line.startswith("[batching s1 x1] a line") for line in out)
    assert "targets met" in out[-1]


def test_a_drill_that_cannot_run_stops_the_others_from_starting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []

    def run(drill: DrillOptions, write: Callable[[str], None],
            should_stop: Callable[[], bool], on_result: Callable[[Result], None]) -> Result:
        ran.append(drill.drill)
        raise DrillError("the inference part died")
    monkeypatch.setattr(matrix, "run_drill", run)
    with pytest.raises(DrillError, match="the inference part died"):
        run_matrix(dataclasses.replace(options(tmp_path), parallel=2), write=lambda line: None)
    assert len(ran) <= 2


def test_a_drill_that_cannot_run_lets_the_running_ones_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The other worker's drill, already running, is not cut short by the failure."""
    ran: list[str] = []
    failed, running = threading.Event(), threading.Event()
    inner = fake_drill(ran)

    def run(drill: DrillOptions, write: Callable[[str], None],
            should_stop: Callable[[], bool], on_result: Callable[[Result], None]) -> Result:
        if drill.drill == "batching":
            assert running.wait(10)  # the other worker's drill has started
            failed.set()
            raise DrillError("the inference part died")
        running.set()
        assert failed.wait(10)
        assert not should_stop()  # the failure is not a Ctrl-C for the drill still running
        return inner(drill, write, should_stop, on_result)
    monkeypatch.setattr(matrix, "run_drill", run)
    with pytest.raises(DrillError):
        run_matrix(dataclasses.replace(options(tmp_path), parallel=2), write=lambda line: None)
    assert ran == ["kv_cache"]
    assert [r["drill"] for r in read_records(tmp_path / JSONL)] == ["kv_cache"]


@pytest.mark.parametrize("parallel", [1, 2])
def test_no_drill_starts_after_start_by_and_the_next_run_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parallel: int) -> None:
    ran: list[str] = []
    monkeypatch.setattr(matrix, "run_drill", fake_drill(ran))
    clock = iter(range(0, 10_000, 100))  # each look at the clock is 100 s later
    monkeypatch.setattr(matrix, "_clock", lambda: float(next(clock)))
    out: list[str] = []
    opts = dataclasses.replace(options(tmp_path), parallel=parallel, start_by=250.0)
    run_matrix(opts, write=out.append)
    assert 0 < len(ran) < len(plan(opts, stock_vllm=False))
    assert sum("no drill starts after 250 s" in line for line in out) == 1
    monkeypatch.setattr(matrix, "_clock", lambda: 0.0)
    run_matrix(opts, write=out.append)
    assert len(read_records(tmp_path / JSONL)) == len(plan(opts, stock_vllm=False))
