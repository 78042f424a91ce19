"""The frontend half of retuning on a stand-in AsyncLLM: every way the engine core can answer."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from governor.contracts.engine_core import EngineCoreReport, RetuningReport
from governor.inference.engines.base import BatchingLimits, EngineError, EngineErrorKind
from governor.inference.engines.vllm import retuning
from governor.inference.engines.vllm.args import EngineArgsError
from governor.inference.engines.vllm.retuning import Retuner
from governor.vllm import utility
from governor.vllm.plugin import UTILITY_REPORT, UTILITY_SET

FLOOR = BatchingLimits(1, 16)
START_UP = BatchingLimits(64, 2048)


def supported(limits: BatchingLimits = START_UP, *, rank: int = 0,
              num_running: int = 0) -> dict[str, Any]:
    """What the plugin answers for an engine core at ``limits`` (64 and 2048 at start-up)."""
    retuning = RetuningReport("running", limits, START_UP, admission_cap=limits.max_num_seqs,
                              num_running=num_running, steps_since_change=0,
                              largest_step_tokens_since_change=0)
    return EngineCoreReport(100 + rank, rank, retuning).to_dict()


SUPPORTED = supported()


class Core:
    """Answers utility calls like vLLM's engine-core client, from a script."""

    def __init__(self, answer: Any = None, error: Exception | None = None,
                 delay: float = 0.0) -> None:
        self.answer, self.error, self.delay = answer, error, delay
        self.calls: list[tuple[Any, ...]] = []

    async def call_utility_async(self, name: str, *args: Any) -> Any:
        self.calls.append((name, *args))
        await asyncio.sleep(self.delay)
        if self.error is not None:
            raise self.error
        if name == UTILITY_SET:
            return supported(BatchingLimits(*args))
        return self.answer


def llm(core: Any, *, errored: bool = False, data_parallel_size: int = 1) -> Any:
    return SimpleNamespace(
        engine_core=core, errored=errored,
        vllm_config=SimpleNamespace(
            scheduler_config=SimpleNamespace(max_num_seqs=64, max_num_batched_tokens=2048),
            parallel_config=SimpleNamespace(data_parallel_size=data_parallel_size),
        ),
    )


async def test_a_supported_engine_reports_its_start_up_limits_and_moves() -> None:
    core = Core(SUPPORTED)
    retuner = await Retuner.probe(llm(core), FLOOR)
    assert retuner.problem is None
    assert retuner.ceiling == retuner.limits == BatchingLimits(64, 2048)
    assert await retuner.set_limits(BatchingLimits(8, 512)) == BatchingLimits(8, 512)
    assert retuner.limits == BatchingLimits(8, 512)
    assert core.calls == [(UTILITY_REPORT,), (UTILITY_SET, 8, 512)]


async def test_without_the_plugin_retuning_is_refused_with_the_reason() -> None:
    missing = Exception("Call to governor_batching method failed: 'EngineCoreProc' object has "
                        "no attribute 'governor_batching'")
    retuner = await Retuner.probe(llm(Core(error=missing)), FLOOR)
    assert retuner.problem is not None and "not installed" in retuner.problem
    assert retuner.ceiling == BatchingLimits(64, 2048)  # from vLLM's own configuration
    with pytest.raises(EngineError) as raised:
        await retuner.set_limits(BatchingLimits(8, 512))
    assert raised.value.kind is EngineErrorKind.UNSUPPORTED


async def test_a_scheduler_the_plugin_cannot_drive_is_refused_with_its_reason() -> None:
    report = EngineCoreReport(100, 0, None, "Scheduler has no max_num_running_reqs").to_dict()
    retuner = await Retuner.probe(llm(Core(report)), FLOOR)
    assert retuner.problem is not None and "max_num_running_reqs" in retuner.problem


async def test_a_floor_above_the_start_up_limits_stops_the_start() -> None:
    with pytest.raises(EngineArgsError, match="min-num-batched-tokens"):
        await Retuner.probe(llm(Core(SUPPORTED)), BatchingLimits(1, 4096))


async def test_an_engine_core_that_does_not_answer_is_overloaded_not_hung(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(utility, "UTILITY_TIMEOUT_SECONDS", 0.05)
    with pytest.raises(EngineError) as raised:
        await retuning.call_utility(llm(Core(SUPPORTED, delay=1.0)), UTILITY_REPORT)
    assert raised.value.kind is EngineErrorKind.OVERLOADED


async def test_a_failure_on_a_dead_engine_says_dead() -> None:
    with pytest.raises(EngineError) as raised:
        await retuning.call_utility(
            llm(Core(error=RuntimeError("socket closed")), errored=True), UTILITY_SET, 1, 16
        )
    assert raised.value.kind is EngineErrorKind.DEAD


async def test_data_parallel_engines_move_together() -> None:
    class AllCores(Core):
        async def call_utility_all_async(self, name: str, *args: Any) -> list[Any]:
            return [await self.call_utility_async(name, *args) for _ in range(2)]

    core = AllCores(SUPPORTED)
    assert (await retuning.call_utility(llm(core, data_parallel_size=2), UTILITY_REPORT))[
        "supported"]
    assert len(core.calls) == 2
    # Without call_utility_all_async (vLLM 0.25, 0.26) vLLM's own load-balancing client runs the
    # call on every engine and returns the first answer: one call from here.
    older = Core(SUPPORTED)
    assert (await retuning.call_utility(llm(older, data_parallel_size=2), UTILITY_REPORT))[
        "supported"]
    assert older.calls == [(UTILITY_REPORT,)]


class EveryRank(Core):
    """vLLM's client with ``call_utility_all_async``: one answer per data-parallel engine."""

    async def call_utility_all_async(self, name: str, *args: Any) -> list[Any]:
        self.calls.append((name, *args))
        return [supported(rank=rank, num_running=3) | {"secret_field": "not shown"}
                for rank in (0, 1)]


async def test_each_data_parallel_rank_reports_itself_in_the_fields_of_the_contract() -> None:
    retuner = await Retuner.probe(llm(EveryRank(SUPPORTED), data_parallel_size=2), FLOOR)
    ranks = await retuner.ranks()
    assert [r["dp_rank"] for r in ranks] == [0, 1]
    assert ranks[1] == {"dp_rank": 1, "pid": 101, "strategy": "running", "max_num_seqs": 64,
                        "max_num_batched_tokens": 2048, "admission_cap": 64, "num_running": 3}


async def test_ranks_of_an_engine_that_does_not_answer_are_an_engine_error() -> None:
    core = Core(SUPPORTED)
    retuner = await Retuner.probe(llm(core), FLOOR)
    core.error = Exception("boom")
    with pytest.raises(EngineError):
        await retuner.ranks()
