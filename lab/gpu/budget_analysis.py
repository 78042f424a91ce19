"""Windows of a ``budget_tables`` run → the H200 budget-vs-latency cells, pure.

A window is a stretch of one workload at one budget (``Window``). From the raw samples
(:class:`budget_recorder.Raw`) :func:`window_stats` computes what the original H200 run
reports — the decoders' ITL P50/P90/P99/max per output event and the long prompts' TTFT
P50/P99 — and what the original H200 run could not tell
apart: merged events, the loop-lag probe, garbage-collection passes and the engine core's own
step times. :func:`render` lays repetitions next to the original H200 run's figures. ``python -m
lab.gpu.budget_analysis DIR`` re-renders a run's tables from its saved files.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lab.gpu.budget_recorder import Floats, Ints, Kind, Raw, load

MS = 1e-3
COLUMNS = ("ITL p50", "ITL p90", "ITL p99", "ITL max", "TTFT p50", "TTFT p99")
# docs/h200-measurements.md, one run per row (ms), in COLUMNS order.
REFERENCE: dict[tuple[int, int], tuple[float, ...]] = {
    (2000, 8192): (7.37, 11.3, 35.4, 41.3, 61.1, 68.5),
    (2000, 2048): (7.40, 10.5, 36.6, 55.7, 68.5, 76.5),
    (2000, 512): (7.49, 13.9, 15.8, 17.4, 85.0, 94.0),
    (7000, 8192): (6.73, 8.70, 33.4, 194.8, 199.1, 206.7),
    (7000, 2048): (6.76, 10.3, 55.5, 93.0, 214.8, 233.6),
    (7000, 512): (6.85, 15.4, 19.3, 28.1, 285.3, 291.1),
}
# The cells the simulator's calibration test lists as expected failures.
DISPUTED = {((2000, 8192), "ITL p99"), ((2000, 8192), "ITL max"), ((2000, 2048), "ITL p99"),
            ((7000, 2048), "ITL max")}
# A step that carries at least this share of a long prompt is "its" prefill step.
LONG_STEP_SHARE = 0.75


@dataclass(frozen=True)
class Window:
    """One measured stretch: ``prompt_tokens`` long prompts at ``budget``, repetition ``rep``."""

    prompt_tokens: int
    budget: int
    rep: int
    start: float
    end: float


@dataclass(frozen=True)
class WindowStats:
    window: Window
    cells_ms: tuple[float, ...]  # COLUMNS order
    itl_samples: int
    ttft_samples: int
    merged_events: int  # decoder events that carried more than one token
    probe_lag_p99_ms: float
    probe_lag_max_ms: float
    gc_passes: int
    gc_longest_ms: float
    steps: int
    long_prefill_steps: int
    long_prefill_step_median_ms: float
    long_prefill_step_max_ms: float
    longest_step_ms: float


def _percentiles_ms(values: Floats, qs: Sequence[float]) -> list[float]:
    if values.size == 0:
        return [float("nan")] * len(qs)
    return [float(v) / MS for v in np.percentile(values, qs)]


@dataclass(frozen=True)
class Indexed:
    """A run's samples with what every window needs computed once (a run has millions of
    events; sorting them per window would take minutes)."""

    raw: Raw
    event_kind: Ints  # the kind of each event's request
    event_gap: Floats  # since the previous event of the same request; NaN for its first
    first_output: dict[int, float]  # request id -> time of its first event
    step_duration: Floats


def _kind_of_event(raw: Raw) -> Ints:
    # Request ids count up from 0 in submission order, and a request's row precedes its events.
    index = np.clip(np.searchsorted(raw.request_id, raw.event_request), 0, raw.request_id.size - 1)
    return raw.request_kind[index] if raw.request_id.size else np.zeros_like(raw.event_request)


def step_durations(raw: Raw) -> Floats:
    """Each step's duration on the engine core's clock: the time from the previous step's
    output (or from this one's scheduling, if the engine was waiting) to this one's output."""
    ready = raw.step_column("output_ready")
    scheduled = raw.step_column("scheduled")
    previous = np.concatenate([[-np.inf], ready[:-1]])
    began = np.fmax(previous, np.nan_to_num(scheduled, nan=-np.inf))
    return np.asarray(ready - began, dtype=np.float64)


def index(raw: Raw) -> Indexed:
    # A stable sort by request keeps each request's events in time order.
    order = np.lexsort((raw.event_time, raw.event_request))
    requests = raw.event_request[order]
    times = raw.event_time[order]
    first = np.ones(requests.size, dtype=bool)
    first[1:] = requests[1:] != requests[:-1]
    gaps = np.empty(requests.size, dtype=np.float64)
    gaps[1:] = times[1:] - times[:-1]
    gaps[first] = np.nan
    event_gap = np.empty_like(gaps)
    event_gap[order] = gaps
    first_output = dict(zip(requests[first].tolist(), times[first].tolist(), strict=True))
    return Indexed(raw, _kind_of_event(raw), event_gap, first_output, step_durations(raw))


def itl_samples(ix: Indexed, start: float, end: float, kind: Kind = Kind.DECODER) -> Floats:
    """Gaps between consecutive output events of one request (requests of ``kind``), for the
    events delivered in ``[start, end)``; a request's first event (its TTFT) is not one."""
    keep = _in(ix.raw.event_time, start, end) & (ix.event_kind == int(kind))
    gaps = ix.event_gap[keep]
    return np.asarray(gaps[~np.isnan(gaps)], dtype=np.float64)


def ttft_samples(ix: Indexed, start: float, end: float, kind: Kind = Kind.LONG) -> Floats:
    """Submission to first output of the requests of ``kind`` submitted in ``[start, end)``
    whose first output came before ``end`` (after it the next window's budget may apply)."""
    raw = ix.raw
    chosen = (raw.request_kind == int(kind)) & _in(raw.request_submitted, start, end)
    values = [
        ix.first_output[rid] - submitted
        for rid, submitted in zip(raw.request_id[chosen].tolist(),
                                  raw.request_submitted[chosen].tolist(), strict=True)
        if ix.first_output.get(rid, end) < end
    ]
    return np.asarray(values, dtype=np.float64)


def _in(times: Floats, start: float, end: float) -> np.ndarray[Any, np.dtype[np.bool_]]:
    return (times >= start) & (times < end)


def window_stats(ix: Indexed, window: Window) -> WindowStats:
    raw, start, end = ix.raw, window.start, window.end
    itls = itl_samples(ix, start, end)
    ttfts = ttft_samples(ix, start, end)
    cells = (*_percentiles_ms(itls, (50, 90, 99, 100)), *_percentiles_ms(ttfts, (50, 99)))
    decoder_events = _in(raw.event_time, start, end) & (ix.event_kind == Kind.DECODER)
    lags = raw.probe_lag[_in(raw.probe_time, start, end)]
    gcs = _in(raw.gc_time, start, end)
    in_window = _in(raw.step_column("output_ready"), start, end)
    durations = ix.step_duration[in_window]
    prefill = raw.step_column("prefill_tokens")[in_window]
    long_steps = durations[prefill >= LONG_STEP_SHARE * min(window.prompt_tokens, window.budget)]
    lag_p99, lag_max = _percentiles_ms(lags, (99, 100))
    long_median, long_max = _percentiles_ms(long_steps, (50, 100))
    return WindowStats(
        window=window, cells_ms=tuple(cells), itl_samples=int(itls.size),
        ttft_samples=int(ttfts.size),
        merged_events=int(np.count_nonzero(raw.event_tokens[decoder_events] > 1)),
        probe_lag_p99_ms=lag_p99, probe_lag_max_ms=lag_max, gc_passes=int(np.count_nonzero(gcs)),
        gc_longest_ms=float(raw.gc_duration[gcs].max(initial=0.0)) / MS,
        steps=int(durations.size), long_prefill_steps=int(long_steps.size),
        long_prefill_step_median_ms=long_median, long_prefill_step_max_ms=long_max,
        longest_step_ms=float(durations.max(initial=0.0)) / MS,
    )


@dataclass(frozen=True)
class LoneRow:
    """A prompt alone (1 output token) on an idle engine or among the decoders only."""

    setting: str  # "idle" or "busy"
    prompt_tokens: int
    ttft_ms: list[float]
    prefill_step_ms: list[float]  # the engine core's longest step while it was in flight
    decoder_max_itl_ms: list[float]  # the decoders' longest gap meanwhile (busy only)


# The first decoder event after a prefill step arrives within this of the lone prompt's token.
_AFTER_FIRST_TOKEN = 0.02


def lone_rows(ix: Indexed) -> list[LoneRow]:
    raw, firsts = ix.raw, ix.first_output
    ready = raw.step_column("output_ready")
    durations = ix.step_duration
    rows: dict[tuple[str, int], LoneRow] = {}
    for rid, kind, length, submitted in zip(
        raw.request_id.tolist(), raw.request_kind.tolist(),
        raw.request_prompt_tokens.tolist(), raw.request_submitted.tolist(), strict=True,
    ):
        if kind not in (Kind.LONE_IDLE, Kind.LONE_BUSY) or rid not in firsts:
            continue
        first = firsts[rid]
        setting = "idle" if kind == Kind.LONE_IDLE else "busy"
        row = rows.setdefault((setting, length), LoneRow(setting, length, [], [], []))
        row.ttft_ms.append((first - submitted) / MS)
        steps = durations[(ready >= submitted) & (ready <= first)]
        if steps.size:
            row.prefill_step_ms.append(float(steps.max()) / MS)
        gaps = itl_samples(ix, submitted, first + _AFTER_FIRST_TOKEN)
        if gaps.size:
            row.decoder_max_itl_ms.append(float(gaps.max()) / MS)
    return list(rows.values())


def _spread(values: Sequence[float]) -> str:
    if not values:
        return "-"
    return (f"{_cell(float(np.median(values)))} ({_cell(min(values))}-{_cell(max(values))}, "
            f"n={len(values)})")


def render_lone(rows: Sequence[LoneRow]) -> str:
    lines = ["| lone prompt | engine | TTFT ms: median (min-max, n) | its longest engine step ms "
             "| decoders' longest ITL meanwhile ms |",
             "| ---: | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r.prompt_tokens} | {r.setting} | {_spread(r.ttft_ms)} | "
                     f"{_spread(r.prefill_step_ms)} | {_spread(r.decoder_max_itl_ms)} |")
    return "\n".join(lines)


@dataclass(frozen=True)
class PromptRow:
    """What one long prompt did to the decoders, by workload and budget (``budget`` 0: lone)."""

    setting: str  # "stream", "idle" or "busy"
    prompt_tokens: int
    budget: int
    loop_stall_ms: list[float]  # the loop-lag probe's longest lag just after submission
    held_step_ms: list[float]  # the step before the prompt's first chunk (see first_chunks)
    first_chunk_step_ms: list[float]


# A prompt's tokenization stalls the loop right after submission; 40 ms holds a 7000-token one.
_STALL_SECONDS = 0.04
# The first step after submission carrying at least this share of min(prompt, budget) as
# prefill is the prompt's first chunk (a decoder's 128-token prompt never reaches it).
_CHUNK_SHARE = 0.6
LONE_BUDGET = 8192  # the lone prompts run at the start budget


def _settings(raw: Raw, windows: Sequence[Window]) -> list[tuple[int, str, int, int, float]]:
    """(request, setting, prompt tokens, budget, submitted) of every long or lone prompt;
    stream prompts only inside a window, where the budget is known."""
    out: list[tuple[int, str, int, int, float]] = []
    for rid, kind, length, submitted in zip(
        raw.request_id.tolist(), raw.request_kind.tolist(),
        raw.request_prompt_tokens.tolist(), raw.request_submitted.tolist(), strict=True,
    ):
        if kind == Kind.LONG:
            inside = [w for w in windows if w.start <= submitted < w.end]
            if inside:
                out.append((rid, "stream", length, inside[0].budget, submitted))
        elif kind in (Kind.LONE_IDLE, Kind.LONE_BUSY):
            setting = "idle" if kind == Kind.LONE_IDLE else "busy"
            out.append((rid, setting, length, LONE_BUDGET, submitted))
    return out


def prompt_rows(ix: Indexed, windows: Sequence[Window]) -> list[PromptRow]:
    """Per long prompt: how long the frontend's loop stalled when it was submitted, and how the
    engine core's steps around its first chunk went. With async scheduling the engine core
    prepares step k+1 before it hands out step k's outputs, so a first chunk's preparation
    shows up as a *held* step k: a decode step that takes far longer than 7 ms."""
    raw = ix.raw
    ready = raw.step_column("output_ready")
    prefill = raw.step_column("prefill_tokens")
    rows: dict[tuple[str, int, int], PromptRow] = {}
    for rid, setting, length, budget, submitted in _settings(raw, windows):
        row = rows.setdefault((setting, length, budget),
                              PromptRow(setting, length, budget, [], [], []))
        near = _in(raw.probe_time, submitted, submitted + _STALL_SECONDS)
        if near.any():
            row.loop_stall_ms.append(float(raw.probe_lag[near].max()) / MS)
        first = ix.first_output.get(rid)
        if first is None:
            continue
        candidates = np.nonzero((ready >= submitted) & (ready <= first)
                                & (prefill >= _CHUNK_SHARE * min(length, budget)))[0]
        if candidates.size and candidates[0] > 0:
            chunk = int(candidates[0])
            row.held_step_ms.append(float(ix.step_duration[chunk - 1]) / MS)
            row.first_chunk_step_ms.append(float(ix.step_duration[chunk]) / MS)
    return list(rows.values())


def render_prompts(rows: Sequence[PromptRow]) -> str:
    lines = ["| long prompt | setting | budget | loop stall at submission ms | step before its "
             "first chunk (held) ms | first chunk step ms |",
             "| ---: | --- | ---: | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r.prompt_tokens} | {r.setting} | {r.budget} | {_spread(r.loop_stall_ms)} "
                     f"| {_spread(r.held_step_ms)} | {_spread(r.first_chunk_step_ms)} |")
    return "\n".join(lines)


def windows_of(summary: dict[str, Any]) -> list[Window]:
    return [Window(**w) for w in summary["windows"]]


def _cell(value: float) -> str:
    if value != value:  # NaN: no sample
        return "-"
    return f"{value:.1f}" if value >= 100 else f"{value:.2f}"


def render_cells(stats: Sequence[WindowStats]) -> list[str]:
    """The original H200 run's figure and every repetition's, per cell; the four disputed cells
    marked."""
    lines = ["| workload | budget | figure | the original run | repetitions | min-max | "
             "original in range |",
             "| --- | ---: | --- | ---: | --- | ---: | --- |"]
    groups: dict[tuple[int, int], list[WindowStats]] = {}
    for s in stats:
        groups.setdefault((s.window.prompt_tokens, s.window.budget), []).append(s)
    for key, reps in groups.items():
        reference = REFERENCE.get(key)
        for i, column in enumerate(COLUMNS):
            values = [r.cells_ms[i] for r in reps]
            ref = reference[i] if reference else float("nan")
            low, high = min(values), max(values)
            if reference is None:
                verdict = "-"
            elif low <= ref <= high:
                verdict = "yes"
            else:
                verdict = f"no ({ref / np.median(values):.2f}x)"
            mark = " **(disputed)**" if (key, column) in DISPUTED else ""
            lines.append(
                f"| {key[0]} | {key[1]} | {column}{mark} | {_cell(ref)} | "
                f"{' / '.join(_cell(v) for v in values)} | {_cell(low)}-{_cell(high)} | {verdict} |"
            )
    return lines


def render_mechanisms(stats: Sequence[WindowStats]) -> list[str]:
    """Per window, what separates a long step from a stalled loop."""
    lines = ["| workload | budget | rep | ITL n | merged events | long-prefill steps: n, median, "
             "max ms | longest step ms | loop lag p99 / max ms | gc passes (longest ms) |",
             "| --- | ---: | ---: | ---: | ---: | --- | ---: | --- | --- |"]
    for s in stats:
        w = s.window
        lines.append(
            f"| {w.prompt_tokens} | {w.budget} | {w.rep} | {s.itl_samples} | {s.merged_events} | "
            f"{s.long_prefill_steps}, {_cell(s.long_prefill_step_median_ms)}, "
            f"{_cell(s.long_prefill_step_max_ms)} | {_cell(s.longest_step_ms)} | "
            f"{_cell(s.probe_lag_p99_ms)} / {_cell(s.probe_lag_max_ms)} | "
            f"{s.gc_passes} ({_cell(s.gc_longest_ms)}) |"
        )
    return lines


def render(stats: Sequence[WindowStats]) -> str:
    return "\n".join([*render_cells(stats), "", *render_mechanisms(stats)])


def stats_as_json(stats: Iterable[WindowStats]) -> list[dict[str, Any]]:
    return [asdict(s) for s in stats]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lab.gpu.budget_analysis",
        description="Re-render a budget_tables run's tables from its saved files.",
    )
    parser.add_argument("directory", type=Path, help="where budget_tables wrote its files")
    args = parser.parse_args(argv)
    summary_path = args.directory / "budget_summary.json"
    try:
        summary = json.loads(summary_path.read_text())
        raw = load([args.directory / name for name in summary["raw_files"]])
    except (OSError, ValueError, KeyError) as error:
        print(f"budget_analysis: cannot read the run in {args.directory}: {error}",
              file=sys.stderr)
        return 2
    ix = index(raw)
    windows = windows_of(summary)
    print(render([window_stats(ix, w) for w in windows]))
    print()
    print(render_lone(lone_rows(ix)))
    print()
    print(render_prompts(prompt_rows(ix, windows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
