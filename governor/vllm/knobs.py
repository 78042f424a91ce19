"""Moving a live vLLM scheduler's batching limits, safely, on whichever vLLM version is running.

This runs inside vLLM's engine-core process (the plugin's utility method calls it between steps)
and touches the scheduler only through plain attributes, so the unit tests drive it with a fake
scheduler. Two strategies, detected from the attributes the scheduler has:

* ``active`` (vLLM ≥ 0.33, and the 0.32 CPU build): ``max_num_active_reqs`` caps admission into
  RUNNING without resizing anything; lowering it below the number running is safe, the surplus
  simply drains.
* ``running`` (vLLM 0.25 … 0.32): only ``max_num_running_reqs`` exists, and ``schedule()``
  asserts ``len(running) <= max_num_running_reqs``, so lowering it below the number running
  kills the engine. The cap is therefore clamped to ``max(target, len(running))`` before every
  step and steps down as requests finish.

The per-step token budget is ``max_num_scheduled_tokens`` in both. Neither limit ever goes above
its start-up value: buffers, CUDA-graph sizes and the compile range were sized for it.

Every step passes through a thin wrapper of ``schedule()`` that applies the clamp (``running``)
and counts the steps and the largest one since the last change, so a change can be verified
from the engine's own behaviour rather than assumed.

Use (in the engine process)::

    report = set_limits(engine_core.scheduler, max_num_seqs=2, max_num_batched_tokens=512)
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from governor.contracts.batching import BatchingLimits
from governor.contracts.engine_core import RetuningReport

# Where the retuning state lives on the scheduler; the name marks it as ours.
STATE_ATTRIBUTE = "_governor_batching"


class Strategy(enum.StrEnum):
    ACTIVE = "active"
    RUNNING = "running"


class RetuningUnsupported(Exception):
    """The running vLLM's scheduler lacks the attributes retuning needs."""


@dataclass(slots=True)
class RetuneState:
    """What the plugin keeps on the scheduler between calls (mutable: it is the live state)."""

    strategy: Strategy
    ceiling_seqs: int
    ceiling_tokens: int
    target_seqs: int
    target_tokens: int
    # Since the last change: engine steps, and the most tokens one of them scheduled.
    steps: int = 0
    largest_step_tokens: int = 0


def _has_int(obj: object, name: str) -> bool:
    value = getattr(obj, name, None)
    return isinstance(value, int) and not isinstance(value, bool)


def detect_strategy(scheduler: object) -> Strategy:
    """Which attributes this scheduler offers; raises :class:`RetuningUnsupported` if neither."""
    if not _has_int(scheduler, "max_num_scheduled_tokens"):
        raise RetuningUnsupported(
            f"{type(scheduler).__name__} has no integer max_num_scheduled_tokens "
            "(the per-step token budget), so the token budget cannot be moved at runtime"
        )
    if not _has_int(scheduler, "max_num_running_reqs") or not hasattr(scheduler, "running"):
        raise RetuningUnsupported(
            f"{type(scheduler).__name__} has no max_num_running_reqs/running "
            "(the running-request cap), so max_num_seqs cannot be moved at runtime"
        )
    if _has_int(scheduler, "max_num_active_reqs"):
        return Strategy.ACTIVE
    return Strategy.RUNNING


def effective_running_cap(target: int, num_running: int, ceiling: int) -> int:
    """The running cap that is safe this step: never below the number running, never above
    the start-up value; it reaches ``target`` once enough requests have finished."""
    return min(ceiling, max(target, num_running))


def _num_running(scheduler: Any) -> int:
    return len(scheduler.running)


def attach(scheduler: Any) -> RetuneState:
    """The scheduler's retuning state, created on first use (idempotent).

    The first call records the start-up limits as the ceiling: nothing but this module moves
    them, so the values found then are the ones the engine was built with.
    """
    state = getattr(scheduler, STATE_ATTRIBUTE, None)
    if isinstance(state, RetuneState):
        return state
    strategy = detect_strategy(scheduler)
    # With the active strategy a start-up max_num_active_seqs below max_num_seqs is the ceiling.
    cap = "max_num_active_reqs" if strategy is Strategy.ACTIVE else "max_num_running_reqs"
    seqs = int(getattr(scheduler, cap))
    tokens = int(scheduler.max_num_scheduled_tokens)
    state = RetuneState(strategy, seqs, tokens, seqs, tokens)
    _wrap_schedule(scheduler, state)
    setattr(scheduler, STATE_ATTRIBUTE, state)
    return state


def _wrap_schedule(scheduler: Any, state: RetuneState) -> None:
    # An instance attribute shadows the class's method, so the engine core's
    # ``self.scheduler.schedule()`` passes through here before every step.
    original: Callable[..., Any] = scheduler.schedule

    def schedule(*args: Any, **kwargs: Any) -> Any:
        if state.strategy is Strategy.RUNNING:
            scheduler.max_num_running_reqs = effective_running_cap(
                state.target_seqs, _num_running(scheduler), state.ceiling_seqs
            )
        output = original(*args, **kwargs)
        record_step(state, getattr(output, "total_num_scheduled_tokens", 0))
        return output

    scheduler.schedule = schedule


def record_step(state: RetuneState, num_tokens: int) -> None:
    state.steps += 1
    state.largest_step_tokens = max(state.largest_step_tokens, int(num_tokens))


def _clamp(name: str, value: object, ceiling: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")
    return min(value, ceiling)


def set_limits(
    scheduler: Any, *, max_num_seqs: int | None, max_num_batched_tokens: int | None
) -> RetuningReport:
    """Apply new limits (``None`` keeps one); values above the start-up ones are clamped."""
    state = attach(scheduler)
    if max_num_seqs is not None:
        state.target_seqs = _clamp("max_num_seqs", max_num_seqs, state.ceiling_seqs)
    if max_num_batched_tokens is not None:
        state.target_tokens = _clamp(
            "max_num_batched_tokens", max_num_batched_tokens, state.ceiling_tokens
        )
    scheduler.max_num_scheduled_tokens = state.target_tokens
    state.steps = state.largest_step_tokens = 0
    if state.strategy is Strategy.ACTIVE:
        scheduler.max_num_active_reqs = state.target_seqs
    else:
        scheduler.max_num_running_reqs = effective_running_cap(
            state.target_seqs, _num_running(scheduler), state.ceiling_seqs
        )
    return report(scheduler)


def report(scheduler: Any) -> RetuningReport:
    """The limits in force, the ceiling and the strategy."""
    state = attach(scheduler)
    if state.strategy is Strategy.ACTIVE:
        admitting = int(scheduler.max_num_active_reqs)
    else:
        admitting = int(scheduler.max_num_running_reqs)
    return RetuningReport(
        strategy=state.strategy.value,
        current=BatchingLimits(state.target_seqs, state.target_tokens),
        ceiling=BatchingLimits(state.ceiling_seqs, state.ceiling_tokens),
        admission_cap=admitting,
        num_running=_num_running(scheduler),
        steps_since_change=state.steps,
        largest_step_tokens_since_change=state.largest_step_tokens,
    )
