"""The drill matrix's score, from its JSON lines, against the targets of the verdict's issue.

A fault drill is right when its finding (:mod:`governor.drills.finding`) is the cause it
injected; a healthy drill when no verdict was seen at any poll after its onset. The targets:

* the leading cause is right in at least :data:`TARGET_ACCURACY` of the fault drills;
* healthy drills see no verdict;
* a right verdict holds within :data:`TARGET_SECONDS` of the onset;
* the controller changes limits only in the drills of causes it retunes for (``batching``,
  ``kv_cache``: :attr:`governor.contracts.causes.Action.RETUNE`);
* and the matrix is whole: for each spec it ran on, every fault drill that spec can see on at
  least :data:`MIN_SEEDS` seeds, and healthy at :data:`MIN_LOADS` loads or more. A few drills
  that happen to be right are not a score.

Drills a spec cannot see (a slow reader under a stock-vLLM spec) are listed, not scored::

    >>> s = score([{"drill": "batching", "spec": "slo.yaml", "expected": "batching",
    ...             "found": "batching",
    ...             "onset_to_verdict_seconds": 40.0, "controller_changes": 1},
    ...            {"drill": "healthy", "spec": "slo.yaml", "expected": None, "found": None,
    ...             "verdict_polls": 0,
    ...             "controller_changes": 0}])
    >>> s.accuracy, s.healthy_quiet, s.late, s.stray_changes
    (1.0, 1, 0, 0)
    >>> s.met, s.missing[0]
    (False, 'slo.yaml: batching on 1 seed')
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from governor.contracts import causes
from governor.drills import catalog

TARGET_ACCURACY: Final = 0.95
TARGET_SECONDS: Final = 120.0
MIN_SEEDS: Final = 3  # runs of each fault drill, per spec
MIN_LOADS: Final = 3  # distinct load scales of the healthy drill, per spec
RETUNED: Final = frozenset(c.name for c in causes.CAUSES if c.action is causes.Action.RETUNE)

Record = Mapping[str, Any]


def applicable(record: Record) -> bool:
    return bool(record.get("applicable", True))


def right(record: Record) -> bool:
    """Whether a drill's answer is right: its cause leads, or (healthy) no verdict at all."""
    if record.get("expected") is None:
        return record.get("found") is None and not record.get("verdict_polls")
    return bool(record.get("found") == record.get("expected"))


@dataclass(frozen=True, slots=True)
class Row:
    """One drill's runs: how many, how many right, how fast, what the controller did."""

    drill: str
    runs: int
    right: int
    median_seconds: float | None  # onset to a right verdict
    slowest_seconds: float | None
    changes: int  # limit changes over all runs
    found: tuple[str, ...]  # every run's finding ("-": none), in order


@dataclass(frozen=True, slots=True)
class Score:
    rows: tuple[Row, ...]
    fault_runs: int
    fault_right: int
    healthy_runs: int
    healthy_quiet: int
    late: int  # right verdicts later than TARGET_SECONDS
    stray_changes: int  # limit changes in drills of causes the controller does not retune for
    not_scored: tuple[str, ...]  # drills the spec cannot see
    missing: tuple[str, ...] = ()  # what the matrix lacks to be whole, per spec

    @property
    def accuracy(self) -> float | None:
        return self.fault_right / self.fault_runs if self.fault_runs else None

    @property
    def met(self) -> bool:
        return ((self.accuracy is None or self.accuracy >= TARGET_ACCURACY)
                and self.healthy_quiet == self.healthy_runs and self.late == 0
                and self.stray_changes == 0 and not self.missing)


def _row(drill: str, records: Sequence[Record]) -> Row:
    times = [float(r["onset_to_verdict_seconds"]) for r in records
             if right(r) and r.get("onset_to_verdict_seconds") is not None]
    return Row(drill, len(records), sum(right(r) for r in records),
               statistics.median(times) if times else None, max(times) if times else None,
               sum(int(r.get("controller_changes") or 0) for r in records),
               tuple(str(r.get("found") or "-") for r in records))


def score(records: Iterable[Record]) -> Score:
    records = list(records)
    scored: dict[str, list[Record]] = {}
    skipped = set()
    for record in records:
        drill = str(record.get("drill"))
        if applicable(record):
            scored.setdefault(drill, []).append(record)
        else:
            skipped.add(drill)
    order = {name: i for i, name in enumerate(catalog.NAMES)}
    rows = tuple(_row(d, scored[d]) for d in sorted(scored, key=lambda d: order.get(d, 99)))
    faults = [r for rs in scored.values() for r in rs if r.get("expected") is not None]
    healthy = [r for rs in scored.values() for r in rs if r.get("expected") is None]
    return Score(
        rows=rows, fault_runs=len(faults), fault_right=sum(right(r) for r in faults),
        healthy_runs=len(healthy), healthy_quiet=sum(right(r) for r in healthy),
        late=sum(1 for r in faults if right(r)
                 and float(r.get("onset_to_verdict_seconds") or 0) > TARGET_SECONDS),
        stray_changes=sum(int(r.get("controller_changes") or 0) for rs in scored.values()
                          for r in rs if r.get("drill") not in RETUNED),
        not_scored=tuple(sorted(skipped - set(scored))), missing=_missing(records))


def _missing(records: Sequence[Record]) -> tuple[str, ...]:
    """For each spec, the fault drills it can see with fewer than :data:`MIN_SEEDS` seeds and
    a healthy drill at fewer than :data:`MIN_LOADS` loads."""
    specs: dict[str, list[Record]] = {}
    for record in records:
        specs.setdefault(str(record.get("spec")), []).append(record)
    missing = []
    for spec, runs in specs.items():
        # A record without the key predates it: read as a spec that sees every cause (stricter).
        stock = any(bool(r.get("stock_vllm_spec")) for r in runs)
        for drill in catalog.DRILLS:
            if drill.cause is None or (stock and not drill.stock_vllm):
                continue
            seeds = {r.get("seed") for r in runs if r.get("drill") == drill.name}
            if len(seeds) < MIN_SEEDS:
                missing.append(f"{spec}: {drill.name} on {len(seeds)} "
                               f"seed{'' if len(seeds) == 1 else 's'}")
        loads = {round(float(r.get("load_scale") or 1), 3) for r in runs
                 if r.get("drill") == catalog.HEALTHY_NAME}
        if len(loads) < MIN_LOADS:
            missing.append(f"{spec}: {catalog.HEALTHY_NAME} at {len(loads)} "
                           f"load{'' if len(loads) == 1 else 's'}")
    return tuple(missing)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def render(s: Score) -> str:
    """The score as a table, then each target, met or not."""
    lines = [f"{'drill':<18} {'right':>7} {'median s':>8} {'max s':>6} {'changes':>7}  found"]
    for row in s.rows:
        lines.append(f"{row.drill:<18} {row.right:>3}/{row.runs:<3} "
                     f"{_seconds(row.median_seconds):>8} {_seconds(row.slowest_seconds):>6} "
                     f"{row.changes:>7}  {' '.join(row.found)}")
    for drill in s.not_scored:
        lines.append(f"{drill:<18} {'n/a':>7}  (the spec cannot see it)")
    accuracy = "-" if s.accuracy is None else f"{s.accuracy:.0%}"
    lines += [
        "",
        f"{_mark(s.accuracy is None or s.accuracy >= TARGET_ACCURACY)} leading cause right in "
        f"{s.fault_right}/{s.fault_runs} fault drills ({accuracy}; target "
        f"{TARGET_ACCURACY:.0%})",
        f"{_mark(s.healthy_quiet == s.healthy_runs)} healthy drills without a verdict: "
        f"{s.healthy_quiet}/{s.healthy_runs}",
        f"{_mark(s.late == 0)} right verdicts later than {TARGET_SECONDS:.0f} s: {s.late}",
        f"{_mark(s.stray_changes == 0)} limit changes outside {'/'.join(sorted(RETUNED))} "
        f"drills: {s.stray_changes}",
        f"{_mark(not s.missing)} a whole matrix (each fault drill on {MIN_SEEDS} seeds, "
        f"healthy at {MIN_LOADS} loads, per spec)" + ("" if not s.missing else
                                                      f": {len(s.missing)} short"),
        *(f"       {line}" for line in s.missing),
        f"targets {'met' if s.met else 'not met'}",
    ]
    return "\n".join(lines)


def _mark(ok: bool) -> str:
    return "ok  " if ok else "MISS"


def read_records(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of ``path`` (a torn last line, from a drill cut short, is skipped)."""
    records = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                records.append(record)
    return records
