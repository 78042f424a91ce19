"""The probe loop of one replica: wait for its turn (:mod:`.schedule`), send, record, repeat.

Time and sleep are injected, so a test runs an hour of probes in virtual time and checks the
rate bound on what the loop really did::

    await run_replica(replica, send, record, interval_seconds=15, jitter=0.1,
                      rng=random.Random(), clock=loop.time, sleep=asyncio.sleep)
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable

from governor.probe.result import ProbeResult, Replica
from governor.probe.schedule import first_start, next_start

log = logging.getLogger("probe")

Send = Callable[[Replica], Awaitable[ProbeResult]]
Record = Callable[[Replica, ProbeResult], None]


async def run_replica(replica: Replica, send: Send, record: Record, *, interval_seconds: float,
                      jitter: float, rng: random.Random, clock: Callable[[], float],
                      sleep: Callable[[float], Awaitable[None]]) -> None:
    """Probe ``replica`` until cancelled: one request at a time, one per jittered interval."""
    start = first_start(clock(), interval_seconds, rng)
    failing = False
    while True:
        wait = start - clock()
        if wait > 0:
            await sleep(wait)
        started = clock()
        result = await send(replica)
        record(replica, result)
        if result.ok == failing:  # log changes of state, not every probe
            failing = not result.ok
            if failing:
                log.warning("probe of %s (%s) failed: %s: %s", replica.target, replica.url,
                            result.result, result.detail)
            else:
                log.info("probe of %s (%s) succeeds again", replica.target, replica.url)
        start = next_start(started, clock(), interval_seconds, jitter, rng)
