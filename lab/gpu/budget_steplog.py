"""The engine core's own clock on every step, for ``budget_tables`` (runs in vLLM's engine-core
process).

:func:`install` adds a utility method to vLLM's ``EngineCore``; the measuring process calls it
with ``await llm.engine_core.call_utility_async(UTILITY_STEPS)``. The first call wraps the
scheduler's ``schedule`` and ``update_from_output`` (instance attributes shadow the class's
methods, as the project's retuning plugin does; either may wrap first) and every later call
returns the rows logged since the previous one and forgets them. A row (``STEP_COLUMNS`` of
``budget_recorder``) is one step:

* ``scheduled``: when ``schedule()`` was entered for it;
* ``output_ready``: when ``update_from_output`` was entered, i.e. the engine core had the model's
  output (with async scheduling the next step is already running on the GPU then);
* ``updated``: when ``update_from_output`` returned (its outputs go to the frontend right after);
* scheduled tokens, scheduled requests, tokens of requests given more than one token (prefill
  chunks), and the running and waiting queues' lengths after the update.

While the GPU is never idle, consecutive ``output_ready`` times are the steps' durations. Times
are ``time.monotonic()``: CLOCK_MONOTONIC, the measuring process's clock too.

Under ``spawn`` the engine-core process imports the measuring script as ``__mp_main__``, whose
import of this module calls :func:`install` there; it is idempotent.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

UTILITY_STEPS = "budgetcal_steps"
_ATTRIBUTE = "_budgetcal_steplog"
# Scheduled outputs whose update never came (an aborted step) are forgotten past this many.
_PENDING_LIMIT = 10_000


@dataclass(slots=True)
class StepLog:
    rows: list[tuple[float, ...]] = field(default_factory=list)
    scheduled_at: dict[int, float] = field(default_factory=dict)


def _row(log: StepLog, output: Any, ready: float, scheduler: Any) -> tuple[float, ...]:
    per_request: dict[str, int] = dict(getattr(output, "num_scheduled_tokens", None) or {})
    prefill = sum(n for n in per_request.values() if n > 1)
    return (
        log.scheduled_at.pop(id(output), math.nan), ready, time.monotonic(),
        float(getattr(output, "total_num_scheduled_tokens", 0)), float(len(per_request)),
        float(prefill), float(len(getattr(scheduler, "running", ()))),
        float(len(getattr(scheduler, "waiting", ()))),
    )


def attach(scheduler: Any) -> StepLog:
    """The scheduler's step log, wrapping its two methods on first use."""
    log = getattr(scheduler, _ATTRIBUTE, None)
    if isinstance(log, StepLog):
        return log
    log = StepLog()
    schedule = scheduler.schedule
    update = scheduler.update_from_output

    def timed_schedule(*args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        output = schedule(*args, **kwargs)
        if len(log.scheduled_at) > _PENDING_LIMIT:
            log.scheduled_at.clear()
        log.scheduled_at[id(output)] = started
        return output

    def timed_update(output: Any, *args: Any, **kwargs: Any) -> Any:
        ready = time.monotonic()
        result = update(output, *args, **kwargs)
        log.rows.append(_row(log, output, ready, scheduler))
        return result

    scheduler.schedule = timed_schedule
    scheduler.update_from_output = timed_update
    setattr(scheduler, _ATTRIBUTE, log)
    return log


def take_rows(scheduler: Any) -> list[tuple[float, ...]]:
    """The rows logged since the last call (the first call starts the log)."""
    log = attach(scheduler)
    rows, log.rows = log.rows, []
    return rows


def _steps(self: Any) -> list[tuple[float, ...]]:
    return take_rows(self.scheduler)


def install() -> None:
    """Give ``EngineCore`` the utility method (idempotent; a no-op without vLLM)."""
    try:
        from vllm.v1.engine.core import EngineCore
    except ImportError:
        return
    if getattr(EngineCore, UTILITY_STEPS, None) is not _steps:
        setattr(EngineCore, UTILITY_STEPS, _steps)
