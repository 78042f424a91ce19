"""What ``budget_tables`` records in the AsyncLLM process, and its compressed files.

Everything is appended to typed arrays from the one event loop that runs the measurement, so a
sample costs a few hundred nanoseconds and the order of appends is the order of the clock:

* **events**: one per ``RequestOutput`` a caller received (``RequestOutputKind.DELTA``): time,
  request, tokens in it (more than one when vLLM merged outputs the caller had not taken yet);
* **requests**: one row per request at submission: kind, decoder slot, prompt tokens, time;
* **probe**: the loop-lag probe's wake-ups (a task sleeping 1 ms) and how late each was;
* **gc**: every garbage-collection pass (start, duration, generation, objects collected);
* **steps**: the engine core's own log of its steps (see ``budget_steplog``), fetched in batches.

Times are seconds since the recorder's origin on ``time.monotonic``'s clock (CLOCK_MONOTONIC,
the same in the engine-core process). :meth:`Recorder.cut` hands out what was recorded since the
previous cut as a :class:`Raw`, which :func:`save` writes as one compressed ``.npz`` (event and
probe times as microsecond deltas: they compress to a few bits). :func:`load` reads any number of
them back into one :class:`Raw`::

    recorder = Recorder(clock=time.monotonic)
    rid = recorder.request(Kind.DECODER, slot=3, prompt_tokens=128, max_tokens=256)
    recorder.event(rid, 1)
    save(Path("phase.npz"), recorder.cut())
    raw = load([Path("phase.npz")])
"""

from __future__ import annotations

import enum
import gc
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
MICROSECONDS = 1_000_000
# The columns of one engine-core step row, as ``budget_steplog`` returns them.
STEP_COLUMNS = ("scheduled", "output_ready", "updated", "tokens", "requests", "prefill_tokens",
                "running", "waiting")


class Kind(enum.IntEnum):
    """Why a request was sent."""

    DECODER = 0  # one of the closed loop's decoders
    LONG = 1  # a long prompt of the workload's steady stream
    LONE_IDLE = 2  # a prompt alone on an idle engine
    LONE_BUSY = 3  # a prompt alone among the decoders, no other long prompt
    WARMUP = 4  # before anything is measured


@dataclass(frozen=True)
class Raw:
    """Recorded samples as arrays (times in seconds since the recorder's origin)."""

    event_time: Floats
    event_request: Ints
    event_tokens: Ints
    request_id: Ints
    request_kind: Ints
    request_slot: Ints
    request_prompt_tokens: Ints
    request_max_tokens: Ints
    request_submitted: Floats
    probe_time: Floats
    probe_lag: Floats
    gc_time: Floats
    gc_duration: Floats
    gc_generation: Ints
    gc_collected: Ints
    steps: Floats  # shape (n, len(STEP_COLUMNS))

    def step_column(self, name: str) -> Floats:
        return self.steps[:, STEP_COLUMNS.index(name)]


class Recorder:
    """Append-only samples of one measurement; ``clock`` gives monotonic seconds."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self.origin = clock()
        self._columns: dict[str, array[Any]] = {}
        self._steps: list[Sequence[float]] = []
        self._gc_started: float | None = None
        self._next_request = 0
        self._reset()

    def _reset(self) -> None:
        self._columns = {
            "event_time": array("d"), "event_request": array("q"), "event_tokens": array("q"),
            "request_id": array("q"), "request_kind": array("q"), "request_slot": array("q"),
            "request_prompt_tokens": array("q"), "request_max_tokens": array("q"),
            "request_submitted": array("d"), "probe_time": array("d"), "probe_lag": array("d"),
            "gc_time": array("d"), "gc_duration": array("d"), "gc_generation": array("q"),
            "gc_collected": array("q"),
        }
        self._steps = []

    def now(self) -> float:
        return self._clock() - self.origin

    def request(self, kind: Kind, *, slot: int, prompt_tokens: int, max_tokens: int) -> int:
        """Register a request about to be submitted; returns its id."""
        rid = self._next_request
        self._next_request += 1
        c = self._columns
        c["request_id"].append(rid)
        c["request_kind"].append(int(kind))
        c["request_slot"].append(slot)
        c["request_prompt_tokens"].append(prompt_tokens)
        c["request_max_tokens"].append(max_tokens)
        c["request_submitted"].append(self.now())
        return rid

    def event(self, request: int, tokens: int) -> float:
        """One output received by the caller now; returns its time."""
        t = self.now()
        self._columns["event_time"].append(t)
        self._columns["event_request"].append(request)
        self._columns["event_tokens"].append(tokens)
        return t

    def probe(self, woke: float, lag: float) -> None:
        self._columns["probe_time"].append(woke)
        self._columns["probe_lag"].append(lag)

    def steps(self, rows: Iterable[Sequence[float]]) -> None:
        """Engine-core step rows (``STEP_COLUMNS``; times on the monotonic clock, absolute)."""
        for row in rows:
            times = [float(x) - self.origin for x in row[:3]]
            self._steps.append([*times, *(float(x) for x in row[3:])])

    def gc_callback(self, phase: str, info: dict[str, Any]) -> None:
        """For ``gc.callbacks``: one row per collection."""
        if phase == "start":
            self._gc_started = self.now()
            return
        if self._gc_started is None:
            return
        self._columns["gc_time"].append(self._gc_started)
        self._columns["gc_duration"].append(self.now() - self._gc_started)
        self._columns["gc_generation"].append(int(info.get("generation", -1)))
        self._columns["gc_collected"].append(int(info.get("collected", 0)))
        self._gc_started = None

    def watch_gc(self) -> Callable[[], None]:
        """Record collections from now on; returns the function that stops it."""
        gc.callbacks.append(self.gc_callback)
        return lambda: gc.callbacks.remove(self.gc_callback)

    def cut(self) -> Raw:
        """What was recorded since the previous cut (request ids keep counting)."""
        values: dict[str, Any] = {
            name: np.array(v, dtype=np.float64 if v.typecode == "d" else np.int64)
            for name, v in self._columns.items()
        }
        steps = np.asarray(self._steps, dtype=np.float64).reshape(-1, len(STEP_COLUMNS))
        raw = Raw(**values, steps=steps)
        self._reset()
        return raw


# Saved as microsecond deltas (monotonic: the loop appends them in clock order).
_DELTA_ENCODED = ("event_time", "probe_time")
# Saved as whole microseconds: a float64 of sub-microsecond noise compresses to nothing.
_MICROSECONDS = ("probe_lag", "gc_time", "gc_duration", "request_submitted")
_STEP_TIMES = 3  # the first columns of a step row are times


def _micros(values: Floats) -> Ints:
    # NaN (a step whose scheduling was not seen) becomes the minimum int64.
    return np.where(np.isnan(values), np.iinfo(np.int64).min,
                    np.round(np.nan_to_num(values) * MICROSECONDS)).astype(np.int64)


def _seconds(micros: Ints) -> Floats:
    seconds = micros.astype(np.float64) / MICROSECONDS
    seconds[micros == np.iinfo(np.int64).min] = np.nan
    return seconds


def _narrow(values: Ints) -> npt.NDArray[Any]:
    small = values.size == 0 or (values.min() >= -(2**31) and values.max() < 2**31)
    return values.astype(np.int32) if small else values


def save(path: Path, raw: Raw) -> None:
    arrays: dict[str, Any] = {}
    for f in fields(Raw):
        value = getattr(raw, f.name)
        if f.name in _DELTA_ENCODED:
            deltas = np.diff(_micros(value), prepend=np.int64(0))
            if deltas[1:].min(initial=0) < 0:
                raise ValueError(f"{f.name}: times must not decrease to be delta-encoded")
            arrays[f.name + "_us_delta"] = _narrow(deltas)
        elif f.name in _MICROSECONDS:
            arrays[f.name + "_us"] = _micros(value)
        elif f.name == "steps":
            arrays["step_times_us"] = _micros(value[:, :_STEP_TIMES])
            arrays["step_counts"] = _narrow(value[:, _STEP_TIMES:].astype(np.int64))
        else:
            arrays[f.name] = _narrow(value)
    np.savez_compressed(path, **arrays)


def _read(path: Path) -> Raw:
    with np.load(path) as data:
        values: dict[str, Any] = {}
        for f in fields(Raw):
            if f.name in _DELTA_ENCODED:
                micros = np.cumsum(data[f.name + "_us_delta"].astype(np.int64))
                values[f.name] = micros.astype(np.float64) / MICROSECONDS
            elif f.name in _MICROSECONDS:
                values[f.name] = _seconds(data[f.name + "_us"].astype(np.int64))
            elif f.name == "steps":
                times = _seconds(data["step_times_us"].astype(np.int64)).reshape(-1, _STEP_TIMES)
                counts = data["step_counts"].astype(np.float64).reshape(
                    times.shape[0], len(STEP_COLUMNS) - _STEP_TIMES)
                values[f.name] = np.hstack([times, counts])
            else:
                values[f.name] = data[f.name].astype(np.int64)
    return Raw(**values)


def load(paths: Sequence[Path]) -> Raw:
    """The files of one run, in the order given, as one :class:`Raw`."""
    parts = [_read(p) for p in paths]
    if not parts:
        raise ValueError("no raw files given")
    return Raw(**{
        f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(Raw)
    })
