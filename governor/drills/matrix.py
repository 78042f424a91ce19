"""``governor drill all``: every drill on every seed, and healthy at several loads, one after
the other, each drill's JSON line appended to ``OUT/drills.jsonl`` as it ends; then the score.

It is resumable: a drill already in ``drills.jsonl`` (the same drill, seed, load and spec) is
not run again, so a matrix cut short goes on where it stopped. Healthy runs take the seeds in
turn, one per load. Drills the spec cannot see (a slow reader under a stock-vLLM spec, which
reads vLLM's own histograms) are left out.

With ``parallel`` above one, that many drills run at once, each on a stack of its own: the
``i``-th slot's six ports start at ``port_base + PORT_STRIDE * i``, and each line a drill
prints starts with its name and seed. The simulated engine keeps real time only while the
machine has a core or two free for each drill (the heavy drills' engines step hundreds of
sequences): on a machine too small, a lagging engine reads as prefill stalls. One drill that
cannot run stops the matrix from starting others; those running end first::

    >>> base = DrillOptions(drill="healthy", slo=Path("slo.yaml"))
    >>> planned = plan(MatrixOptions(Path("out"), base, seeds=(1, 2), loads=(0.5, 1.5)),
    ...                stock_vllm=False)
    >>> [(o.drill, o.seed, o.load_scale) for o in planned][-3:]
    [('request_read', 2, 1.0), ('healthy', 1, 0.5), ('healthy', 2, 1.5)]
"""

from __future__ import annotations

import dataclasses
import queue
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from governor.drills import catalog
from governor.drills.report import Result
from governor.drills.run import DrillError, DrillOptions, Interrupted, run_drill, say
from governor.drills.score import read_records, render, score
from governor.drills.spec import DrillSpecError, check

JSONL: Final = "drills.jsonl"
_clock = time.monotonic  # when a matrix started, and whether --start-by has passed
PORT_STRIDE: Final = 10  # between the port bases of drills that run at once
# Prometheus's and Alertmanager's data are dropped once a drill has ended (its logs are kept).
_DROPPED: Final = ("prometheus-data", "alertmanager-data")


@dataclass(frozen=True, slots=True)
class MatrixOptions:
    out: Path
    base: DrillOptions  # every option but the drill, seed, load and run directory
    seeds: tuple[int, ...] = (1, 2, 3)
    loads: tuple[float, ...] = (0.5, 1.0, 1.5)
    parallel: int = 1  # drills at once, each on its own ports
    start_by: float | None = None  # seconds after the start: no drill starts later (resume)


Key = tuple[str, int, float, str]


def key(drill: str, seed: int, load_scale: float, spec: str) -> Key:
    return (drill, int(seed), round(float(load_scale), 3), spec)


def plan(options: MatrixOptions, stock_vllm: bool) -> list[DrillOptions]:
    """Every drill of the matrix, in the order it runs: seed by seed, then healthy per load."""
    faults = [d for d in catalog.DRILLS
              if d.cause is not None and (d.stock_vllm or not stock_vllm)]
    planned = [_drill(options, drill.name, seed, 1.0) for seed in options.seeds
               for drill in faults]
    planned += [_drill(options, catalog.HEALTHY_NAME, options.seeds[i % len(options.seeds)],
                       load) for i, load in enumerate(options.loads)]
    return planned


def _drill(options: MatrixOptions, drill: str, seed: int, load: float) -> DrillOptions:
    run_dir = options.out / "runs" / f"{drill}-s{seed}-x{load:g}"
    return dataclasses.replace(options.base, drill=drill, seed=seed, load_scale=load,
                               run_dir=run_dir, keep=False)


def done(records: Iterable[dict[str, Any]]) -> set[Key]:
    return {key(str(r.get("drill")), int(r.get("seed") or 0), float(r.get("load_scale") or 1),
                str(r.get("spec"))) for r in records}


def run_matrix(options: MatrixOptions, should_stop: Callable[[], bool] = lambda: False,
               write: Callable[[str], None] = say) -> int:
    """Run what is left of the matrix; 0 once every drill has run (whatever it found)."""
    try:
        stock = check(options.base.slo).stock_vllm
    except DrillSpecError as exc:
        raise DrillError(str(exc)) from None
    options.out.mkdir(parents=True, exist_ok=True)
    jsonl = options.out / JSONL
    finished = done(read_records(jsonl)) if jsonl.exists() else set()
    planned = plan(options, stock)
    todo = [(index, drill) for index, drill in enumerate(planned, 1)
            if key(drill.drill, drill.seed, drill.load_scale, str(drill.slo)) not in finished]
    started = _clock()
    told: list[bool] = []

    def too_late() -> bool:
        late = (options.start_by is not None
                and _clock() - started > options.start_by)
        if late and not told:
            told.append(True)
            write(f"== no drill starts after {options.start_by:g} s: run the matrix again to "
                  "go on where it stopped")
        return late
    if options.parallel <= 1:
        for index, drill in todo:
            if too_late():
                break
            write(f"== drill {index}/{len(planned)}: {drill.drill}, seed {drill.seed}, "
                  f"load x{drill.load_scale:g}")
            _run_one(drill, jsonl, write, should_stop, threading.Lock())
    else:
        _run_parallel(options, todo, len(planned), jsonl, write, should_stop, too_late)
    write(summarize(options.out))
    return 0


def _run_one(drill: DrillOptions, jsonl: Path, write: Callable[[str], None],
             should_stop: Callable[[], bool], lock: threading.Lock) -> None:
    run_drill(drill, write, should_stop, on_result=lambda r: _append(jsonl, r, write, lock))
    for name in _DROPPED:
        shutil.rmtree(drill.run_dir / name, ignore_errors=True)


def _run_parallel(options: MatrixOptions, todo: list[tuple[int, DrillOptions]], total: int,
                  jsonl: Path, write: Callable[[str], None], should_stop: Callable[[], bool],
                  too_late: Callable[[], bool]) -> None:
    """``options.parallel`` workers, each on its own ports, take the drills in order."""
    work: queue.Queue[tuple[int, DrillOptions]] = queue.Queue()
    for item in todo:
        work.put(item)
    lock = threading.Lock()
    failed: list[str] = []
    stop = threading.Event()

    def stopping() -> bool:
        return stop.is_set() or should_stop()

    def worker(slot: int) -> None:
        base = options.base.port_base + PORT_STRIDE * slot
        while not stopping():
            try:
                index, drill = work.get_nowait()
            except queue.Empty:
                return
            with lock:
                late = too_late()
            if late:
                return
            drill = dataclasses.replace(drill, port_base=base)
            tag = f"[{drill.drill} s{drill.seed} x{drill.load_scale:g}]"

            def tagged(line: str, tag: str = tag) -> None:
                with lock:
                    write(f"{tag} {line}")
            tagged(f"== drill {index}/{total} on ports {base}-{base + 5}")
            try:
                # Only Ctrl-C cuts a running drill short; a failed one stops new ones starting.
                _run_one(drill, jsonl, tagged, should_stop, lock)
            except DrillError as exc:
                tagged(f"could not run: {exc}")
                failed.append(f"{drill.drill} seed {drill.seed}: {exc}")
                stop.set()
            except Interrupted:
                stop.set()
                return

    threads = [threading.Thread(target=worker, args=(slot,), name=f"drill-{slot}")
               for slot in range(options.parallel)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if should_stop():
        raise Interrupted()
    if failed:
        raise DrillError("; ".join(failed))


def _append(jsonl: Path, result: Result, write: Callable[[str], None],
            lock: threading.Lock) -> None:
    line = result.json_line()
    write(line)
    with lock, jsonl.open("a", encoding="utf-8") as handle:
        handle.write(line + "\n")


def summarize(out: Path) -> str:
    """The score of ``out``'s drills.jsonl; ``FileNotFoundError`` when there is none."""
    jsonl = out / JSONL
    if not jsonl.is_file():
        raise FileNotFoundError(f"{jsonl}: no drills have run there")
    return render(score(read_records(jsonl)))

