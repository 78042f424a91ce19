"""Live retuning of a real vLLM engine through the plugin: the running cap and the token budget
change between steps, without a restart, and the scheduler's own records show it."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence

import pytest
from prometheus_client import CollectorRegistry

from governor.contracts.engine_core import RetuningReport
from governor.contracts.metrics import vllm
from governor.inference.engines.base import BatchingLimits, SamplingOptions
from governor.inference.engines.vllm.convert import RequestTiming
from governor.inference.engines.vllm.engine import VllmEngine
from tests.inference.engines.vllm.conftest import (
    MAX_NUM_BATCHED_TOKENS,
    MAX_NUM_SEQS,
    SERVED_MODEL_NAME,
)
from tests.inference.engines.vllm.test_engine import collect, make_request

pytestmark = [pytest.mark.vllm, pytest.mark.asyncio(loop_scope="session")]

GREEDY = SamplingOptions(temperature=0.0, ignore_eos=True)
LABELS = {vllm.LABEL_MODEL: SERVED_MODEL_NAME, vllm.LABEL_ENGINE: "0"}


def max_overlap(timings: Sequence[RequestTiming]) -> int:
    """The most requests ever running at once, from their [scheduled, last token] intervals."""
    events = sorted(
        itertools.chain.from_iterable(
            ((t.scheduled_ts, 1), (t.last_token_ts, -1)) for t in timings
        ),
        # At equal times, a finish comes before a start: the slot was handed over.
        key=lambda event: (event[0], event[1]),
    )
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


async def in_force(engine: VllmEngine) -> RetuningReport:
    """What the engine core reports it has in force now."""
    report = await engine.batching_report()
    assert report.retuning is not None, report.reason
    return report.retuning


async def run_concurrently(
    engine: VllmEngine, registry: CollectorRegistry, count: int, max_tokens: int
) -> tuple[list[RequestTiming], float]:
    """``count`` requests at once; their timings and the highest running gauge seen meanwhile."""
    requests = [make_request(max_tokens=max_tokens) for _ in range(count)]
    peak_gauge = 0.0
    done = asyncio.Event()

    async def watch() -> None:
        nonlocal peak_gauge
        while not done.is_set():
            value = registry.get_sample_value(vllm.NUM_REQUESTS_RUNNING.name, LABELS) or 0.0
            peak_gauge = max(peak_gauge, value, float(engine.stats().num_requests_running))
            await asyncio.sleep(0.005)

    watcher = asyncio.create_task(watch())
    try:
        results = await asyncio.gather(*(collect(engine, r) for r in requests))
    finally:
        done.set()
        await watcher
    assert all(sum(d.num_tokens for d in deltas) == max_tokens for deltas in results)
    wanted = {r.request_id for r in requests}
    timings = [t for t in engine.recent_timings() if t.request_id in wanted]
    assert len(timings) == count
    return timings, peak_gauge


async def test_a_cap_of_two_runs_eight_requests_two_at_a_time_and_raising_it_lets_them_run_together(
    ceiling_restored: VllmEngine, engine_registry: CollectorRegistry
) -> None:
    engine = ceiling_restored
    applied = await engine.set_limits(BatchingLimits(2, MAX_NUM_BATCHED_TOKENS))
    assert applied == BatchingLimits(2, MAX_NUM_BATCHED_TOKENS) == engine.limits

    timings, peak_gauge = await run_concurrently(engine, engine_registry, 8, max_tokens=24)
    assert max_overlap(timings) == 2
    assert peak_gauge <= 2
    # Four waves: the later requests waited in the queue for the earlier ones.
    ordered = sorted(timings, key=lambda t: t.scheduled_ts)
    assert ordered[-1].scheduled_ts >= ordered[1].last_token_ts
    assert ordered[-1].scheduled_ts - ordered[-1].queued_ts > 0.0

    # Same engine, same process: raise the cap and the same load runs all at once.
    await engine.set_limits(BatchingLimits(8, MAX_NUM_BATCHED_TOKENS))
    timings, peak_gauge = await run_concurrently(engine, engine_registry, 8, max_tokens=24)
    assert max_overlap(timings) == 8
    assert peak_gauge > 2


async def test_lowering_the_cap_below_the_number_running_drains_without_killing_the_engine(
    ceiling_restored: VllmEngine,
) -> None:
    engine = ceiling_restored
    streams = [engine.generate(make_request(max_tokens=40)) for _ in range(6)]
    for stream in streams:
        await anext(stream)
    assert engine.stats().num_requests_running == 6
    await engine.set_limits(BatchingLimits(1, MAX_NUM_BATCHED_TOKENS))
    report = await in_force(engine)
    assert report.current.max_num_seqs == 1
    # The six keep running to the end; the engine survives.
    for stream in streams:
        async for _ in stream:
            pass
    assert engine.ready
    after = await asyncio.gather(*(collect(engine, make_request(max_tokens=8)) for _ in range(2)))
    assert all(sum(d.num_tokens for d in deltas) == 8 for deltas in after)


async def test_a_smaller_token_budget_chunks_a_long_prefill_at_runtime(
    ceiling_restored: VllmEngine,
) -> None:
    engine = ceiling_restored
    long_prompt = tuple(range(10, 410))

    await engine.set_limits(BatchingLimits(MAX_NUM_SEQS, 32))
    await collect(engine, make_request(max_tokens=2, prompt_ids=long_prompt))
    report = await in_force(engine)
    assert report.largest_step_tokens_since_change == 32
    assert report.steps_since_change >= 400 / 32  # the prompt took at least 13 steps

    await engine.set_limits(BatchingLimits(MAX_NUM_SEQS, MAX_NUM_BATCHED_TOKENS))
    # Another prompt: the first one's blocks are in the prefix cache now.
    other_prompt = tuple(range(500, 900))
    await collect(engine, make_request(max_tokens=2, prompt_ids=other_prompt))
    report = await in_force(engine)
    assert report.largest_step_tokens_since_change == 400  # the whole prompt in one step
    assert report.steps_since_change <= 3


async def test_limits_above_the_start_up_values_are_clamped_in_the_engine(
    ceiling_restored: VllmEngine,
) -> None:
    # The service validates against the ceiling first; the plugin clamps again, in the engine.
    engine = ceiling_restored
    applied = await engine.set_limits(BatchingLimits(MAX_NUM_SEQS * 4, MAX_NUM_BATCHED_TOKENS * 4))
    assert applied == BatchingLimits(MAX_NUM_SEQS, MAX_NUM_BATCHED_TOKENS)
    assert engine.ceiling == BatchingLimits(MAX_NUM_SEQS, MAX_NUM_BATCHED_TOKENS)
