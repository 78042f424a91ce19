"""Which trace context the service reads from its callers, and which its engine reads from it.

``OTEL_PROPAGATORS`` names the formats, comma-separated, as OpenTelemetry's SDK configuration
defines it: ``tracecontext`` (W3C ``traceparent``/``tracestate``) and ``baggage`` (W3C
``baggage``) by default, ``b3`` (Zipkin's single ``b3`` header) and ``b3multi`` (``X-B3-TraceId``,
``X-B3-SpanId``, ``X-B3-Sampled``) for a mesh or gateway that speaks B3, ``none`` for no
propagation at all (every request starts a trace). Each name is an ``opentelemetry_propagator``
entry point, so another installed propagator (``jaeger``, ``xray``) works the same way. Unlike the
SDK, which fails on an unknown name the first time ``opentelemetry.propagate`` is imported (inside
vLLM, mid-start), the service refuses it before anything starts::

    propagator = propagator_from_env({"OTEL_PROPAGATORS": "b3multi,tracecontext"})
    context = propagator.extract(request.headers)

The engine's hop is always W3C trace context: vLLM's ``generate(trace_headers=…)`` reads
``traceparent`` only, whatever the caller spoke, so a B3 parent reaches vLLM's ``llm_request``
span through the service's own span.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import Final

from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

PROPAGATORS_VARIABLE: Final = "OTEL_PROPAGATORS"
DEFAULT_PROPAGATORS: Final = ("tracecontext", "baggage")
NONE: Final = "none"
ENTRY_POINT_GROUP: Final = "opentelemetry_propagator"
# A list this long is a mistake (each name is one header format), and it bounds the message.
MAX_PROPAGATORS: Final = 16
MAX_VALUE_CHARS: Final = 1024

# What the engine reads: W3C trace context.
ENGINE_PROPAGATOR: Final = TraceContextTextMapPropagator()


class PropagationError(ValueError):
    """``OTEL_PROPAGATORS`` names something the service cannot propagate."""


def propagator_names(env: Mapping[str, str]) -> tuple[str, ...]:
    """The names ``OTEL_PROPAGATORS`` lists, in order, without repeats; the default when it is
    unset or blank; ``()`` for ``none``. Raises :class:`PropagationError`."""
    raw = env.get(PROPAGATORS_VARIABLE, "")
    if len(raw) > MAX_VALUE_CHARS:
        raise PropagationError(
            f"{PROPAGATORS_VARIABLE} is {len(raw)} characters long; at most {MAX_VALUE_CHARS}")
    if not raw.strip():
        return DEFAULT_PROPAGATORS
    names = [name.strip().lower() for name in raw.split(",")]
    if "" in names:
        raise PropagationError(f"{PROPAGATORS_VARIABLE}={raw!r} has an empty name")
    if NONE in names:
        if len(set(names)) > 1:
            raise PropagationError(
                f"{PROPAGATORS_VARIABLE}={raw!r}: 'none' turns propagation off, it cannot be "
                "listed with other propagators")
        return ()
    unique = tuple(dict.fromkeys(names))
    if len(unique) > MAX_PROPAGATORS:
        raise PropagationError(
            f"{PROPAGATORS_VARIABLE} lists {len(unique)} propagators; at most {MAX_PROPAGATORS}")
    installed = {entry.name for entry in entry_points(group=ENTRY_POINT_GROUP)}
    unknown = [name for name in unique if name not in installed]
    if unknown:
        raise PropagationError(
            f"{PROPAGATORS_VARIABLE} names {', '.join(map(repr, unknown))}, not an installed "
            f"propagator; installed: {', '.join(sorted(installed))}")
    return unique


def make_propagator(names: tuple[str, ...]) -> TextMapPropagator:
    """One propagator that reads and writes every format ``names`` lists, in that order."""
    found = {entry.name: entry for entry in entry_points(group=ENTRY_POINT_GROUP)}
    return CompositePropagator([found[name].load()() for name in names])


def propagator_from_env(env: Mapping[str, str]) -> TextMapPropagator:
    return make_propagator(propagator_names(env))
