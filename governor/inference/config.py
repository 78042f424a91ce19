"""The service's configuration: one frozen dataclass, validated once where it enters."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from governor.admission.deadline import DEFAULT_CALIBRATION_QUANTILE, DeadlineSettings
from governor.common.secrets import Secret
from governor.contracts.endpoints import INFERENCE, LISTEN_HOST
from governor.contracts.metrics.service import LATENCY_HISTOGRAMS
from governor.inference.engines.settings import EngineSettings
from governor.inference.telemetry.request_log import RequestLogSettings
from governor.inference.telemetry.tracing import TracingSettings
from governor.inference.warmup import WarmupSettings
from governor.slo.buckets import edges_problem
from governor.slo.classes import RequestClasses

# A stream's send buffer when capped: at least a few segments, at most the kernel's usual ceiling.
MIN_SEND_BUFFER = 4096
MAX_SEND_BUFFER = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class AdmissionSettings:
    """Bounded admission: at most ``max_in_flight`` requests in the engine, ``max_queue`` waiting.

    Beyond both, a request is answered 429 with ``Retry-After``; a request that waited
    ``queue_timeout_seconds`` for an engine slot gets 503 with ``Retry-After``. A request that
    runs is never taken back by the service. With request classes, each class may also limit its
    own requests in flight, and a full queue sheds its lowest class first (429 with
    ``Retry-After``); see :mod:`governor.admission.policy`.

    With first-token targets (slo.yaml's time-to-first-token SLO, per class), a request is
    refused at arrival (429) when the prompt tokens ahead of it, and its own, would take longer to
    prefill than ``deadline_slack`` times its target leaves, and shed (429) if it is still
    waiting when that deadline passes; ``max_tokens_ahead`` refuses past a fixed number of
    prompt tokens ahead instead or as well. See :mod:`governor.admission.deadline`.
    """

    max_in_flight: int = 512
    max_queue: int = 1024
    queue_timeout_seconds: float = 60.0
    retry_after_seconds: int = 1
    # Class name → its time-to-first-token target in seconds; empty: no deadlines.
    first_token_targets: tuple[tuple[str, float], ...] = ()
    deadline_slack: float = 1.0
    max_tokens_ahead: int | None = None
    # The deadlines' calibration quantile (DeadlineSettings.calibration_quantile); None: off.
    deadline_calibration: float | None = DEFAULT_CALIBRATION_QUANTILE

    def deadline_settings(self) -> DeadlineSettings:
        return DeadlineSettings(slack=self.deadline_slack, max_tokens_ahead=self.max_tokens_ahead,
                                calibration_quantile=self.deadline_calibration)


@dataclass(frozen=True, slots=True)
class ConnectionSettings:
    """What one client may hold of the service, and for how long.

    At most ``max_connections`` connections are open, and ``max_connections_per_client`` from
    one client address (``None``: half of ``max_connections``); one more is answered 503 and
    closed at once, unless it asks for ``/health`` or ``/metrics`` (served on a reserved place
    once its whole request head has arrived). A request's headers must arrive within
    ``header_timeout_seconds`` of its first byte (for a new connection, of its opening), else
    the connection is closed; its body within ``body_timeout_seconds`` plus a second per MiB of
    it, else a 408 (and the connection closes at most ``body_timeout_seconds`` later). A write
    that waits ``write_timeout_seconds`` for a client that does not read ends its request
    (counted 408: the client's fault), which frees its engine slot. A request still running
    ``request_timeout_seconds`` after it arrived ends too: 408 if its body had not arrived, else
    504 (a stream ends with an error event). Idle connections close after
    ``keepalive_timeout_seconds``. A stream's socket send buffer is capped at
    ``stream_send_buffer_bytes`` and its writes wait for the kernel to take them (0: the kernel's
    own buffer, which lets a slow reader's tokens queue unseen; see ``http.timeouts``).
    """

    max_connections: int = 2048
    write_timeout_seconds: float = 30.0
    # The openai client's own default timeout: it would have given up by then anyway.
    request_timeout_seconds: float = 600.0
    keepalive_timeout_seconds: float = 75.0
    # A client sends its body right after its headers; one that stalls it loses its connection
    # within seconds. The per-MiB second is the pace large bodies held to before (4 MiB in 5 s).
    body_timeout_seconds: float = 1.0
    # Half: one client (a load generator, a proxy) may hold many, never all.
    max_connections_per_client: int | None = None
    # Headers come in one or two packets; a client trickling them loses its connection soon.
    header_timeout_seconds: float = 10.0
    stream_send_buffer_bytes: int = 16384

    @property
    def per_client_limit(self) -> int:
        """Connections one client address may hold."""
        if self.max_connections_per_client is not None:
            return self.max_connections_per_client
        return max(1, self.max_connections // 2)


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    host: str = LISTEN_HOST
    port: int = INFERENCE.port
    engine: EngineSettings = field(default_factory=EngineSettings)
    admission: AdmissionSettings = field(default_factory=AdmissionSettings)
    connections: ConnectionSettings = field(default_factory=ConnectionSettings)
    tracing: TracingSettings = field(default_factory=TracingSettings)
    # ``--request-log``: one JSON line per generation request (off unless a path is given).
    request_log: RequestLogSettings = field(default_factory=RequestLogSettings)
    # The request classes of slo.yaml (``--slo``): priorities, admission limits, class labels.
    classes: RequestClasses = field(default_factory=RequestClasses)
    # Bearer token of the admin API; None disables the admin API (every call answers 401).
    admin_token: Secret | None = None
    # The synthetic probe's token: a request whose X-Governor-Probe header carries it is left out
    # of the SLIs' series; None: no request is (every mark counts as an ordinary request).
    probe_token: Secret | None = None
    max_body_bytes: int = 4 * 1024 * 1024
    # Threads that decode, validate, render and tokenize requests, off the event loop, and as
    # many large requests read at once. One keeps a flood of large prompts from holding
    # Python's lock against the event loop (measured by governor bench hostile); more help a
    # tokenizer that releases it (vLLM's, in Rust) with many long prompts.
    tokenizer_threads: int = 1
    # Largest ``max_tokens`` a request may ask for (also bounded by the model's context).
    max_tokens_limit: int = 32768
    # Completions default (OpenAI's legacy default is 16); chat defaults to what fits the context.
    default_completion_max_tokens: int = 16
    # The latency histograms' edges where slo.yaml's thresholds add some (``--slo``): histogram
    # name → edges; a histogram not named keeps its declared edges.
    latency_buckets: tuple[tuple[str, tuple[float, ...]], ...] = ()
    # Requests sent through the engine before /health answers 200 (``--warmup``).
    warmup: WarmupSettings = field(default_factory=WarmupSettings)

    def __post_init__(self) -> None:
        errors = []
        if not 0 < self.port < 65536:
            errors.append(f"port must be in 1..65535, got {self.port}")
        if self.max_body_bytes < 1024:
            errors.append(f"max_body_bytes must be at least 1024, got {self.max_body_bytes}")
        if self.admission.max_in_flight < 1:
            errors.append("admission.max_in_flight must be positive")
        if self.admission.max_queue < 0:
            errors.append("admission.max_queue must not be negative")
        try:
            self.admission.deadline_settings()
        except ValueError as exc:
            errors.append(f"admission: {exc}")
        unknown = sorted({name for name, _ in self.admission.first_token_targets}
                         - set(self.classes.names))
        if unknown:
            errors.append(f"admission.first_token_targets names no request class: {unknown}")
        if any(not (math.isfinite(t) and t > 0) for _, t in self.admission.first_token_targets):
            errors.append("admission.first_token_targets must be positive seconds")
        errors.extend(_latency_bucket_errors(self.latency_buckets))
        connections = self.connections
        if connections.max_connections < 1:
            errors.append("connections.max_connections must be positive")
        per_client = connections.max_connections_per_client
        if per_client is not None and not 1 <= per_client <= connections.max_connections:
            errors.append("connections.max_connections_per_client must be in 1..max_connections"
                          f" ({connections.max_connections}), got {per_client}")
        sndbuf = connections.stream_send_buffer_bytes
        if sndbuf != 0 and not MIN_SEND_BUFFER <= sndbuf <= MAX_SEND_BUFFER:
            errors.append("connections.stream_send_buffer_bytes must be 0 (the kernel's) or in "
                          f"{MIN_SEND_BUFFER}..{MAX_SEND_BUFFER}, got {sndbuf}")
        for name in ("write_timeout_seconds", "request_timeout_seconds",
                     "keepalive_timeout_seconds", "body_timeout_seconds",
                     "header_timeout_seconds"):
            if not getattr(connections, name) > 0:
                errors.append(f"connections.{name} must be positive")
        if self.tokenizer_threads < 1:
            errors.append(f"tokenizer_threads must be positive, got {self.tokenizer_threads}")
        if self.max_tokens_limit < 1:
            errors.append("max_tokens_limit must be positive")
        if errors:
            raise ValueError("invalid service configuration: " + "; ".join(errors))


def _latency_bucket_errors(buckets: tuple[tuple[str, tuple[float, ...]], ...]) -> list[str]:
    known = {metric.name for metric in LATENCY_HISTOGRAMS}
    errors = []
    for name, edges in buckets:
        if name not in known:
            errors.append(f"latency_buckets: {name[:80]!r} is not one of the service's latency "
                          f"histograms ({', '.join(sorted(known))})")
        elif (problem := edges_problem(edges)) is not None:
            errors.append(f"latency_buckets: {name}: {problem}")
    return errors
