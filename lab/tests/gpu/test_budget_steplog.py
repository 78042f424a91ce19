"""The engine core's step log, on a fake scheduler (the real one runs in vLLM's process)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from governor.vllm import knobs
from lab.gpu import budget_steplog
from lab.gpu.budget_recorder import STEP_COLUMNS


@dataclass
class Output:
    num_scheduled_tokens: dict[str, int]

    @property
    def total_num_scheduled_tokens(self) -> int:
        return sum(self.num_scheduled_tokens.values())


@dataclass
class FakeScheduler:
    plan: list[dict[str, int]]
    running: list[str] = field(default_factory=lambda: ["a", "b"])
    waiting: list[str] = field(default_factory=list)
    max_num_running_reqs: int = 256
    max_num_scheduled_tokens: int = 8192
    updates: int = 0

    def schedule(self, *args: Any) -> Output:
        return Output(self.plan.pop(0))

    def update_from_output(self, output: Output, model_output: object) -> dict[int, str]:
        self.updates += 1
        return {0: "outputs"}


def _step(scheduler: Any) -> None:
    output = scheduler.schedule()
    assert scheduler.update_from_output(output, None) == {0: "outputs"}


def test_each_step_is_one_row_and_a_take_forgets_them() -> None:
    scheduler = FakeScheduler([{"a": 1, "b": 1}, {"a": 1, "b": 2000}])
    assert budget_steplog.take_rows(scheduler) == []  # starts the log
    _step(scheduler)
    _step(scheduler)
    rows = budget_steplog.take_rows(scheduler)
    assert len(rows) == 2
    assert all(len(row) == len(STEP_COLUMNS) for row in rows)
    scheduled, ready, updated, tokens, requests, prefill, running, waiting = rows[1]
    assert scheduled <= ready <= updated
    assert (tokens, requests, prefill, running, waiting) == (2001, 2, 2000, 2, 0)
    assert budget_steplog.take_rows(scheduler) == []
    assert scheduler.updates == 2


def test_an_update_whose_scheduling_was_not_seen_has_no_schedule_time() -> None:
    scheduler = FakeScheduler([])
    budget_steplog.take_rows(scheduler)
    scheduler.update_from_output(Output({"a": 1}), None)
    (row,) = budget_steplog.take_rows(scheduler)
    assert math.isnan(row[0])


def test_it_composes_with_the_retuning_plugins_wrapper_either_way() -> None:
    first_log = FakeScheduler([{"a": 1}, {"a": 1}])
    budget_steplog.take_rows(first_log)
    knobs.set_limits(first_log, max_num_seqs=None, max_num_batched_tokens=512)
    first_knobs = FakeScheduler([{"a": 1}, {"a": 1}])
    knobs.set_limits(first_knobs, max_num_seqs=None, max_num_batched_tokens=512)
    budget_steplog.take_rows(first_knobs)
    for scheduler in (first_log, first_knobs):
        _step(scheduler)
        _step(scheduler)
        assert len(budget_steplog.take_rows(scheduler)) == 2
        assert knobs.report(scheduler).steps_since_change == 2
        assert budget_steplog.attach(scheduler) is budget_steplog.attach(scheduler)
