"""Which cause a drill found: the leading cause of the first verdict that holds.

At each poll the verdict's *leading cause* is the cause with the highest share of any burning
SLO's breach (equal shares in the order of :data:`governor.contracts.causes.CAUSES`;
``unknown`` is a cause like the others, and a wrong answer). A drill's finding is the leading
cause of the first verdict seen after the onset that stays the leading cause for
:data:`POLLS` consecutive polls (a verdict that flickers for one evaluation is not an answer),
and the time of its first poll::

    >>> finder = Finder()
    >>> finder.observe(10.0, [Share("itl", "batching", 0.7), Share("itl", "queue", 0.2)])
    >>> finder.found is None
    True
    >>> finder.observe(15.0, [Share("itl", "batching", 0.6)])
    >>> finder.found.cause, finder.found.seconds
    ('batching', 10.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from governor.contracts import causes
from governor.drills.observe import Share

POLLS: Final = 2
_ORDER: Final = {name: i for i, name in enumerate(causes.NAMES)}


def leading(shares: Sequence[Share]) -> str | None:
    """The cause with the highest share; None without a verdict."""
    if not shares:
        return None
    best = min(shares, key=lambda s: (-s.share, _ORDER.get(s.cause, len(_ORDER))))
    return best.cause


def ranked(shares: Sequence[Share]) -> list[Share]:
    """Per SLO, its causes from the largest share (each cause once per SLO: its largest share
    over the targets)."""
    best: dict[tuple[str, str], Share] = {}
    for share in shares:
        key = (share.slo, share.cause)
        if key not in best or share.share > best[key].share:
            best[key] = share
    return sorted(best.values(),
                  key=lambda s: (s.slo, -s.share, _ORDER.get(s.cause, len(_ORDER))))


@dataclass(frozen=True, slots=True)
class Finding:
    cause: str
    seconds: float  # since the onset, at the first poll of the run that made it
    verdict: tuple[Share, ...]  # that poll's verdict, ranked


class Finder:
    """Feeds on polls; :attr:`found` once a leading cause held for :data:`POLLS` polls."""

    def __init__(self, polls: int = POLLS) -> None:
        self.polls = polls
        self.found: Finding | None = None
        self._first: Finding | None = None
        self._count = 0

    def observe(self, seconds: float, shares: Sequence[Share]) -> None:
        if self.found is not None:
            return
        cause = leading(shares)
        if cause is None:
            self._first, self._count = None, 0
            return
        if self._first is None or self._first.cause != cause:
            self._first, self._count = Finding(cause, seconds, tuple(ranked(shares))), 0
        self._count += 1
        if self._count >= self.polls:
            self.found = self._first
