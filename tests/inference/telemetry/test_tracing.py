"""Traces: a SERVER span per request honouring traceparent, GenAI attributes, queue/prefill/decode.

Checked against an OTLP/HTTP receiver that decodes the real ``ExportTraceServiceRequest``.
"""

from __future__ import annotations

import itertools
import logging
import socket
import time

import aiohttp
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from governor.contracts.metrics import service as svc
from governor.contracts.simdevice import fake_gpu_uuid
from governor.contracts.stages import Stage
from governor.inference.telemetry.tracing import TracingSettings, setup_tracing
from tests.inference.conftest import Service, ServiceFactory
from tests.support.otlp import OtlpReceiver, ReceivedSpan

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
SERVER_KIND = 2
# Attributes of an inference span in the GenAI semantic conventions (v1.37), and the latency
# attributes vLLM sets on its own request span: nothing else may use the gen_ai prefix.
GENAI_AND_VLLM_NAMES = {
    "gen_ai.provider.name", "gen_ai.operation.name", "gen_ai.request.model",
    "gen_ai.request.max_tokens", "gen_ai.request.temperature", "gen_ai.request.top_p",
    "gen_ai.request.seed", "gen_ai.request.stop_sequences", "gen_ai.request.frequency_penalty",
    "gen_ai.request.presence_penalty", "gen_ai.request.choice.count", "gen_ai.response.id",
    "gen_ai.response.model", "gen_ai.response.finish_reasons", "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens", "gen_ai.conversation.id", "gen_ai.output.type",
    "gen_ai.latency.time_in_queue", "gen_ai.latency.time_to_first_token", "gen_ai.latency.e2e",
    "gen_ai.latency.time_in_model_prefill", "gen_ai.latency.time_in_model_decode",
    "gen_ai.latency.time_in_model_inference",
}


async def test_the_span_tree_attributes_and_propagated_trace_id(
    make_service: ServiceFactory,
) -> None:
    with OtlpReceiver() as receiver:
        service = await make_service(tracing=TracingSettings(
            otlp_endpoint=receiver.endpoint, service_name="governor-test"))
        body = {"model": service.engine.model_name, "max_tokens": 6, "stream": True,
                "ignore_eos": True,
                "messages": [{"role": "user", "content": "trace this request"}]}
        async with aiohttp.ClientSession() as session, session.post(
            f"{service.url}/v1/chat/completions", json=body,
            headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"},
        ) as response:
            assert response.status == 200
            await response.read()
        await service.server.close()  # shutting down flushes the batch processor

        spans = receiver.wait_for(lambda s: any(x.kind == SERVER_KIND for x in s))
    server = next(s for s in spans if s.kind == SERVER_KIND)
    assert server.trace_id == TRACE_ID
    assert server.parent_span_id == PARENT_ID
    # The GenAI conventions name an inference span "{operation} {model}"; HTTP attributes stay.
    assert server.name == f"chat {service.engine.model_name}"
    assert server.resource["service.name"] == "governor-test"
    attributes = server.attributes
    assert attributes["http.request.method"] == "POST"
    assert attributes["http.route"] == "/v1/chat/completions"
    assert attributes["http.response.status_code"] == 200
    assert attributes["gen_ai.provider.name"] == "vllm"
    assert "gen_ai.system" not in attributes  # replaced by gen_ai.provider.name
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.request.model"] == service.engine.model_name
    assert attributes["gen_ai.request.max_tokens"] == 6
    assert attributes["gen_ai.usage.input_tokens"] > 0
    assert attributes["gen_ai.usage.output_tokens"] == 6
    assert attributes["gen_ai.response.finish_reasons"] == ["length"]
    queue, first = attributes["gen_ai.latency.time_in_queue"], attributes[
        "gen_ai.latency.time_to_first_token"]
    assert 0 <= queue <= first <= (server.end_ns - server.start_ns) / 1e9
    assert "governor.first_token" in server.events
    # Where its time went: every stage, adding up to the span's duration.
    stages = server.event_attributes["governor.stages"]
    named = {key for key in stages if key != "governor.stage.total_seconds"}
    assert named == {f"governor.stage.{stage.value}_seconds" for stage in Stage}
    total = stages["governor.stage.total_seconds"]
    assert abs(sum(stages[key] for key in named) - total) <= 1e-6
    assert 0 < total <= (server.end_ns - server.start_ns) / 1e9
    assert stages["governor.stage.decode_seconds"] > 0
    assert attributes["governor.request.prompt_bytes"] > len("trace this request")
    # Nothing of ours is invented inside the reserved gen_ai namespace.
    assert {k for k in attributes if k.startswith("gen_ai.")} <= GENAI_AND_VLLM_NAMES

    children = {s.name: s for s in spans if s.parent_span_id == server.span_id}
    assert set(children) == {"governor.queue", "governor.prefill", "governor.decode"}
    assert all(c.trace_id == TRACE_ID for c in children.values())
    assert "governor.engine.queued_seconds" in children["governor.queue"].attributes
    ordered: list[ReceivedSpan] = [children[n] for n in ("governor.queue", "governor.prefill",
                                                         "governor.decode")]
    # Where the engine ran: the sim engine's GPU, as the exporter's uuid label names it.
    assert all(c.attributes["governor.engine.gpu_uuids"] == [fake_gpu_uuid(0)] for c in ordered)
    for earlier, later in itertools.pairwise(ordered):
        assert earlier.end_ns <= later.start_ns + 1_000
    assert server.start_ns <= ordered[0].start_ns
    assert ordered[-1].end_ns <= server.end_ns


async def test_a_request_without_traceparent_starts_a_new_trace(
    make_service: ServiceFactory,
) -> None:
    with OtlpReceiver() as receiver:
        service = await make_service(env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint})
        await service.openai().completions.create(
            model=service.engine.model_name, prompt="hello", max_tokens=2)
        await service.server.close()
        spans = receiver.wait_for(lambda s: any(x.kind == SERVER_KIND for x in s))
    server = next(s for s in spans if s.kind == SERVER_KIND)
    assert server.parent_span_id == ""
    assert server.attributes["gen_ai.operation.name"] == "text_completion"
    assert server.name == f"text_completion {service.engine.model_name}"


async def test_without_an_endpoint_nothing_is_exported_and_one_line_says_so(
    make_service: ServiceFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    service = await make_service(env={})
    await service.openai().completions.create(
        model=service.engine.model_name, prompt="hello", max_tokens=2)
    lines = [r.getMessage() for r in caplog.records if "OTLP" in r.getMessage()]
    assert lines == ["tracing: no OTLP endpoint configured, spans are not exported"]


def test_stopping_waits_for_a_collector_that_never_answers_no_longer_than_its_bound() -> None:
    """A collector that takes the connection and never answers (an absent Jaeger behind a
    proxy, a firewall that drops): the exporter would retry for its own 10 s, longer than
    compose waits after SIGTERM; stopping gives up after its bound and says so."""
    with socket.socket() as hole:
        hole.bind(("127.0.0.1", 0))
        hole.listen(8)  # accepted by the kernel, never read, never answered
        port = hole.getsockname()[1]
        tracing = setup_tracing(TracingSettings(otlp_endpoint=f"http://127.0.0.1:{port}"), {})
        tracing.tracer.start_span("a request").end()
        started = time.monotonic()
        delivered = tracing.shutdown(timeout_seconds=0.5)
        took = time.monotonic() - started
    assert not delivered
    assert 0.5 <= took < 2.0


def test_stopping_with_nothing_exported_returns_at_once() -> None:
    tracing = setup_tracing(TracingSettings(otlp_endpoint=None), {})
    tracing.tracer.start_span("a request").end()
    assert tracing.shutdown(timeout_seconds=5.0)


B3_SPAN_ID = "00f067aa0ba902b8"


@pytest.mark.parametrize(("propagators", "headers"), [
    pytest.param("", {"traceparent": f"00-{TRACE_ID}-{B3_SPAN_ID}-01"}, id="tracecontext"),
    pytest.param("b3", {"b3": f"{TRACE_ID}-{B3_SPAN_ID}-1"}, id="b3"),
    pytest.param("b3multi", {"X-B3-TraceId": TRACE_ID, "X-B3-SpanId": B3_SPAN_ID,
                             "X-B3-Sampled": "1"}, id="b3multi"),
    pytest.param("tracecontext,b3multi", {"X-B3-TraceId": TRACE_ID, "X-B3-SpanId": B3_SPAN_ID,
                                          "X-B3-Sampled": "1"}, id="b3multi beside W3C"),
])
async def test_each_propagator_continues_the_callers_trace(
    make_service: ServiceFactory, propagators: str, headers: dict[str, str],
) -> None:
    with OtlpReceiver() as receiver:
        service = await make_service(env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
                                          "OTEL_PROPAGATORS": propagators})
        async with aiohttp.ClientSession() as session, session.post(
            f"{service.url}/v1/completions", headers=headers,
            json={"model": service.engine.model_name, "prompt": "hi", "max_tokens": 2},
        ) as response:
            assert response.status == 200
        await service.server.close()
        spans = receiver.wait_for(lambda s: any(x.kind == SERVER_KIND for x in s))
    server = next(s for s in spans if s.kind == SERVER_KIND)
    assert (server.trace_id, server.parent_span_id) == (TRACE_ID, B3_SPAN_ID)


async def test_under_b3_only_a_traceparent_starts_a_new_trace(
    make_service: ServiceFactory,
) -> None:
    with OtlpReceiver() as receiver:
        service = await make_service(env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
                                          "OTEL_PROPAGATORS": "b3"})
        async with aiohttp.ClientSession() as session, session.post(
            f"{service.url}/v1/completions",
            headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"},
            json={"model": service.engine.model_name, "prompt": "hi", "max_tokens": 2},
        ) as response:
            assert response.status == 200
        await service.server.close()
        spans = receiver.wait_for(lambda s: any(x.kind == SERVER_KIND for x in s))
    server = next(s for s in spans if s.kind == SERVER_KIND)
    assert server.trace_id != TRACE_ID and server.parent_span_id == ""


async def _exemplar_trace_ids(service: Service, headers: dict[str, str]) -> set[str]:
    """The trace ids the latency histograms' exemplars name after one streamed request."""
    async with aiohttp.ClientSession() as session:
        async with session.post(
            f"{service.url}/v1/completions", headers=headers,
            json={"model": service.engine.model_name, "prompt": "hi", "max_tokens": 4,
                  "stream": True, "ignore_eos": True},
        ) as response:
            assert response.status == 200
            await response.read()
        async with session.get(f"{service.url}/metrics", headers={
                "Accept": "application/openmetrics-text; version=1.0.0"}) as response:
            text = await response.text()
    latencies = {svc.TIME_TO_FIRST_TOKEN.name, svc.INTER_TOKEN_LATENCY.name,
                 svc.REQUEST_DURATION.name}
    return {
        sample.exemplar.labels[svc.EXEMPLAR_TRACE_ID]
        for family in text_string_to_metric_families(text)  # type: ignore[no-untyped-call]
        if family.name in latencies
        for sample in family.samples if sample.exemplar is not None
    }


@pytest.mark.parametrize(("env", "flags"), [
    pytest.param({"OTEL_TRACES_SAMPLER": "always_off"}, "01", id="a sampler that samples none"),
    pytest.param({}, "00", id="a caller that did not sample"),
    pytest.param({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                  "OTEL_TRACES_SAMPLER_ARG": "0"}, "00", id="a ratio of 0"),
])
async def test_an_unsampled_span_names_no_exemplar(
    make_service: ServiceFactory, env: dict[str, str], flags: str,
) -> None:
    service = await make_service(env=env)
    traced = await _exemplar_trace_ids(
        service, {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-{flags}"})
    assert traced == set()


async def test_a_sampled_span_names_its_trace_in_every_latency_exemplar(
    make_service: ServiceFactory,
) -> None:
    service = await make_service(env={"OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                                      "OTEL_TRACES_SAMPLER_ARG": "0"})
    traced = await _exemplar_trace_ids(
        service, {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"})
    assert traced == {TRACE_ID}
