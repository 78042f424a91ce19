"""Scores of one run: SLO attainment, goodput, breach-to-recovery. Pure functions over samples.

* **Attainment**: the fraction of fixed windows in which the inter-token P99 *and* the TTFT P99
  (exact, over every sample emitted in the window) meet their SLOs. A window without a first
  token has no TTFT to miss.
* **Goodput** (DistServe's, per request): requests per second whose TTFT meets its SLO and whose
  own inter-token P99 meets the inter-token SLO.
* **Breach-to-recovery**: from the first rule evaluation at which the fast alert's expression is
  true (the breach becomes observable) to the first evaluation at which it is false again.

>>> windows = [WindowScore(0, 30, 0.05, 0.4), WindowScore(30, 60, 0.2, 0.4)]
>>> attainment(windows, itl_slo=0.12, ttft_slo=1.0)
0.5
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class RequestOutcome:
    arrival: float
    kind: str
    ttft: float  # NaN if it never produced a token
    itl_tail: float  # the request's own inter-token quantile (NaN with fewer than 2 tokens)
    finished: bool


@dataclass(frozen=True, slots=True)
class WindowScore:
    start: float
    end: float
    itl_tail: float  # NaN without samples
    ttft_tail: float

    def meets(self, itl_slo: float, ttft_slo: float | None) -> bool:
        itl_ok = math.isnan(self.itl_tail) or self.itl_tail <= itl_slo
        ttft_ok = ttft_slo is None or math.isnan(self.ttft_tail) or self.ttft_tail <= ttft_slo
        return itl_ok and ttft_ok


def window_scores(itl: Sequence[np.ndarray], ttft: Sequence[np.ndarray], width: float,
                  start: float, itl_q: float, ttft_q: float) -> list[WindowScore]:
    """Exact tails per window from the samples emitted in each (index k → [start + k·width…))."""
    out = []
    for k, (i, t) in enumerate(zip(itl, ttft, strict=True)):
        lo = start + k * width
        out.append(WindowScore(lo, lo + width, _quantile(i, itl_q), _quantile(t, ttft_q)))
    return out


def windows_from_times(requests: Iterable[tuple[float, Sequence[float]]], *, width: float,
                       end: float, itl_q: float, ttft_q: float) -> list[WindowScore]:
    """Exact per-window tails of every sample ``requests`` emitted: each request's arrival and
    the times its outputs reached the caller (an inter-token gap counts in the window of its
    later output, a first token in the window it arrived in). Simulated and real runs are
    scored by this one function."""
    count = int(end // width)
    itl_t, itl_v, ttft_t, ttft_v = [], [], [], []
    for arrival, token_times in requests:
        times = np.asarray(token_times)
        if times.size:
            ttft_t.append(times[:1])
            ttft_v.append(times[:1] - arrival)
        if times.size > 1:
            itl_t.append(times[1:])
            itl_v.append(np.diff(times))
    return window_scores(_bins(itl_t, itl_v, width, count), _bins(ttft_t, ttft_v, width, count),
                         width, 0.0, itl_q, ttft_q)


def _bins(times: list[np.ndarray], values: list[np.ndarray], width: float,
          count: int) -> list[np.ndarray]:
    t = np.concatenate(times) if times else np.zeros(0)
    v = np.concatenate(values) if values else np.zeros(0)
    index = np.floor(t / width).astype(int)
    keep = index < count
    index, v = index[keep], v[keep]
    order = np.argsort(index, kind="stable")
    splits = np.searchsorted(index[order], np.arange(1, count))
    return np.split(v[order], splits)


def _quantile(samples: np.ndarray, q: float) -> float:
    # "linear" is numpy's default and Prometheus's summary-free reading of an exact sample set.
    return float(np.quantile(samples, q)) if samples.size else math.nan


def attainment(windows: Sequence[WindowScore], *, itl_slo: float,
               ttft_slo: float | None) -> float:
    if not windows:
        return math.nan
    return sum(w.meets(itl_slo, ttft_slo) for w in windows) / len(windows)


@dataclass(frozen=True, slots=True)
class Missed:
    """The share of windows in which each SLO failed (``ttft`` None: no TTFT SLO), so a summary
    says which one a low attainment is made of."""

    itl: float
    ttft: float | None

    def as_dict(self) -> dict[str, float | None]:
        return {"itl": round(self.itl, 4),
                "ttft": None if self.ttft is None else round(self.ttft, 4)}


def missed(windows: Sequence[WindowScore], *, itl_slo: float, ttft_slo: float | None) -> Missed:
    """The share of windows over each SLO's threshold (a window without first tokens misses no
    TTFT):

    >>> missed([WindowScore(0, 30, 0.05, 2.0), WindowScore(30, 60, 0.2, 0.4)],
    ...        itl_slo=0.12, ttft_slo=1.0)
    Missed(itl=0.5, ttft=0.5)
    """
    if not windows:
        return Missed(math.nan, None if ttft_slo is None else math.nan)
    itl = sum(not w.meets(itl_slo, None) for w in windows) / len(windows)
    if ttft_slo is None:
        return Missed(itl, None)
    late = sum(not math.isnan(w.ttft_tail) and w.ttft_tail > ttft_slo for w in windows)
    return Missed(itl, late / len(windows))


def goodput(outcomes: Sequence[RequestOutcome], *, start: float, end: float, itl_slo: float,
            ttft_slo: float | None) -> float:
    """Good requests per second among those that arrived in ``[start, end)``."""
    good = sum(
        1 for o in outcomes
        if start <= o.arrival < end and o.finished
        and (ttft_slo is None or o.ttft <= ttft_slo)
        and (math.isnan(o.itl_tail) or o.itl_tail <= itl_slo)
    )
    return good / (end - start)


def request_tail(token_times: Sequence[float], q: float) -> float:
    """A request's own inter-token quantile from its token timestamps."""
    if len(token_times) < 2:
        return math.nan
    return float(np.quantile(np.diff(np.asarray(token_times)), q))


@dataclass(frozen=True, slots=True)
class Episode:
    observable_at: float
    recovered_at: float | None  # None: still breaching when the run ended

    @property
    def seconds(self) -> float | None:
        return None if self.recovered_at is None else self.recovered_at - self.observable_at


def episodes(spans: Sequence[tuple[float, float | None]]) -> list[Episode]:
    return [Episode(start, end) for start, end in spans]


def series_episodes(series: Sequence[tuple[float, float]], threshold: float) -> list[Episode]:
    """Runs of a sampled series above ``threshold``: observable at the first sample above it,
    recovered at the first sample back at or under it (NaN — no data — ends nothing).

    >>> series_episodes([(0, 0.1), (10, 0.2), (20, 0.3), (30, 0.1), (40, 0.2)], 0.12)
    [Episode(observable_at=10, recovered_at=30), Episode(observable_at=40, recovered_at=None)]
    """
    found: list[Episode] = []
    start: float | None = None
    for at, value in series:
        if math.isnan(value):
            continue
        if value > threshold and start is None:
            start = at
        elif value <= threshold and start is not None:
            found.append(Episode(start, at))
            start = None
    if start is not None:
        found.append(Episode(start, None))
    return found


@dataclass(frozen=True, slots=True)
class OverloadEpisode:
    """A span the law judged overloaded, and the replicas it advised meanwhile."""

    start: float
    end: float | None  # None: still overloaded when the run ended
    replicas_max: int
    replicas_median: int


def overload_episodes(samples: Sequence[tuple[float, bool, int]],
                      run_end: float) -> list[OverloadEpisode]:
    """Runs of passes judged overloaded (each pass: time, overloaded?, replicas advised).

    >>> overload_episodes([(0, False, 1), (10, True, 1), (20, True, 3), (30, True, 2),
    ...                    (40, False, 1)], 60)
    [OverloadEpisode(start=10, end=40, replicas_max=3, replicas_median=2)]
    """
    found: list[OverloadEpisode] = []
    start: float | None = None
    replicas: list[int] = []
    for at, overloaded, advised in [*samples, (run_end, False, 1)]:
        if overloaded:
            start = at if start is None else start
            replicas.append(advised)
        elif start is not None:
            end = None if at >= run_end and samples and samples[-1][1] else at
            found.append(OverloadEpisode(start, end, max(replicas),
                                         math.ceil(float(np.median(replicas)))))
            start, replicas = None, []
    return found


def worst_recovery(found: Sequence[Episode], run_end: float) -> float | None:
    """The longest breach-to-recovery; an unrecovered one counts until the end of the run."""
    if not found:
        return None
    return max((e.recovered_at if e.recovered_at is not None else run_end) - e.observable_at
               for e in found)
