"""The real-time simulated engine behind the service: streams, aborts, live limits, vLLM metrics."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from governor.contracts.metrics import vllm
from governor.inference.engines.base import (
    BatchingLimits,
    Engine,
    EngineError,
    EngineErrorKind,
    FinishReason,
    GenerateRequest,
    SamplingOptions,
    TokenDelta,
)
from governor.inference.engines.settings import EngineSettings
from governor.inference.engines.sim.engine import SimEngine, create_sim_engine

LONG = SamplingOptions(ignore_eos=True)
PLAIN = SamplingOptions()


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
async def engine(registry: CollectorRegistry) -> AsyncIterator[SimEngine]:
    sim = create_sim_engine(EngineSettings(preset="tiny", time_scale=1.0), registry)
    await sim.start()
    yield sim
    await sim.close()


async def request(
    engine: SimEngine,
    name: str,
    text: str,
    max_tokens: int,
    sampling: SamplingOptions = PLAIN,
) -> GenerateRequest:
    prompt = engine.render_chat([{"role": "user", "content": text}])
    ids = tuple(engine.tokenize(prompt))
    return GenerateRequest(name, prompt, ids, max_tokens=max_tokens, sampling=sampling)


async def collect(stream: AsyncIterator[TokenDelta]) -> list[TokenDelta]:
    return [delta async for delta in stream]


def samples(registry: CollectorRegistry) -> Iterator[tuple[str, dict[str, str], float]]:
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            yield sample.name, sample.labels, sample.value


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    for sample_name, sample_labels, sample_value in samples(registry):
        if sample_name == name and labels.items() <= sample_labels.items():
            return sample_value
    raise AssertionError(f"no sample {name} {labels}")


def test_it_is_an_engine(engine: SimEngine) -> None:
    assert isinstance(engine, Engine)
    assert engine.system == "vllm"
    assert engine.model_name == "tiny"
    assert engine.ready
    assert engine.limits == engine.ceiling == BatchingLimits(16, 512)
    assert engine.floor == BatchingLimits(1, 256)


async def test_the_stream_retokenizes_to_the_tokens_it_reports(engine: SimEngine) -> None:
    deltas = await collect(
        engine.generate(await request(engine, "a", "Translate this, please.", 50))
    )
    text = "".join(d.text for d in deltas)
    assert text == "Trensleti thos, pliesi."
    assert sum(d.num_tokens for d in deltas) == len(engine.tokenize(text))
    assert [d.finish_reason for d in deltas][-1] is FinishReason.STOP
    assert all(d.finish_reason is None for d in deltas[:-1])
    assert deltas[-1].cached_prompt_tokens == 0
    # The engine's own queue and prefill on the first delta, its decode on the last (steps take
    # time), nothing on the others.
    first, last = deltas[0].times, deltas[-1].times
    assert first is not None and last is not None
    assert first.queued_seconds is not None and first.queued_seconds >= 0
    assert first.prefill_seconds is not None and first.prefill_seconds > 0
    assert first.decode_seconds is None
    assert (last.queued_seconds, last.prefill_seconds) == (None, None)
    assert last.decode_seconds is not None and last.decode_seconds > 0
    assert all(d.times is None for d in deltas[1:-1])


async def test_max_tokens_ends_with_length(engine: SimEngine) -> None:
    deltas = await collect(engine.generate(await request(engine, "a", "one two three four", 3)))
    assert sum(d.num_tokens for d in deltas) == 3
    assert deltas[-1].finish_reason is FinishReason.LENGTH


async def test_stop_strings_cut_the_text(engine: SimEngine) -> None:
    sampling = SamplingOptions(stop=("thos",))
    deltas = await collect(
        engine.generate(await request(engine, "a", "Translate this now", 50, sampling))
    )
    assert "".join(d.text for d in deltas) == "Trensleti "
    assert deltas[-1].finish_reason is FinishReason.STOP


async def test_a_repeated_prompt_is_served_from_the_prefix_cache(engine: SimEngine) -> None:
    text = "a long shared instruction " * 20
    await collect(engine.generate(await request(engine, "a", text, 2)))
    deltas = await collect(engine.generate(await request(engine, "b", text, 2)))
    assert deltas[-1].cached_prompt_tokens is not None
    assert deltas[-1].cached_prompt_tokens > 0


async def test_abort_frees_the_kv_cache_at_once_and_ends_the_stream(engine: SimEngine) -> None:
    stream = engine.generate(await request(engine, "a", "go on", 1000, LONG))
    first = await stream.__anext__()
    assert first.num_tokens >= 1
    assert engine.stats().num_requests_running == 1
    assert engine.stats().kv_cache_usage_ratio > 0
    await engine.abort("a")
    assert engine.stats().num_requests_running == 0
    assert engine.stats().kv_cache_usage_ratio == 0
    rest = await collect(stream)
    assert rest[-1].finish_reason is FinishReason.ABORT


async def test_closing_the_stream_early_aborts_the_request(engine: SimEngine) -> None:
    stream = engine.generate(await request(engine, "a", "go on", 1000, LONG))
    await stream.__anext__()
    await stream.aclose()  # type: ignore[attr-defined]
    assert engine.stats().num_requests_running == 0
    assert engine.stats().kv_cache_usage_ratio == 0
    # The id is free again.
    await collect(engine.generate(await request(engine, "a", "again", 2)))


async def test_abort_before_the_request_reaches_the_scheduler(registry: CollectorRegistry) -> None:
    sim = create_sim_engine(EngineSettings(preset="llama-3-8b@h200", time_scale=1.0), registry)
    await sim.start()
    try:
        stream = sim.generate(await request(sim, "a", "hello", 10))
        waiting = asyncio.ensure_future(stream.__anext__())
        await asyncio.sleep(0)  # the frontend latency has not elapsed yet
        await sim.abort("a")
        delta = await waiting
        assert (delta.num_tokens, delta.finish_reason) == (0, FinishReason.ABORT)
        assert sim.stats().num_requests_waiting == 0
    finally:
        await sim.close()


async def test_lower_limits_apply_to_the_next_step_without_a_restart(engine: SimEngine) -> None:
    await engine.set_limits(BatchingLimits(2, 512))
    assert engine.limits == BatchingLimits(2, 512)
    streams = [engine.generate(await request(engine, f"r{i}", "go", 200, LONG)) for i in range(6)]
    firsts = [asyncio.ensure_future(s.__anext__()) for s in streams]
    await asyncio.sleep(0.02)
    assert engine.stats().num_requests_running == 2
    assert engine.stats().num_requests_waiting == 4
    await engine.set_limits(BatchingLimits(16, 512))
    await asyncio.sleep(0.02)
    assert engine.stats().num_requests_running == 6
    await asyncio.gather(*firsts)
    for stream in streams:
        await stream.aclose()  # type: ignore[attr-defined]


async def test_limits_outside_the_floor_and_ceiling_are_refused(engine: SimEngine) -> None:
    for limits in (BatchingLimits(17, 512), BatchingLimits(4, 100), BatchingLimits(0, 512)):
        with pytest.raises(EngineError) as caught:
            await engine.set_limits(limits)
        assert caught.value.kind is EngineErrorKind.INVALID_REQUEST
    assert engine.limits == engine.ceiling


@pytest.mark.parametrize(
    ("ids", "max_tokens", "param"),
    [((1,) * 2000, 100, "max_tokens"), ((1,) * 10, 0, "max_tokens"), ((), 10, "prompt")],
)
async def test_requests_the_engine_cannot_serve_are_invalid(
    engine: SimEngine, ids: tuple[int, ...], max_tokens: int, param: str
) -> None:
    with pytest.raises(EngineError) as caught:
        await engine.generate(GenerateRequest("x", "p", ids, max_tokens=max_tokens)).__anext__()
    assert caught.value.kind is EngineErrorKind.INVALID_REQUEST
    assert caught.value.param == param
    assert engine.stats().num_requests_waiting == 0


async def test_a_request_id_in_flight_cannot_be_reused(engine: SimEngine) -> None:
    stream = engine.generate(await request(engine, "dup", "go", 100, LONG))
    await stream.__anext__()
    with pytest.raises(EngineError, match="in use"):
        await engine.generate(await request(engine, "dup", "go", 5)).__anext__()
    await stream.aclose()  # type: ignore[attr-defined]


async def test_metrics_carry_vllm_names_and_labels(
    engine: SimEngine, registry: CollectorRegistry
) -> None:
    deltas = await collect(engine.generate(await request(engine, "a", "one two three", 10)))
    tokens = sum(d.num_tokens for d in deltas)
    assert tokens == 3  # "uni", " twu", " thrii"
    labels = {vllm.LABEL_MODEL: "tiny", vllm.LABEL_ENGINE: "0"}
    assert value(registry, vllm.GENERATION_TOKENS.total, **labels) == tokens
    assert value(registry, vllm.PROMPT_TOKENS.total, **labels) > 0
    assert value(registry, vllm.REQUEST_SUCCESS.total, finished_reason="stop") == 1
    assert value(registry, vllm.REQUEST_SUCCESS.total, finished_reason="length") == 0
    assert value(registry, vllm.NUM_PREEMPTIONS.total, **labels) == 0
    assert value(registry, vllm.PREFIX_CACHE_QUERIES.total, **labels) > 0
    assert value(registry, vllm.TIME_TO_FIRST_TOKEN.count, **labels) == 1
    assert value(registry, vllm.INTER_TOKEN_LATENCY.count, **labels) == tokens - 1
    assert value(registry, vllm.E2E_REQUEST_LATENCY.count, **labels) == 1
    assert value(registry, vllm.REQUEST_QUEUE_TIME.count, **labels) == 1
    assert value(registry, vllm.ITERATION_TOKENS.count, **labels) >= tokens
    assert value(registry, vllm.NUM_REQUESTS_RUNNING.name, **labels) == 0
    assert value(registry, vllm.KV_CACHE_USAGE.name, **labels) == 0
    ttft_inf = value(registry, vllm.TIME_TO_FIRST_TOKEN.bucket, le="+Inf")
    assert ttft_inf == 1
    exposed = {name for name, _, _ in samples(registry)}
    for declared in (vllm.NUM_REQUESTS_WAITING.name, vllm.REQUEST_PREFILL_TIME.sum):
        assert declared in exposed


async def test_gauges_follow_the_engine_live(
    engine: SimEngine, registry: CollectorRegistry
) -> None:
    stream = engine.generate(await request(engine, "a", "go", 1000, LONG))
    await stream.__anext__()
    assert value(registry, vllm.NUM_REQUESTS_RUNNING.name) == 1
    assert value(registry, vllm.KV_CACHE_USAGE.name) > 0
    await stream.aclose()  # type: ignore[attr-defined]
    assert value(registry, vllm.NUM_REQUESTS_RUNNING.name) == 0


def test_a_second_engine_on_the_same_registry_is_refused(registry: CollectorRegistry) -> None:
    create_sim_engine(EngineSettings(preset="tiny"), registry)
    with pytest.raises(ValueError, match="Duplicated"):
        create_sim_engine(EngineSettings(preset="tiny"), registry)


async def test_real_time_takes_the_simulated_time() -> None:
    sim = create_sim_engine(EngineSettings(preset="tiny", time_scale=1.0), CollectorRegistry())
    await sim.start()
    try:
        started = time.perf_counter()
        await collect(sim.generate(await request(sim, "a", "go", 100, LONG)))
        wall = time.perf_counter() - started
    finally:
        await sim.close()
    simulated = 100 * sim._core.roofline.decode_step_seconds(1, 50)
    assert wall >= 0.9 * simulated


async def test_zero_cost_mode_serves_many_streams_at_once() -> None:
    sim = create_sim_engine(EngineSettings(preset="tiny", time_scale=0.0), CollectorRegistry())
    await sim.start()
    try:
        started = time.perf_counter()
        results = await asyncio.gather(
            *[
                collect(sim.generate(await request(sim, f"r{i}", "go", 300, LONG)))
                for i in range(16)
            ]
        )
        wall = time.perf_counter() - started
    finally:
        await sim.close()
    assert [sum(d.num_tokens for d in deltas) for deltas in results] == [300] * 16
    assert wall < 5.0


async def test_close_ends_open_streams_and_refuses_new_ones(engine: SimEngine) -> None:
    stream = engine.generate(await request(engine, "a", "go", 1000, LONG))
    await stream.__anext__()
    await engine.close()
    rest = await collect(stream)
    assert rest[-1].finish_reason is FinishReason.ABORT
    assert not engine.ready
    with pytest.raises(EngineError) as caught:
        await engine.generate(await request(engine, "b", "go", 5)).__anext__()
    assert caught.value.kind is EngineErrorKind.DEAD


async def test_before_start_the_engine_is_not_ready(registry: CollectorRegistry) -> None:
    sim = create_sim_engine(EngineSettings(preset="tiny"), registry)
    assert not sim.ready
    with pytest.raises(EngineError) as caught:
        await sim.generate(GenerateRequest("a", "p", (5,), max_tokens=1)).__anext__()
    assert caught.value.kind is EngineErrorKind.DEAD


async def test_a_crashed_step_loop_fails_streams_and_readiness(
    engine: SimEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = engine.generate(await request(engine, "a", "go", 1000, LONG))
    await stream.__anext__()

    def broken(plan: Any, **kwargs: Any) -> float:
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(engine._core, "step_seconds", broken)
    with pytest.raises(EngineError) as caught:
        await collect(stream)
    assert caught.value.kind is EngineErrorKind.DEAD
    assert not engine.ready


async def test_only_a_step_that_starts_an_idle_engine_pays_the_idle_start(
    engine: SimEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    flags: list[bool] = []
    step_seconds = engine._core.step_seconds

    def spy(plan: Any, *, idle: bool = False) -> float:
        flags.append(idle)
        return step_seconds(plan, idle=idle)

    monkeypatch.setattr(engine._core, "step_seconds", spy)
    await collect(engine.generate(await request(engine, "a", "go", 5, LONG)))
    assert flags == [True, False, False, False, False]  # the prefill, then four decodes
    await collect(engine.generate(await request(engine, "b", "again", 2, LONG)))
    assert flags[5:] == [True, False]  # idle again in between


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (EngineSettings(preset="nope"), "unknown sim preset"),
        (EngineSettings(preset="tiny", max_model_len=99999), "exceeds"),
        (EngineSettings(preset="tiny", max_num_seqs=0), "at least 1"),
        (EngineSettings(preset="tiny", time_scale=-1.0), "time_scale"),
        (EngineSettings(preset="tiny", time_scale=float("nan")), "time_scale"),
    ],
)
def test_bad_settings_are_refused_with_a_reason(settings: EngineSettings, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        create_sim_engine(settings, CollectorRegistry())


def test_settings_set_the_ceiling_and_the_served_name() -> None:
    settings = EngineSettings(
        preset="llama-3-8b@h100",
        served_model_name="llama",
        max_num_seqs=64,
        max_num_batched_tokens=2048,
        min_num_batched_tokens=4096,
        max_model_len=4096,
    )
    sim = create_sim_engine(settings, CollectorRegistry())
    assert sim.model_name == "llama"
    assert sim.ceiling == sim.limits == BatchingLimits(64, 2048)
    assert sim.floor == BatchingLimits(1, 2048)  # a floor above the ceiling is lowered to it
    assert sim.max_model_len == 4096


async def test_a_late_event_loop_never_makes_latencies_negative() -> None:
    """Regression: a step restarted on the planned timeline once began before a new arrival."""
    from prometheus_client.openmetrics.exposition import generate_latest as openmetrics

    registry = CollectorRegistry()
    sim = create_sim_engine(EngineSettings(preset="tiny", time_scale=5.0), registry)
    await sim.start()

    async def hog_the_loop() -> None:
        while True:
            time.sleep(0.002)  # noqa: ASYNC251 - blocking on purpose: every timer fires late
            await asyncio.sleep(0.001)

    async def one(i: int) -> list[TokenDelta]:
        await asyncio.sleep(0.0037 * i)
        return await collect(sim.generate(await request(sim, f"r{i}", "late loop", 6)))

    hog = asyncio.create_task(hog_the_loop())
    try:
        results = await asyncio.gather(*[one(i) for i in range(30)])
    finally:
        hog.cancel()
        await sim.close()
    queued = [deltas[0].times.queued_seconds if deltas[0].times else None
              for deltas in results]
    assert all(q is not None and q >= 0 for q in queued)
    assert value(registry, vllm.REQUEST_QUEUE_TIME.sum) >= 0
    assert value(registry, vllm.TIME_TO_FIRST_TOKEN.sum) >= 0
    openmetrics(registry)  # type: ignore[no-untyped-call]  # refuses negative histogram sums
