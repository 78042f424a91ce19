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
from collections.abc import Sequence
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


def _quantile(samples: np.ndarray, q: float) -> float:
    # "linear" is numpy's default and Prometheus's summary-free reading of an exact sample set.
    return float(np.quantile(samples, q)) if samples.size else math.nan


def attainment(windows: Sequence[WindowScore], *, itl_slo: float,
               ttft_slo: float | None) -> float:
    if not windows:
        return math.nan
    return sum(w.meets(itl_slo, ttft_slo) for w in windows) / len(windows)


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


def worst_recovery(found: Sequence[Episode], run_end: float) -> float | None:
    """The longest breach-to-recovery; an unrecovered one counts until the end of the run."""
    if not found:
        return None
    return max((e.recovered_at if e.recovered_at is not None else run_end) - e.observable_at
               for e in found)
