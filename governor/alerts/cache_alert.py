"""Cache health: vLLM's prefix-cache hit ratio falling low, as a health alert row.

vLLM counts the prompt tokens it looked up in its prefix cache and those it found; their ratio is
what shared system prompts and multi-turn chats save in prefill. It differs by workload, so by
default the alert compares each engine with its own recent past (``alerting.prefix_cache`` in
the spec: a share of its median over a baseline, or a fixed floor), and an engine that looks up
few tokens never fires: a quiet server's ratio is noise::

    alert = prefix_cache_alert(spec.targets.inference, spec.alerting.prefix_cache)
"""

from __future__ import annotations

from decimal import Decimal
from typing import Final

from governor.alerts.health_alert import (
    MINUTE,
    WINDOW,
    HealthAlert,
    Values,
    by_target,
    scraped,
    series,
)
from governor.alerts.slo_tests import cumulative
from governor.contracts.endpoints import INFERENCE
from governor.contracts.metrics import vllm
from governor.contracts.metrics.slo import SEVERITY_TICKET
from governor.contracts.promql import Selector, format_duration, format_number, rate, sum_by
from governor.slo.fleet import PREFIX_CACHE_BASELINE_STEP, PrefixCacheAlert, Target

NAME: Final = "VllmPrefixCacheHitRatioLow"
# The scenario: healthy this many minutes (the baseline it builds), then the hit ratio drops.
HEALTHY_MINUTES: Final = 60
_HITS = vllm.PREFIX_CACHE_HITS.total
_QUERIES = vllm.PREFIX_CACHE_QUERIES.total


def _looked_up(target: Target) -> str:
    return sum_by(by_target(target, vllm.LABEL_MODEL),
                  rate(Selector(_QUERIES, target.matchers()), WINDOW))


def hit_ratio(target: Target) -> str:
    """Each engine's prompt tokens found in the prefix cache over those looked up."""
    found = sum_by(by_target(target, vllm.LABEL_MODEL),
                   rate(Selector(_HITS, target.matchers()), WINDOW))
    return f"(\n{found}\n/\n{_looked_up(target)}\n)"


def busy(target: Target, option: PrefixCacheAlert) -> str:
    """The engines that look up enough tokens for their ratio to mean something."""
    return f"{_looked_up(target)} >= {format_number(option.min_queried_tokens_per_second)}"


def threshold(target: Target, option: PrefixCacheAlert) -> str:
    """What the ratio is compared with: the fixed floor, or a share of the median of the ratio
    while busy over the baseline."""
    if option.below is not None:
        return format_number(option.below)
    baseline = format_duration(option.baseline_seconds)
    return (f"{format_number(option.below_baseline or 0)} * quantile_over_time(0.5, (\n"
            f"{hit_ratio(target)}\nand\n{busy(target, option)}\n)"
            f"[{baseline}:{PREFIX_CACHE_BASELINE_STEP}])")


def _what(option: PrefixCacheAlert) -> str:
    if option.below is not None:
        return f"below {format_number(option.below * 100)}%"
    return (f"below {format_number(option.below_baseline or 0)} times its median of the last "
            f"{format_duration(option.baseline_seconds)}")


def _counter(per_minute: Decimal, then: Decimal | None = None) -> Values:
    """A counter growing ``per_minute``, then ``then`` per minute after the healthy stretch."""
    if then is None:
        return lambda last: cumulative([(per_minute, last)])
    return lambda last: cumulative([(per_minute, HEALTHY_MINUTES),
                                    (then, last - HEALTHY_MINUTES)])


def _ratios(option: PrefixCacheAlert) -> tuple[Decimal, Decimal, Decimal]:
    """The scenario's hit ratios: healthy, dropped, and an engine's steady one that must not
    fire (low but its own normal when relative; healthy against a fixed floor)."""
    if option.below is not None:
        floor = Decimal(format_number(option.below))
        healthy = (1 + floor) / 2
        return healthy, floor / 2, healthy
    share = Decimal(format_number(option.below_baseline or 0))
    healthy = Decimal("0.8")
    dropped = healthy * share / 2
    return healthy, dropped, dropped


def prefix_cache_alert(target: Target, option: PrefixCacheAlert) -> HealthAlert:
    """The alert, and its scenario: an engine whose ratio drops (fires), one whose ratio is
    steady (quiet), and a quiet server whose ratio drops the same way (quiet)."""
    engines = [{**scraped(target, INFERENCE.address(f"inference-{n}")), vllm.LABEL_MODEL: "m"}
               for n in range(3)]
    minimum = Decimal(format_number(option.min_queried_tokens_per_second)) * MINUTE
    looked_up = max(Decimal(6000), 4 * minimum)  # tokens a minute of a busy engine
    healthy, dropped, steady = _ratios(option)
    scenario: list[tuple[str, Values]] = [
        (series(_QUERIES, engines[0]), _counter(looked_up)),
        (series(_HITS, engines[0]), _counter(looked_up * healthy, looked_up * dropped)),
        (series(_QUERIES, engines[1]), _counter(looked_up)),
        (series(_HITS, engines[1]), _counter(looked_up * steady)),
    ]
    if minimum > 0:  # a guard of 0 turns the quiet server off
        quiet = minimum / 4
        scenario += [(series(_QUERIES, engines[2]), _counter(quiet)),
                     (series(_HITS, engines[2]), _counter(quiet * healthy, quiet * dropped))]
    hold = -(-option.for_seconds // MINUTE)
    return HealthAlert(
        NAME, SEVERITY_TICKET, option.for_seconds,
        f"{hit_ratio(target)}\n< {threshold(target, option)}\nand\n{busy(target, option)}",
        "The prefix-cache hit ratio of {{ $labels.instance }} fell",
        f"Prompt tokens found in vLLM's prefix cache over those looked up: {_what(option)} "
        f"(at least {format_number(option.min_queried_tokens_per_second)} tokens looked up a "
        "second). More prefill per request: shared prompts changed, the cache is evicted "
        "sooner, or routing lost its affinity.",
        tuple(scenario),
        (engines[0],),
        ((HEALTHY_MINUTES - 1, False), (HEALTHY_MINUTES + 5 + hold + 5, True)),
    )
