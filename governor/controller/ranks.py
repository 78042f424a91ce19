"""Data-parallel ranks: which engine of a server the law judges. Pure.

vLLM labels every engine series with ``engine``, the data-parallel rank that recorded it, as a
decimal string (``"0"`` to ``"N-1"``): one frontend's ``PrometheusStatLogger``
(``vllm/v1/metrics/loggers.py``, label names ``model_name`` and ``engine``) serves every rank it
manages, in 0.25 as in 0.32. The controller's queries keep the label (``by (instance, engine)``),
so a server with two ranks answers two samples per quantity; a series without it (the service's
own ``governor_*`` histograms) answers one per instance, kept under :data:`NO_RANK`.

Every rank runs the same limits (one ``PUT /admin/batching`` retunes them all) and the law
reasons about one engine's steps, so it judges one rank: the worst, the one with the highest
inter-token tail (a tie, as with the service's own histograms, which no rank labels: the one
taking the most prompt tokens, whose steps carry the prefill spikes; then the lowest rank). Its
observation is that rank's own numbers, the instance's where a series carries no rank, except
three that any rank may raise and every rank must heed: KV-cache usage, preemptions and the
first-token tail, each the highest of any rank. A value that is no number (NaN, ±Inf) is no
data, except +Inf where it is a reading: vLLM's bound on queued tokens while it is unbounded.

>>> seen = judge({"itl_tail_seconds": {"0": 0.04, "1": 0.18},
...               "kv_cache_usage_ratio": {"0": 0.9, "1": 0.3}})
>>> seen.rank, seen.values["itl_tail_seconds"], seen.values["kv_cache_usage_ratio"]
('1', 0.18, 0.9)
>>> judge({"itl_tail_seconds": {"": 0.05}, "requests_running": {"0": 12.0}}).rank is None
True
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from governor.controller.model import QUEUED_TOKENS_FIELD

NO_RANK: Final = ""  # the key of a sample whose series carry no ``engine`` label
# The most ranks one server's observation keeps (the lowest ones): a bound on what a scraped
# label can grow in the controller's memory, its /status and its metrics.
MAX_RANKS: Final = 256
# A longer ``engine`` label is nothing vLLM writes; such a sample is left out.
MAX_RANK_LENGTH: Final = 32
# What any rank may raise: the highest of every rank is the one the law sees.
ANY_RANK: Final = frozenset(("kv_cache_usage_ratio", "preemptions_per_second",
                             "ttft_tail_seconds"))
# Where +Inf is a reading, not a gap: vLLM's max_num_queued_tokens while it is unbounded.
INFINITE_READINGS: Final = frozenset((QUEUED_TOKENS_FIELD,))
TAIL: Final = "itl_tail_seconds"
_TIE: Final = "prompt_tokens_per_second"

# Per quantity: its value per rank (or under NO_RANK), for one instance.
ByRank = Mapping[str, Mapping[str, float]]


@dataclass(frozen=True, slots=True)
class Judged:
    """What the law sees of one server: a value per quantity (``None``: no data), the rank it
    judged (``None``: one engine, or series without ranks) and each rank's inter-token tail
    (empty unless there are two ranks or more)."""

    values: dict[str, float | None]
    rank: str | None = None
    tails: dict[str, float | None] = field(default_factory=dict)


def judge(by_rank: ByRank) -> Judged:
    """The observation the law judges, from each quantity's samples by rank."""
    ranks = ranks_of(by_rank)
    if len(ranks) < 2:
        only = ranks[0] if ranks else NO_RANK
        return Judged({name: _of(values, only, name in INFINITE_READINGS)
                       for name, values in by_rank.items()})
    tails = {rank: _of(by_rank.get(TAIL, {}), rank) for rank in ranks}
    worst = max(ranks, key=lambda rank: (_order(tails[rank]),
                                          _order(_of(by_rank.get(_TIE, {}), rank))))
    values = {name: _highest(values, ranks) if name in ANY_RANK
              else _of(values, worst, name in INFINITE_READINGS)
              for name, values in by_rank.items()}
    return Judged(values, worst, tails)


def ranks_of(by_rank: ByRank) -> list[str]:
    """The ranks any quantity reports, lowest first, at most :data:`MAX_RANKS`."""
    seen = {rank for values in by_rank.values() for rank in values
            if rank != NO_RANK and len(rank) <= MAX_RANK_LENGTH}
    return sorted(seen, key=rank_order)[:MAX_RANKS]


def rank_order(rank: str) -> tuple[bool, int, str]:
    """Numeric ranks in numeric order (``"2"`` before ``"10"``), then any other label."""
    numeric = rank.isdecimal() and rank.isascii()
    return (not numeric, int(rank) if numeric else 0, rank)


def _of(values: Mapping[str, float], rank: str, infinite: bool = False) -> float | None:
    """The rank's value, or the instance's where the series carry no rank; NaN and ±Inf: no
    data (``infinite``: +Inf is a reading)."""
    value = values.get(rank, values.get(NO_RANK))
    if value is None or not (math.isfinite(value) or (infinite and value == math.inf)):
        return None
    return value


def _highest(values: Mapping[str, float], ranks: Iterable[str]) -> float | None:
    found = [v for v in (_of(values, rank) for rank in ranks) if v is not None]
    return max(found) if found else None


def _order(value: float | None) -> float:
    return -math.inf if value is None else value
