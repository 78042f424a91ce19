"""When each replica is probed: pure functions of the previous probe, the interval and a random
source, so the rate bound is checked without a clock.

Replicas start spread at random over the first interval (a fleet's probes do not arrive at once);
after that each waits the interval times a factor in ``[1 - jitter, 1 + jitter]`` from its
previous start, and never starts before its previous probe finished::

    >>> import random
    >>> rng = random.Random(1)
    >>> first = first_start(100.0, 15.0, rng)
    >>> 100.0 <= first < 115.0
    True
    >>> 13.5 <= next_start(first, first + 0.2, 15.0, 0.1, rng) - first <= 16.5
    True
"""

from __future__ import annotations

import random


def first_start(now: float, interval_seconds: float, rng: random.Random) -> float:
    """The first probe of a replica: anywhere in the first interval."""
    return now + rng.uniform(0.0, interval_seconds)


def next_start(previous_start: float, previous_end: float, interval_seconds: float,
               jitter: float, rng: random.Random) -> float:
    """The next probe: one jittered interval after the previous one started, and not before it
    ended (one probe in flight per replica, whatever the timeout)."""
    wait = interval_seconds * rng.uniform(1.0 - jitter, 1.0 + jitter)
    return max(previous_start + wait, previous_end)
