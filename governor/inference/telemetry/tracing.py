"""OpenTelemetry for the service: a tracer provider per app (never the global one), OTLP/HTTP.

The endpoint comes from ``--otlp-endpoint`` (a base URL such as ``http://jaeger:4318``) or the
standard variables ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (full URL) and
``OTEL_EXPORTER_OTLP_ENDPOINT`` (base URL). With none, spans are still made — their trace ids label
exemplars and reach vLLM through ``traceparent`` — but nothing is exported, and start-up says so
once. ``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none`` turn export off too.

The caller's context is read in the formats ``OTEL_PROPAGATORS`` names (:mod:`.propagation`), and
spans are sampled as ``OTEL_TRACES_SAMPLER`` says (:mod:`.sampling`); a metric exemplar names a
trace only when its span was sampled, so that every exemplar leads to a trace that was exported.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from governor.contracts import traces as tr
from governor.contracts.metrics.service import EXEMPLAR_TRACE_ID
from governor.contracts.stages import Stage
from governor.inference.telemetry.propagation import ENGINE_PROPAGATOR, propagator_from_env
from governor.inference.telemetry.sampling import sampler_from_env
from governor.inference.telemetry.stages import RequestStages

log = logging.getLogger(__name__)

# How long stopping waits for the last spans to leave: an exporter whose collector does not
# answer retries for its own 10 s timeout, longer than compose or Kubernetes wait after SIGTERM.
FLUSH_SECONDS: Final = 2.0

TRACES_PATH = "/v1/traces"


@dataclass(frozen=True, slots=True)
class TracingSettings:
    """OTLP/HTTP export; with no endpoint (flag or ``OTEL_EXPORTER_OTLP_*``) nothing is exported."""

    otlp_endpoint: str | None = None
    service_name: str = "governor-inference"


@dataclass(frozen=True, slots=True)
class Tracing:
    provider: TracerProvider
    tracer: trace.Tracer
    # The full OTLP/HTTP traces URL spans go to, or None when nothing is exported.
    traces_endpoint: str | None
    # Reads the callers' trace context in the formats OTEL_PROPAGATORS names.
    propagator: TextMapPropagator

    def extract_context(self, headers: Mapping[str, str]) -> Context:
        """The caller's trace context (and baggage), in whichever configured format it came."""
        return self.propagator.extract(headers)

    def shutdown(self, timeout_seconds: float = FLUSH_SECONDS) -> bool:
        """Flush the pending spans and stop, within ``timeout_seconds`` (blocks: call it off the
        event loop). False when the spans were still leaving then: they are dropped with the
        process, which is not held up by a collector that does not answer."""
        done = threading.Event()

        def stop() -> None:
            self.provider.shutdown()
            done.set()

        threading.Thread(target=stop, name="tracing-shutdown", daemon=True).start()
        if done.wait(timeout_seconds):
            return True
        log.warning("tracing: the last spans did not reach %s within %.0f s; dropped",
                    self.traces_endpoint, timeout_seconds)
        return False


def traces_endpoint(settings: TracingSettings, env: Mapping[str, str]) -> str | None:
    """Where spans go: the flag, then the standard ``OTEL_*`` variables; None for nowhere."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return None
    if settings.otlp_endpoint:
        return _with_traces_path(settings.otlp_endpoint)
    if env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
    if env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return _with_traces_path(env["OTEL_EXPORTER_OTLP_ENDPOINT"])
    return None


def _with_traces_path(base: str) -> str:
    base = base.rstrip("/")
    return base if base.endswith(TRACES_PATH) else base + TRACES_PATH


def check_tracing_env(env: Mapping[str, str]) -> None:
    """Raise ``ValueError`` (every problem at once) for tracing variables the service would
    refuse: called where the service's configuration is read, before anything starts."""
    problems = []
    for check in (propagator_from_env, sampler_from_env):
        try:
            check(env)
        except ValueError as exc:
            problems.append(str(exc))
    if problems:
        raise ValueError("; ".join(problems))


def setup_tracing(settings: TracingSettings, env: Mapping[str, str] | None = None) -> Tracing:
    env = os.environ if env is None else env
    # Resource.create reads OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME; ours is the default.
    service = env.get("OTEL_SERVICE_NAME") or settings.service_name
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service}),
                              sampler=sampler_from_env(env))
    endpoint = traces_endpoint(settings, env)
    if endpoint is None:
        log.info("tracing: no OTLP endpoint configured, spans are not exported")
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
        log.info("tracing: exporting spans over OTLP/HTTP to %s as %r", endpoint, service)
    return Tracing(provider, provider.get_tracer("governor.inference"), endpoint,
                   propagator_from_env(env))


def inject_headers(span: trace.Span) -> dict[str, str]:
    """``traceparent``/``tracestate`` naming ``span`` as the parent, for the engine's own spans:
    W3C whatever the caller spoke, as vLLM reads nothing else."""
    carrier: dict[str, str] = {}
    ENGINE_PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    return carrier


def exemplar(span: trace.Span) -> dict[str, str] | None:
    """The exemplar labels naming ``span``'s trace, or None when the span was not sampled (its
    trace is never exported, so a link to it would lead nowhere)."""
    context = span.get_span_context()
    if not context.trace_flags.sampled:
        return None
    return {EXEMPLAR_TRACE_ID: format(context.trace_id, "032x")}


_STAGE_ATTRIBUTES: Final = {stage: tr.stage_attribute(stage) for stage in Stage}


def add_stages_event(span: trace.Span, stages: RequestStages) -> None:
    """The request's stages as one event at its end: each stage's seconds and their total."""
    attributes = {_STAGE_ATTRIBUTES[stage]: seconds for stage, seconds in stages.seconds.items()}
    attributes[tr.STAGES_DURATION] = stages.duration_seconds
    span.add_event(tr.STAGES_EVENT, attributes)
