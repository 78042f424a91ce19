"""OTEL_PROPAGATORS and OTEL_TRACES_SAMPLER as the service reads them, and the engine's hop."""

from __future__ import annotations

import pytest
from opentelemetry import baggage, trace
from opentelemetry.sdk.trace.sampling import ParentBasedTraceIdRatio, TraceIdRatioBased

from governor.inference.telemetry.propagation import (
    DEFAULT_PROPAGATORS,
    PropagationError,
    propagator_from_env,
    propagator_names,
)
from governor.inference.telemetry.sampling import SamplingError, sampler_from_env
from governor.inference.telemetry.tracing import (
    TracingSettings,
    check_tracing_env,
    exemplar,
    inject_headers,
    setup_tracing,
)

TRACE_ID = "463ac35c9f6413ad48485a3953bb6124"
SPAN_ID = "a2fb4a1d1a96d312"


@pytest.mark.parametrize(("value", "names"), [
    pytest.param("", DEFAULT_PROPAGATORS, id="unset is W3C trace context and baggage"),
    pytest.param("  ", DEFAULT_PROPAGATORS, id="blank is the default too"),
    pytest.param("b3", ("b3",), id="B3 single header"),
    pytest.param("B3Multi, tracecontext", ("b3multi", "tracecontext"),
                 id="names are trimmed and lower-cased, the order kept"),
    pytest.param("b3,b3,baggage", ("b3", "baggage"), id="a repeat counts once"),
    pytest.param("none", (), id="none propagates nothing"),
])
def test_the_names_otel_propagators_lists(value: str, names: tuple[str, ...]) -> None:
    assert propagator_names({"OTEL_PROPAGATORS": value}) == names


@pytest.mark.parametrize(("value", "message"), [
    pytest.param("zipkin", "'zipkin', not an installed propagator", id="an unknown name"),
    pytest.param("b3,,tracecontext", "has an empty name", id="an empty item"),
    pytest.param("none,b3", "'none' turns propagation off", id="none beside another"),
    pytest.param("b3," * 600, "characters long", id="an oversized value"),
    pytest.param(",".join(f"p{i}" for i in range(20)), "at most 16", id="too many names"),
    pytest.param("tracecontext\n,b3\x00", "not an installed propagator", id="control characters"),
])
def test_a_bad_otel_propagators_is_refused_with_its_reason(value: str, message: str) -> None:
    with pytest.raises(PropagationError, match=message):
        propagator_names({"OTEL_PROPAGATORS": value})


# Carriers here are plain dicts, so their names are lower-case, as B3's getter asks for them; the
# service reads aiohttp's case-insensitive headers (test_tracing.py sends them mixed-case).
def _extracted(env: dict[str, str], headers: dict[str, str]) -> trace.SpanContext:
    context = propagator_from_env(env).extract(headers)
    return trace.get_current_span(context).get_span_context()


@pytest.mark.parametrize(("env", "headers"), [
    pytest.param({}, {"traceparent": f"00-{TRACE_ID}-{SPAN_ID}-01"}, id="tracecontext"),
    pytest.param({"OTEL_PROPAGATORS": "b3"}, {"b3": f"{TRACE_ID}-{SPAN_ID}-1"}, id="b3"),
    pytest.param({"OTEL_PROPAGATORS": "b3multi"},
                 {"x-b3-traceid": TRACE_ID, "x-b3-spanid": SPAN_ID, "x-b3-sampled": "1"},
                 id="b3multi"),
])
def test_each_propagator_reads_its_own_headers(env: dict[str, str],
                                               headers: dict[str, str]) -> None:
    found = _extracted(env, headers)
    assert format(found.trace_id, "032x") == TRACE_ID
    assert format(found.span_id, "016x") == SPAN_ID
    assert found.trace_flags.sampled


def test_a_format_not_listed_is_not_read() -> None:
    """Under B3 only, a traceparent is someone else's header: the trace starts here."""
    found = _extracted({"OTEL_PROPAGATORS": "b3"}, {"traceparent": f"00-{TRACE_ID}-{SPAN_ID}-01"})
    assert not found.is_valid
    assert not _extracted({"OTEL_PROPAGATORS": "none"},
                          {"traceparent": f"00-{TRACE_ID}-{SPAN_ID}-01"}).is_valid


def test_the_default_reads_baggage_too() -> None:
    context = propagator_from_env({}).extract({"baggage": "tenant=acme"})
    assert baggage.get_baggage("tenant", context) == "acme"


def test_a_b3_parent_reaches_the_engine_as_w3c_trace_context() -> None:
    """vLLM reads traceparent only: the engine's headers continue the B3 caller's trace."""
    tracing = setup_tracing(TracingSettings(), {"OTEL_PROPAGATORS": "b3multi"})
    parent = tracing.extract_context({"x-b3-traceid": TRACE_ID, "x-b3-spanid": SPAN_ID,
                                      "x-b3-sampled": "1"})
    span = tracing.tracer.start_span("server", context=parent)
    headers = inject_headers(span)
    span.end()
    own = format(span.get_span_context().span_id, "016x")
    assert headers == {"traceparent": f"00-{TRACE_ID}-{own}-01"}


@pytest.mark.parametrize(("env", "sampled"), [
    pytest.param({}, True, id="the default samples a new trace"),
    pytest.param({"OTEL_TRACES_SAMPLER": "always_off"}, False, id="always_off"),
    pytest.param({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0"}, False,
                 id="a ratio of 0"),
    pytest.param({"OTEL_TRACES_SAMPLER": "TraceIdRatio", "OTEL_TRACES_SAMPLER_ARG": " 1 "}, True,
                 id="a ratio of 1, names in any case"),
])
def test_the_sampler_decides_which_spans_name_an_exemplar(env: dict[str, str],
                                                          sampled: bool) -> None:
    tracing = setup_tracing(TracingSettings(), env)
    span = tracing.tracer.start_span("server")
    span.end()
    labels = exemplar(span)
    if sampled:
        assert labels == {"trace_id": format(span.get_span_context().trace_id, "032x")}
    else:
        assert labels is None


def test_a_parent_based_sampler_follows_the_callers_flag() -> None:
    tracing = setup_tracing(TracingSettings(), {"OTEL_PROPAGATORS": "b3"})
    for flag, sampled in (("0", False), ("1", True)):
        parent = tracing.extract_context({"b3": f"{TRACE_ID}-{SPAN_ID}-{flag}"})
        span = tracing.tracer.start_span("server", context=parent)
        span.end()
        assert (exemplar(span) is not None) is sampled
        assert inject_headers(span)["traceparent"].endswith("-01" if sampled else "-00")


def test_the_ratio_samplers_take_their_argument() -> None:
    ratio = sampler_from_env({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                              "OTEL_TRACES_SAMPLER_ARG": "0.25"})
    assert isinstance(ratio, ParentBasedTraceIdRatio)
    assert "0.25" in ratio.get_description()  # type: ignore[no-untyped-call]
    plain = sampler_from_env({"OTEL_TRACES_SAMPLER": "traceidratio"})
    assert isinstance(plain, TraceIdRatioBased) and plain.rate == 1.0


@pytest.mark.parametrize(("env", "message"), [
    pytest.param({"OTEL_TRACES_SAMPLER": "sometimes"}, "not a sampler the service knows",
                 id="an unknown sampler"),
    pytest.param({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "ten%"},
                 "is not a number", id="a ratio that is not a number"),
    pytest.param({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1.5"},
                 r"must be in \[0, 1\]", id="a ratio above 1"),
    pytest.param({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "nan"},
                 r"must be in \[0, 1\]", id="NaN"),
    pytest.param({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "9" * 5000},
                 r"must be in \[0, 1\]", id="an oversized argument"),
])
def test_a_bad_sampler_is_refused_not_replaced_by_record_everything(
    env: dict[str, str], message: str,
) -> None:
    with pytest.raises(SamplingError, match=message):
        sampler_from_env(env)


def test_the_start_up_check_reports_every_tracing_mistake_at_once() -> None:
    with pytest.raises(ValueError, match="'zipkin'") as raised:
        check_tracing_env({"OTEL_PROPAGATORS": "zipkin", "OTEL_TRACES_SAMPLER": "sometimes"})
    assert "'sometimes'" in str(raised.value)
    check_tracing_env({"OTEL_PROPAGATORS": "b3multi,tracecontext,baggage",
                       "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                       "OTEL_TRACES_SAMPLER_ARG": "0.1"})
