"""A target's remembered moments read against a clock that may have stepped back.

The state holds wall-clock moments: the last change, the last breach, the probe's, the ledger's,
since when the queue grows. When the clock steps back (NTP, a virtual machine restored from a
snapshot) they lie ahead of now, an age computed from them is negative, and a cooldown or a
stabilisation window measured from them would last as long as the step. The law reads the state
through :func:`not_ahead`, which takes a moment ahead of now (or not a number) as now: a change
made "in the future" starts its cooldown again from now, never longer.

>>> from governor.controller.model import TargetState
>>> not_ahead(TargetState(last_change_at=1e18), now=1000.0, avoid_seconds=1800.0).last_change_at
1000.0
"""

from __future__ import annotations

import math
from dataclasses import replace

from governor.controller.model import TargetState


def not_ahead(state: TargetState, now: float, avoid_seconds: float) -> TargetState:
    """``state`` with every moment at most ``now``, and every avoided range ending at most
    ``avoid_seconds`` from now (how long the law avoids a range it records)."""
    probe = state.probe
    if probe is not None and _at(probe.at, now) != probe.at:
        probe = replace(probe, at=now)
    horizon = now + avoid_seconds
    fixed = replace(
        state,
        last_change_at=_optional(state.last_change_at, now),
        last_breach_at=_optional(state.last_breach_at, now),
        breach_began_at=_optional(state.breach_began_at, now),
        probe=probe,
        avoid=tuple(a if a.until <= horizon else replace(
            a, until=horizon if math.isfinite(a.until) else now) for a in state.avoid),
        ledger=tuple(e if e.at <= now else replace(e, at=now) for e in state.ledger),
        queue_growing_since=_optional(state.queue_growing_since, now),
        overload_since=_optional(state.overload_since, now),
    )
    return state if fixed == state else fixed


def _at(moment: float, latest: float) -> float:
    return moment if math.isfinite(moment) and moment <= latest else latest


def _optional(moment: float | None, latest: float) -> float | None:
    return None if moment is None else _at(moment, latest)
