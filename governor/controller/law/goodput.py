"""Goodput as the controller can see it: good requests per second, and demand. Pure arithmetic.

Goodput (DistServe's) counts a request as good when its time to first token meets the TTFT SLO
and its own inter-token quantile meets the ITL SLO. Prometheus has no per-request quantile, but
the latency histograms have buckets at exactly the SLO thresholds, so the controller reads
three good-event rates (``controller/queries.py``): first tokens per second within the TTFT
threshold, first tokens per second in all, and the share of inter-token gaps within the ITL
threshold. A prefill step stalls every running decode at once, so each request sees about the
engine-wide share of slow gaps; a request's own P99 fails once its share of slow gaps passes
1 %, and with a few hundred gaps per request that share scatters by about half a percent. So
the share of requests whose decode passes falls from 1 to 0 as the slow share goes from half
the allowance to two and a half times it:

>>> itl_pass_share(0.995, 0.99), itl_pass_share(0.99, 0.99), itl_pass_share(0.975, 0.99)
(1.0, 0.75, 0.0)
>>> round(good_per_second(ttft_good=10.0, itl_good_ratio=0.99, quantile=0.99), 2)
7.5

Demand is what enters: the requests that got their first token plus the growth of the queue.

>>> demand_per_second(ttft_all=12.0, waiting_growth=0.5)
12.5
"""

from __future__ import annotations

# The slow-gap share (in allowances, 1 - quantile) at which requests start and stop passing.
_PASS_ALL, _PASS_NONE = 0.5, 2.5


def itl_pass_share(itl_good_ratio: float, quantile: float) -> float:
    """Estimated share of requests whose own inter-token quantile meets the SLO."""
    allowance = 1.0 - quantile
    slow = max(0.0, 1.0 - itl_good_ratio) / allowance
    share = (_PASS_NONE - slow) / (_PASS_NONE - _PASS_ALL)
    return min(1.0, max(0.0, share))


def good_per_second(*, ttft_good: float, itl_good_ratio: float | None,
                    quantile: float) -> float:
    """Requests per second that start within the TTFT SLO and decode within the ITL SLO.

    Without a TTFT SLO, callers pass every first token as good; without an ITL reading decode
    counts as good.
    """
    passing = 1.0 if itl_good_ratio is None else itl_pass_share(itl_good_ratio, quantile)
    return max(0.0, ttft_good) * passing


def demand_per_second(*, ttft_all: float, waiting_growth: float | None) -> float:
    """Requests per second arriving: those served a first token plus the queue's growth."""
    return max(0.0, ttft_all) + max(0.0, waiting_growth or 0.0)


def share(good: float, demand: float) -> float | None:
    """Good requests as a share of demand (``None`` without demand to judge by)."""
    return None if demand <= 0 else min(1.0, good / demand)
