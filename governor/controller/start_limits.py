"""Start limits: a target the controller knows nothing of starts from a recommendation.

vLLM starts at its default limits, and on a burst the law needs its first query under load (tens
of seconds) to move them; ``governor recommend`` predicts better static limits from a recorded
log. With ``--start-limits``, the first pass for a target without state sets those limits,
within the target's own floor and ceiling, and the law runs as usual from the next pass::

    governor recommend --workload requests.jsonl --json > recommendation.json
    governor controller --start-limits recommendation.json …     # or --start-limits 3072,256

A target with state (from ``--state-file``, or any earlier pass) is never started again: the
law's memory stands over a recommendation made before it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from governor.contracts.batching import MAX_LIMIT
from governor.controller.model import (
    Action,
    Decision,
    Limits,
    Param,
    Reason,
    TargetLimits,
    TargetState,
)

# What ``governor recommend --json`` writes, and where the limits are in it.
FORMAT = "governor/recommendation/v1"
LIMITS_KEY = "recommended"
# The largest file taken: a recommendation is a few kilobytes.
MAX_BYTES = 1 << 20

_PAIR = re.compile(r"\s*(\d{1,10})\s*,\s*(\d{1,10})\s*")


class StartLimitsError(ValueError):
    """``--start-limits`` names no limits the controller can start from."""


@dataclass(frozen=True, slots=True)
class StartLimits:
    """The limits to start from, and where they came from (said in each audit line)."""

    limits: Limits
    source: str

    @classmethod
    def parse(cls, text: str) -> StartLimits:
        """``TOKENS,SEQS``, or the path of the JSON ``governor recommend --json`` writes.

        >>> StartLimits.parse("3072,256")
        StartLimits(limits=BatchingLimits(max_num_seqs=256, max_num_batched_tokens=3072), \
source='the command line')
        """
        pair = _PAIR.fullmatch(text)
        if pair is None:
            return read(Path(text))
        tokens, seqs = int(pair.group(1)), int(pair.group(2))
        if not (0 < tokens <= MAX_LIMIT and 0 < seqs <= MAX_LIMIT):
            raise StartLimitsError(f"--start-limits {text!r}: both limits must be integers from "
                                   f"1 to {MAX_LIMIT}")
        return cls(Limits(max_num_seqs=seqs, max_num_batched_tokens=tokens), "the command line")


def read(path: Path) -> StartLimits:
    """The recommended limits of a file ``governor recommend --json`` wrote."""
    where = f"--start-limits {path}"
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise StartLimitsError(f"{where}: cannot read: {exc.strerror or exc} (expected "
                               "TOKENS,SEQS or a file of `governor recommend --json`)") from None
    if len(raw) > MAX_BYTES:
        raise StartLimitsError(f"{where}: larger than {MAX_BYTES} bytes: not a recommendation")
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise StartLimitsError(f"{where}: not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("v") != FORMAT:
        raise StartLimitsError(f"{where}: not a recommendation: expected an object with "
                               f"\"v\": \"{FORMAT}\" (`governor recommend --json` writes one)")
    try:
        limits = Limits.from_dict(data.get(LIMITS_KEY))
    except ValueError as exc:
        raise StartLimitsError(f"{where}: {LIMITS_KEY!r}: {exc}") from None
    what = ", ".join(f"{key} {data[key]}" for key in ("workload", "preset", "seed")
                     if isinstance(data.get(key), str | int))
    return StartLimits(limits, f"{path}" + (f" ({what[:200]})" if what else ""))


def start(wanted: StartLimits, target: TargetLimits, state: TargetState, now: float
          ) -> Decision | None:
    """The first pass's decision for a target without state: the start limits within the
    target's floor and ceiling (``None``: the target has state, the law decides)."""
    if state != TargetState():
        return None
    after = clamped(wanted.limits, target)
    before = target.current
    moved = [f"{p.value} {before.get(p)} -> {after.get(p)}" for p in Param
             if before.get(p) != after.get(p)]
    bounded = [f"{p.value} {wanted.limits.get(p)} held to {after.get(p)} by the target's "
               f"{'floor' if wanted.limits.get(p) < after.get(p) else 'ceiling'}"
               for p in Param if wanted.limits.get(p) != after.get(p)]
    explanation = (f"start limits from the recommendation in {wanted.source}: "
                   + (", ".join(moved) if moved else "already in force")
                   + (f" ({'; '.join(bounded)})" if bounded else ""))
    return Decision(_action(before, after), Reason.START_LIMITS, before, after, explanation,
                    TargetState(limits=after, last_change_at=now if moved else None),
                    inputs={f"start.{p.value}": float(wanted.limits.get(p)) for p in Param})


def clamped(limits: Limits, target: TargetLimits) -> Limits:
    """``limits`` within the target's floor and ceiling, each limit alone."""
    for param in Param:
        low, high = target.floor.get(param), target.ceiling.get(param)
        limits = limits.with_value(param, min(max(limits.get(param), low), high))
    return limits


def _action(before: Limits, after: Limits) -> Action:
    """A start that raises the budget (or, at the same budget, the sequences) relaxes."""
    for param in (Param.MAX_NUM_BATCHED_TOKENS, Param.MAX_NUM_SEQS):
        if after.get(param) != before.get(param):
            return Action.RELAX if after.get(param) > before.get(param) else Action.TIGHTEN
    return Action.HOLD
