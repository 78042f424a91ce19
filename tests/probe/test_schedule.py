"""The probe's schedule and loop, in virtual time: the rate bound, the jitter, one request in
flight per replica, whatever the target does."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from governor.contracts.metrics.probe import RESULT_SUCCESS, RESULT_TIMEOUT
from governor.probe.result import ProbeResult, Replica
from governor.probe.runner import run_replica
from governor.probe.schedule import first_start, next_start


class Stop(Exception):
    """Raised by the recorder once enough probes have run."""


@dataclass
class VirtualTime:
    now: float = 1000.0

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.now += seconds


@dataclass
class Target:
    """A target whose answers take ``duration()`` seconds of virtual time."""

    time: VirtualTime
    duration: Callable[[], float]
    spans: list[tuple[float, float]] = field(default_factory=list)

    async def send(self, replica: Replica) -> ProbeResult:
        start = self.time.now
        self.time.now += self.duration()
        self.spans.append((start, self.time.now))
        return ProbeResult(RESULT_SUCCESS, 0.01, (0.01,))


def run(target: Target, count: int, *, interval: float, jitter: float, seed: int = 3) -> None:
    def record(replica: Replica, result: ProbeResult) -> None:
        if len(target.spans) >= count:
            raise Stop

    with pytest.raises(Stop):
        asyncio.run(run_replica(Replica("inference", "http://x:1"), target.send, record,
                                interval_seconds=interval, jitter=jitter,
                                rng=random.Random(seed), clock=target.time.clock,
                                sleep=target.time.sleep))


def test_the_first_probe_falls_anywhere_in_the_first_interval() -> None:
    rng = random.Random(5)
    starts = [first_start(100.0, 15.0, rng) - 100.0 for _ in range(2000)]
    assert 0.0 <= min(starts) < 0.5 and 14.5 < max(starts) < 15.0


@pytest.mark.parametrize("jitter", [0.0, 0.1, 0.5])
def test_starts_are_one_jittered_interval_apart_and_average_the_interval(jitter: float) -> None:
    time = VirtualTime()
    target = Target(time, lambda: 0.05)
    run(target, 2000, interval=15.0, jitter=jitter)
    starts = [start for start, _ in target.spans]
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert min(gaps) >= 15.0 * (1 - jitter) - 1e-9
    assert max(gaps) <= 15.0 * (1 + jitter) + 1e-9
    assert sum(gaps) / len(gaps) == pytest.approx(15.0, rel=0.02)
    if jitter:  # jitter spreads them; none is exactly on the beat
        assert max(gaps) - min(gaps) > 15.0 * jitter


def test_the_rate_never_passes_one_per_shortest_interval_in_any_window() -> None:
    """In any window of one interval, at most two probes start (gaps ≥ interval/2 at the
    largest jitter), so the rate the spec bounds holds at every moment, not on average."""
    time = VirtualTime()
    rng = random.Random(11)
    target = Target(time, lambda: rng.uniform(0.0, 2.0))
    run(target, 1000, interval=10.0, jitter=0.5)
    starts = [start for start, _ in target.spans]
    for index, start in enumerate(starts):
        assert sum(1 for s in starts[index:index + 4] if s < start + 10.0) <= 2


def test_a_slow_target_never_has_two_probes_in_flight() -> None:
    """An answer that takes longer than the interval delays the next probe until it ends."""
    time = VirtualTime()
    target = Target(time, lambda: 25.0)
    run(target, 50, interval=10.0, jitter=0.1)
    for (_, end), (start, _) in zip(target.spans, target.spans[1:], strict=False):
        assert start >= end


def test_next_start_is_never_before_the_previous_probe_ended() -> None:
    rng = random.Random(1)
    assert next_start(0.0, 40.0, 10.0, 0.1, rng) == 40.0
    assert 9.0 <= next_start(0.0, 1.0, 10.0, 0.1, rng) <= 11.0


def test_a_failing_replica_is_logged_once_per_change_of_state(
        caplog: pytest.LogCaptureFixture) -> None:
    time = VirtualTime()
    results = iter([RESULT_TIMEOUT] * 5 + [RESULT_SUCCESS] * 3 + [RESULT_TIMEOUT] * 2)
    sent: list[str] = []

    async def send(replica: Replica) -> ProbeResult:
        sent.append(result := next(results))
        return ProbeResult(result, detail="no answer within 1s")

    def record(replica: Replica, result: ProbeResult) -> None:
        if len(sent) == 10:
            raise Stop

    with caplog.at_level("INFO", logger="probe"), pytest.raises(Stop):
        asyncio.run(run_replica(Replica("inference", "http://x:1"), send, record,
                                interval_seconds=5.0, jitter=0.1, rng=random.Random(2),
                                clock=time.clock, sleep=time.sleep))
    assert [r.getMessage() for r in caplog.records] == [
        "probe of inference (http://x:1) failed: timeout: no answer within 1s",
        "probe of inference (http://x:1) succeeds again",
        "probe of inference (http://x:1) failed: timeout: no answer within 1s"]
