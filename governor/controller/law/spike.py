"""The prefill-spike model the law reasons with (docs/h200-measurements.md). Pure arithmetic.

A decode step that also carries a prefill chunk of ``b`` tokens takes about
``median + cost * b`` seconds, where ``median`` is the plain decode step (the median inter-token
latency) and ``cost`` the step time per prefill token; every decoding request sees that whole step
as one inter-token gap. So the height of the inter-token latency spikes is set by the budget,
while their *frequency* — the fraction of steps that carry prefill — grows as the budget shrinks.
The tail quantile is a spike only when spikes are more frequent than ``1 - quantile``: that is
why P99 is not monotonic in the budget, and why the law verifies every change.

>>> round(spike_seconds(0.007, 25e-6, 8192), 3)
0.212
>>> round(budget_for_spike(0.09, 0.007, 25e-6))
3320
"""

from __future__ import annotations

import math


def spike_seconds(median_seconds: float, cost_seconds_per_token: float, budget: float) -> float:
    """Step time of a decode step that carries a full prefill chunk of ``budget`` tokens."""
    return median_seconds + cost_seconds_per_token * budget


def learn_cost(tail_seconds: float, median_seconds: float, budget: int) -> float | None:
    """Step time per prefill token, read off a spike-dominated tail (``None`` if it is not).

    During a breach the tail quantile sits on the spikes, and the spikes are at most
    ``median + cost * budget`` high, so this is a lower bound on the true cost: a cut computed
    from it may fall short, never overshoot, and the next verdict corrects it.
    """
    if budget <= 0 or not tail_seconds > median_seconds:
        return None
    return (tail_seconds - median_seconds) / budget


def cost_from_mean(
    mean_seconds: float, median_seconds: float, prompt_tokens_per_second: float
) -> float | None:
    """Step time per prefill token from the mean inter-token latency (``None``: no signal).

    Prefill takes ``rate * cost`` of the engine's time, so the mean step is
    ``median / (1 - rate * cost)`` and each step carries ``rate * mean`` prompt tokens:
    ``cost = (mean - median) / (rate * mean)``. Unlike :func:`learn_cost` it does not depend on
    how full the chunks were, so it is not biased low when prompts are shorter than the budget.

    >>> round(cost_from_mean(0.016, 0.0094, 16600) * 1e6, 1)
    24.8
    """
    if prompt_tokens_per_second <= 0 or not mean_seconds > median_seconds:
        return None
    return (mean_seconds - median_seconds) / (prompt_tokens_per_second * mean_seconds)


def budget_for_spike(
    aim_seconds: float, median_seconds: float, cost_seconds_per_token: float
) -> float | None:
    """The largest budget whose spikes stay under ``aim_seconds``; ``None`` if decode alone
    is slower than that."""
    if cost_seconds_per_token <= 0 or median_seconds >= aim_seconds:
        return None
    return (aim_seconds - median_seconds) / cost_seconds_per_token


def prefill_busy_fraction(prompt_tokens_per_second: float, cost_seconds_per_token: float) -> float:
    """Fraction of the engine's time spent on prefill at this prompt arrival rate."""
    return prompt_tokens_per_second * cost_seconds_per_token


def min_budget_for_prefill(
    prompt_tokens_per_second: float,
    median_seconds: float,
    cost_seconds_per_token: float,
    headroom: float,
) -> float:
    """The smallest budget whose prefill capacity covers ``headroom`` times the prompt arrival rate.

    A budget ``b`` prefills at most ``b / (median + cost * b)`` tokens per second; below the
    returned value prompts queue up and time to first token grows without bound. ``inf`` when no
    budget suffices (prefill alone would saturate the engine).
    """
    demand = headroom * prompt_tokens_per_second
    if demand <= 0:
        return 0.0
    share = demand * cost_seconds_per_token
    if share >= 1.0:
        return math.inf
    return demand * median_seconds / (1.0 - share)
