"""The scheduler-side retuning logic, on fakes shaped like vLLM's schedulers (no vLLM needed).

``RunningScheduler`` is vLLM 0.25's shape: only ``max_num_running_reqs``, and ``schedule()``
asserts the running set fits under it — the hazard that kills an engine core. ``ActiveScheduler``
adds 0.33's ``max_num_active_reqs``, which only gates admission.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from governor.contracts.batching import BatchingLimits
from governor.vllm import knobs


@dataclass
class Output:
    total_num_scheduled_tokens: int


@dataclass
class RunningScheduler:
    """Admits from ``waiting`` while under the cap, then asserts like vLLM's ``schedule()``."""

    max_num_running_reqs: int = 8
    max_num_scheduled_tokens: int = 2048
    running: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    tokens_per_request: int = 100

    def _cap(self) -> int:
        return self.max_num_running_reqs

    def schedule(self) -> Output:
        while self.waiting and len(self.running) < self._cap():
            self.running.append(self.waiting.pop(0))
        assert len(self.running) <= self.max_num_running_reqs, "engine core dies here"
        tokens = min(len(self.running) * self.tokens_per_request, self.max_num_scheduled_tokens)
        return Output(tokens)

    def finish(self, count: int) -> None:
        del self.running[:count]


@dataclass
class ActiveScheduler(RunningScheduler):
    max_num_active_reqs: int = 8

    def _cap(self) -> int:
        return self.max_num_active_reqs


def test_the_strategy_follows_the_attributes_the_scheduler_has() -> None:
    assert knobs.detect_strategy(RunningScheduler()) is knobs.Strategy.RUNNING
    assert knobs.detect_strategy(ActiveScheduler()) is knobs.Strategy.ACTIVE


@pytest.mark.parametrize(
    "missing", ["max_num_scheduled_tokens", "max_num_running_reqs", "running"]
)
def test_a_scheduler_without_the_attributes_is_refused_clearly(missing: str) -> None:
    class Bare:
        pass

    scheduler = Bare()
    for name, value in {
        "max_num_scheduled_tokens": 2048, "max_num_running_reqs": 8, "running": [],
    }.items():
        if name != missing:
            setattr(scheduler, name, value)
    with pytest.raises(knobs.RetuningUnsupported, match=missing.split("_")[-1]):
        knobs.detect_strategy(scheduler)


def test_a_boolean_is_not_a_limit() -> None:
    scheduler = RunningScheduler()
    scheduler.max_num_running_reqs = True
    with pytest.raises(knobs.RetuningUnsupported):
        knobs.detect_strategy(scheduler)


def test_lowering_the_running_cap_below_the_number_running_never_trips_the_assertion() -> None:
    scheduler = RunningScheduler(running=[f"r{i}" for i in range(6)],
                                 waiting=[f"w{i}" for i in range(4)])
    report = knobs.set_limits(scheduler, max_num_seqs=2, max_num_batched_tokens=None)
    assert report.current.max_num_seqs == 2
    assert report.admission_cap == 6  # clamped to the six running, not 2
    scheduler.schedule()  # would raise if the cap were 2
    assert len(scheduler.running) == 6  # nobody new was admitted

    scheduler.finish(3)
    scheduler.schedule()  # the cap steps down to 3 before the step: still nobody admitted
    assert scheduler.max_num_running_reqs == 3 and len(scheduler.running) == 3
    scheduler.finish(3)
    scheduler.schedule()  # now at the target: two are admitted
    assert scheduler.max_num_running_reqs == 2 and len(scheduler.running) == 2


def test_the_active_cap_moves_at_once_and_leaves_the_slot_count_alone() -> None:
    scheduler = ActiveScheduler(running=[f"r{i}" for i in range(6)], waiting=["w0"])
    report = knobs.set_limits(scheduler, max_num_seqs=2, max_num_batched_tokens=512)
    assert scheduler.max_num_active_reqs == 2
    assert scheduler.max_num_running_reqs == 8  # buffers were sized for this: untouched
    assert scheduler.max_num_scheduled_tokens == 512
    assert report.strategy == "active"
    scheduler.schedule()
    assert len(scheduler.running) == 6


@pytest.mark.parametrize("scheduler_type", [RunningScheduler, ActiveScheduler])
def test_limits_never_go_above_the_start_up_values(scheduler_type: type[RunningScheduler]) -> None:
    scheduler = scheduler_type()
    knobs.set_limits(scheduler, max_num_seqs=4, max_num_batched_tokens=256)
    report = knobs.set_limits(scheduler, max_num_seqs=10_000, max_num_batched_tokens=10**9)
    assert report.current == report.ceiling == BatchingLimits(8, 2048)


@pytest.mark.parametrize("bad", [0, -3, 2.5, "4", True, None])
def test_a_limit_that_is_not_a_positive_integer_is_refused_and_nothing_changes(
    bad: object,
) -> None:
    scheduler = RunningScheduler()
    if bad is None:  # None means "keep", so it is not an error
        knobs.set_limits(scheduler, max_num_seqs=None, max_num_batched_tokens=None)
        assert scheduler.max_num_running_reqs == 8
        return
    with pytest.raises(ValueError, match="max_num_seqs"):
        knobs.set_limits(scheduler, max_num_seqs=bad, max_num_batched_tokens=128)  # type: ignore[arg-type]
    assert scheduler.max_num_scheduled_tokens == 2048


def test_attaching_twice_keeps_the_first_ceiling_and_wraps_schedule_once() -> None:
    scheduler = RunningScheduler()
    first = knobs.attach(scheduler)
    knobs.set_limits(scheduler, max_num_seqs=3, max_num_batched_tokens=100)
    assert knobs.attach(scheduler) is first
    assert first.ceiling_seqs == 8 and first.ceiling_tokens == 2048
    scheduler.waiting = ["a", "b", "c", "d"]
    scheduler.schedule()
    assert len(scheduler.running) == 3


def test_steps_and_the_largest_step_are_counted_since_the_last_change() -> None:
    scheduler = ActiveScheduler(waiting=[f"w{i}" for i in range(8)])
    knobs.set_limits(scheduler, max_num_seqs=8, max_num_batched_tokens=300)
    scheduler.schedule()
    scheduler.schedule()
    report = knobs.report(scheduler)
    assert (report.steps_since_change, report.largest_step_tokens_since_change) == (2, 300)
    report = knobs.set_limits(scheduler, max_num_seqs=None, max_num_batched_tokens=128)
    assert (report.steps_since_change, report.largest_step_tokens_since_change) == (0, 0)


@given(
    target=st.integers(1, 64),
    running=st.integers(0, 128),
    ceiling=st.integers(1, 64),
)
def test_the_effective_cap_is_safe_for_any_state(target: int, running: int, ceiling: int) -> None:
    cap = knobs.effective_running_cap(min(target, ceiling), min(running, ceiling), ceiling)
    assert cap <= ceiling
    assert cap >= min(running, ceiling)  # never below the number running
    assert cap >= min(target, ceiling)
    if running <= target <= ceiling:
        assert cap == target
