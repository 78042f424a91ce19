"""What Prometheus and Alertmanager would see of a virtual-time run, and when.

The benchmark's controller must observe the engine through the same windows and dead time as the
real stack: counters and histograms are *scraped* every ``scrape_interval``;
PromQL ``rate(x[w])`` at time ``t`` sees only the scrapes inside ``[t - w, t]``; the fast alert is
evaluated every ``evaluation_interval``, must hold for ``for``, and Alertmanager waits
``group_wait`` before the webhook. This module models exactly that, with Prometheus's own
``histogram_quantile`` interpolation, so the numbers the law sees are the numbers it would get.

>>> edges = (0.1, 0.2)
>>> histogram_quantile(0.5, edges, np.array([10.0, 20.0, 20.0]))
0.1
>>> histogram_quantile(0.99, edges, np.array([0.0, 0.0, 5.0]))
0.2
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


def histogram_quantile(q: float, edges: Sequence[float], cumulative: np.ndarray) -> float:
    """Prometheus's ``histogram_quantile`` over cumulative counts (the last one is ``+Inf``).

    Linear interpolation inside the bucket holding rank ``q * total``; the first bucket starts
    at 0; a rank in the ``+Inf`` bucket answers the highest finite edge; no observations → NaN.
    """
    total = float(cumulative[-1])
    if total <= 0 or math.isnan(total):
        return math.nan
    rank = q * total
    index = int(np.searchsorted(cumulative, rank, side="left"))
    if index >= len(edges):
        return float(edges[-1])
    upper = edges[index]
    lower = edges[index - 1] if index > 0 else 0.0
    below = float(cumulative[index - 1]) if index > 0 else 0.0
    in_bucket = float(cumulative[index]) - below
    if in_bucket <= 0:
        return float(upper)
    return lower + (upper - lower) * (rank - below) / in_bucket


def cumulative_counts(values: np.ndarray, edges: Sequence[float]) -> np.ndarray:
    """Observations → cumulative bucket counts ``le=edge…, le=+Inf`` (as a client library keeps)."""
    index = np.searchsorted(np.asarray(edges), values, side="left")
    counts = np.bincount(index, minlength=len(edges) + 1).astype(float)
    return np.cumsum(counts)


@dataclass(frozen=True, slots=True)
class Histogram:
    """An SLI's histogram as Prometheus stores it: its name and the edges its server exposes
    (the service's own, vLLM's, or the custom buckets of the spec)."""

    metric: str
    edges: tuple[float, ...]

    def as_dict(self) -> dict[str, object]:
        return {"metric": self.metric, "edges": list(self.edges)}


@dataclass
class Scrapes:
    """The time series Prometheus stores for one inference instance."""

    itl_edges: tuple[float, ...]
    ttft_edges: tuple[float, ...]
    times: list[float] = field(default_factory=list)
    itl: list[np.ndarray] = field(default_factory=list)  # cumulative bucket counters
    ttft: list[np.ndarray] = field(default_factory=list)
    counters: dict[str, list[float]] = field(default_factory=dict)
    gauges: dict[str, list[float]] = field(default_factory=dict)

    def add(self, at: float, itl: np.ndarray, ttft: np.ndarray, counters: dict[str, float],
            gauges: dict[str, float]) -> None:
        self.times.append(at)
        self.itl.append(itl)
        self.ttft.append(ttft)
        for name, value in counters.items():
            self.counters.setdefault(name, []).append(value)
        for name, value in gauges.items():
            self.gauges.setdefault(name, []).append(value)

    def _span(self, at: float, window: float) -> tuple[int, int] | None:
        """First and last scrape index in ``[at - window, at]`` (None: fewer than two)."""
        lo = int(np.searchsorted(self.times, at - window - 1e-9, side="left"))
        hi = int(np.searchsorted(self.times, at + 1e-9, side="right")) - 1
        return (lo, hi) if hi - lo >= 1 else None

    def quantile(self, q: float, which: str, at: float, window: float) -> float:
        """``histogram_quantile(q, sum(rate(<which>_bucket[window])))`` evaluated at ``at``."""
        span = self._span(at, window)
        if span is None:
            return math.nan
        series, edges = (self.itl, self.itl_edges) if which == "itl" else (self.ttft,
                                                                            self.ttft_edges)
        # rate() extrapolates every bucket by the same factor: the quantile only needs increases.
        return histogram_quantile(q, edges, series[span[1]] - series[span[0]])

    def bucket_rate(self, which: str, le: float, at: float, window: float) -> float:
        """``sum(rate(<which>_bucket{le="<le>"}[window]))`` (``le="+Inf"``: the count's rate);
        NaN where no bucket has that edge, as Prometheus would return no series."""
        span = self._span(at, window)
        series, edges = (self.itl, self.itl_edges) if which == "itl" else (self.ttft,
                                                                            self.ttft_edges)
        index = len(edges) if math.isinf(le) else next(
            (i for i, edge in enumerate(edges) if math.isclose(edge, le)), None)
        if span is None or index is None:
            return math.nan
        increase = float(series[span[1]][index] - series[span[0]][index])
        return increase / (self.times[span[1]] - self.times[span[0]])

    def rate(self, name: str, at: float, window: float) -> float:
        span = self._span(at, window)
        if span is None:
            return math.nan
        values = self.counters[name]
        return (values[span[1]] - values[span[0]]) / (self.times[span[1]] - self.times[span[0]])

    def gauge(self, name: str, at: float) -> float:
        """The gauge's last value at ``at``; NaN (no series, as Prometheus answers nothing)
        before its first scrape or for a gauge never scraped (a run without a gate has no
        slack)."""
        values = self.gauges.get(name)
        index = int(np.searchsorted(self.times, at + 1e-9, side="right")) - 1
        return values[index] if values is not None and index >= 0 else math.nan

    def deriv(self, name: str, at: float, window: float) -> float:
        """PromQL ``deriv``: the least-squares slope of the gauge over the window."""
        span = self._span(at, window)
        if span is None:
            return math.nan
        t = np.asarray(self.times[span[0]:span[1] + 1])
        y = np.asarray(self.gauges[name][span[0]:span[1] + 1])
        return float(np.polyfit(t - t[0], y, 1)[0])


@dataclass(frozen=True, slots=True)
class Pipeline:
    """Dead time between the engine and the controller (defaults: the generated stack's)."""

    scrape_interval_seconds: float = 5.0
    evaluation_interval_seconds: float = 5.0
    alert_window_seconds: float = 60.0  # the fast alert's rate() window
    alert_for_seconds: float = 30.0
    group_wait_seconds: float = 5.0
    resync_seconds: float = 10.0


@dataclass
class AlertState:
    """One fast alert (``…P99High``) through rule evaluation and Alertmanager."""

    pipeline: Pipeline
    threshold: float
    quantile: float
    pending_since: float | None = None
    firing: bool = False
    episodes: list[tuple[float, float | None]] = field(default_factory=list)
    notifications: list[float] = field(default_factory=list)

    def evaluate(self, scrapes: Scrapes, at: float) -> float | None:
        """Evaluate at ``at``; returns when the webhook would reach the controller, if it would.

        ``episodes`` records when the breach was observable (the expression first true) and
        when it cleared: breach-to-recovery is measured on them.
        """
        value = scrapes.quantile(self.quantile, "itl", at, self.pipeline.alert_window_seconds)
        breaching = not math.isnan(value) and value > self.threshold
        if breaching and self.pending_since is None:
            self.pending_since = at
            self.episodes.append((at, None))
        if not breaching:
            if self.pending_since is not None and self.episodes:
                start, _ = self.episodes[-1]
                self.episodes[-1] = (start, at)
            self.pending_since, self.firing = None, False
            return None
        assert self.pending_since is not None
        if not self.firing and at - self.pending_since >= self.pipeline.alert_for_seconds:
            self.firing = True
            delivered = at + self.pipeline.group_wait_seconds
            self.notifications.append(delivered)
            return delivered
        return None
