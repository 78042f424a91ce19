"""The frontend half of live retuning: calls the plugin's engine-core methods for the engine.

:class:`Retuner` wraps one running ``AsyncLLM``: it probes whether retuning is available (the
plugin loaded, the scheduler has the attributes) and what the start-up limits are, then moves the
limits through ``engine_core.call_utility_async`` and keeps what is in force::

    retuner = await Retuner.probe(llm, floor)
    if retuner.problem is None:
        await retuner.set_limits(BatchingLimits(16, 512))
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from governor.contracts.engine_core import EngineCoreReport, rank_report
from governor.inference.engines.base import BatchingLimits, EngineError, EngineErrorKind
from governor.inference.engines.vllm.args import EngineArgsError
from governor.vllm.plugin import UTILITY_REPORT, UTILITY_SET
from governor.vllm.utility import Failure, UtilityError, call_every_engine

log = logging.getLogger(__name__)


class Retuner:
    """Live batching limits of one engine; create with :meth:`probe`."""

    def __init__(self, llm: Any, ceiling: BatchingLimits, problem: str | None) -> None:
        self._llm = llm
        self.ceiling = ceiling
        self.limits = ceiling
        # Why retuning is unavailable, or None when it works.
        self.problem = problem
        self._lock = asyncio.Lock()

    @classmethod
    async def probe(cls, llm: Any, floor: BatchingLimits) -> Retuner:
        """Ask the engine core for its retuning report; refuse a floor above the start-up limits."""
        scheduler_config = llm.vllm_config.scheduler_config
        ceiling = BatchingLimits(
            int(scheduler_config.max_num_seqs), int(scheduler_config.max_num_batched_tokens)
        )
        problem: str | None
        try:
            answer = await call_utility(llm, UTILITY_REPORT)
        except EngineError as error:
            problem = (
                "vLLM's engine core has no governor retuning method: the governor distribution "
                "(its vllm.general_plugins entry point) is not installed in the interpreter that "
                f"runs vLLM ({error.message})"
            )
        else:
            report = parsed(UTILITY_REPORT, answer)
            if report.retuning is not None:
                problem = None
                ceiling = report.retuning.ceiling
            else:
                problem = f"this vLLM cannot be retuned live: {report.reason}"
        if not floor.within(BatchingLimits(1, 1), ceiling):
            raise EngineArgsError(
                f"the batching floor {floor.as_dict()} is above the engine's start-up "
                f"limits {ceiling.as_dict()}: lower --min-num-seqs/--min-num-batched-tokens"
            )
        return cls(llm, ceiling, problem)

    async def set_limits(self, limits: BatchingLimits) -> BatchingLimits:
        if self.problem is not None:
            raise EngineError(EngineErrorKind.UNSUPPORTED, self.problem)
        async with self._lock:
            report = await engine_core_report(
                self._llm, UTILITY_SET, limits.max_num_seqs, limits.max_num_batched_tokens
            )
            if report.retuning is None:
                raise EngineError(EngineErrorKind.UNSUPPORTED, report.reason)
            self.limits = report.retuning.current
            log.info(
                "batching limits now %s (strategy %s, admission cap %s while %s run)",
                self.limits.as_dict(),
                report.retuning.strategy,
                report.retuning.admission_cap,
                report.retuning.num_running,
            )
        return self.limits

    async def ranks(self) -> list[dict[str, Any]]:
        """Each data-parallel rank's report of itself, as the admin API shows it (every rank
        where vLLM's client returns each answer, ``call_utility_all_async``; the first one's
        elsewhere)."""
        try:
            answers = await call_every_engine(self._llm, UTILITY_REPORT)
        except UtilityError as error:
            raise EngineError(_KINDS.get(error.failure, EngineErrorKind.UNSUPPORTED),
                              error.message) from error
        return [rank_report(answer) for answer in answers]

    async def report(self) -> EngineCoreReport:
        """What the engine core reports now: strategy, limits, admission cap, number running."""
        return await engine_core_report(self._llm, UTILITY_REPORT)


_KINDS = {Failure.TIMEOUT: EngineErrorKind.OVERLOADED, Failure.DEAD: EngineErrorKind.DEAD}


async def call_utility(llm: Any, name: str, *args: Any) -> Any:
    """Run ``EngineCore.<name>(*args)`` on every engine (each data-parallel rank has its own
    scheduler: all move together); the first one's answer, failures as :class:`EngineError`."""
    try:
        return (await call_every_engine(llm, name, *args))[0]
    except UtilityError as error:
        kind = _KINDS.get(error.failure, EngineErrorKind.UNSUPPORTED)
        raise EngineError(kind, error.message) from error


async def engine_core_report(llm: Any, name: str, *args: Any) -> EngineCoreReport:
    """:func:`call_utility` of one of Governor's methods, whose answer is a report."""
    return parsed(name, await call_utility(llm, name, *args))


def parsed(name: str, answer: object) -> EngineCoreReport:
    """The report in an answer to ``name``; a malformed one is an :class:`EngineError`."""
    try:
        return EngineCoreReport.from_dict(answer)
    except ValueError as error:
        raise EngineError(EngineErrorKind.UNSUPPORTED,
                          f"the engine core's {name} answer is malformed: {error}") from error
