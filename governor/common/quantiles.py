"""Sample percentiles without numpy, equal to ``numpy.percentile``'s default (linear) method.

The simulator scores its windows with them, and a plain install of ``governor-slo`` does not
pull numpy, so the arithmetic is numpy's own, step for step (the index ``(n - 1) * q``, and the
interpolation from the nearer neighbour), which makes the results equal to the last bit::

    >>> percentiles([1.0, 2.0, 3.0, 4.0], [0, 50, 100])
    [1.0, 2.5, 4.0]
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def percentiles(values: Iterable[float], percents: Sequence[float]) -> list[float]:
    """Each of ``percents`` (0 to 100) of ``values``; NaN for every one when there are none."""
    ordered = sorted(values)
    if not ordered:
        return [math.nan] * len(percents)
    return [_at(ordered, p / 100.0) for p in percents]


def _at(ordered: Sequence[float], q: float) -> float:
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"percentiles must be within [0, 100], got {q * 100}")
    last = len(ordered) - 1
    virtual = last * q
    if virtual >= last:
        return float(ordered[last])
    below = math.floor(virtual)
    low, high = float(ordered[below]), float(ordered[below + 1])
    gamma = virtual - below
    diff = high - low
    # numpy interpolates from the nearer end, which is exact at both ends.
    return high - diff * (1 - gamma) if gamma >= 0.5 else low + diff * gamma
