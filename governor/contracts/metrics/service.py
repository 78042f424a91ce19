"""The inference service's own ``governor_*`` series, as seen on the HTTP stream.

Latencies are what a client sees; each latency observation carries the trace id as an exemplar
(:data:`EXEMPLAR_TRACE_ID`). The three latency histograms may be the SLIs of ``slo.yaml``, so
their buckets hold the default thresholds exactly (0.12 s inter-token, 1 s time to first token)
with enough edges around them for ``histogram_quantile`` to be honest.
"""

from __future__ import annotations

from typing import Final

from governor.contracts.declaration import Metric
from governor.contracts.stages import BETWEEN_TOKENS, FIRST_TOKEN, WHOLE_REQUEST, Path

# ---- label names and values ----------------------------------------------------------------------
LABEL_MODEL: Final = "model"
LABEL_ROUTE: Final = "route"
LABEL_CODE: Final = "code"
LABEL_PARAM: Final = "param"
LABEL_REASON: Final = "reason"
LABEL_RESULT: Final = "result"
LABEL_ENGINE: Final = "engine"
LABEL_VERSION: Final = "version"
LABEL_STAGE: Final = "stage"  # a governor.contracts.stages.Stage
LABEL_UUID: Final = "uuid"  # a GPU's, as NVML and the GPU exporter's uuid label give it
# The request class (``classes`` of slo.yaml) a generation request was put in; without classes
# every generation request is in DEFAULT_CLASS. Requests never classified (other routes, and
# generation requests refused before their prompt was read) carry the empty value, which
# Prometheus shows as no label at all.
LABEL_CLASS: Final = "class"
DEFAULT_CLASS: Final = "default"
UNCLASSIFIED: Final = ""
EXEMPLAR_TRACE_ID: Final = "trace_id"
# The phases of a start on STARTUP: the engine's own start (weights, compilation, KV cache), then
# the warm-up requests (governor.inference.warmup) before /health answers 200.
LABEL_PHASE: Final = "phase"
PHASE_ENGINE: Final = "engine"
PHASE_WARMUP: Final = "warmup"
STARTUP_PHASES: Final = (PHASE_ENGINE, PHASE_WARMUP)
# Values of ``round`` on WARMUP_FIRST_TOKEN: the warm-up's first round (a cold engine) and its
# last (as warm as the warm-up made it).
LABEL_ROUND: Final = "round"
ROUND_FIRST: Final = "first"
ROUND_LAST: Final = "last"

# Values of ``reason`` on ADMISSION_REJECTIONS: the queue was full (429), a waiting request gave
# its place to a request of a higher class (429), or a request waited too long for an engine slot
# (503). The deadline gate (governor.admission.deadline) adds: refused at arrival because the
# prompt tokens ahead, and its own, would take longer to prefill than its first-token deadline
# leaves (429), or because more prompt tokens were ahead than the static bound allows (429);
# shed while waiting because its deadline passed before an engine slot came free (429).
REASON_QUEUE_FULL: Final = "queue_full"
REASON_SHED: Final = "shed"
REASON_QUEUE_TIMEOUT: Final = "queue_timeout"
REASON_DEADLINE: Final = "deadline"
REASON_TOKENS_AHEAD: Final = "tokens_ahead"
REASON_DEADLINE_PASSED: Final = "deadline_passed"
# Refused at arrival (the request never waited) and turned away after waiting.
REFUSAL_REASONS: Final = (REASON_QUEUE_FULL, REASON_DEADLINE, REASON_TOKENS_AHEAD)
SHED_REASONS: Final = (REASON_SHED, REASON_DEADLINE_PASSED, REASON_QUEUE_TIMEOUT)

# Values of ``reason`` on CONNECTIONS_REFUSED: the service held --max-connections already, or
# this client address its share (--max-connections-per-client), and the connection asked for
# neither /health nor /metrics (503, closed unread); or a request's headers did not arrive within
# --header-timeout (closed).
REASON_MAX_CONNECTIONS: Final = "max_connections"
REASON_MAX_CONNECTIONS_PER_CLIENT: Final = "max_connections_per_client"
REASON_HEADER_TIMEOUT: Final = "header_timeout"
CONNECTION_REFUSAL_REASONS: Final = (REASON_MAX_CONNECTIONS, REASON_MAX_CONNECTIONS_PER_CLIENT,
                                     REASON_HEADER_TIMEOUT)

# Values of ``reason`` on PROBE_MARK_REJECTED: the header's value is not the probe token (a guess,
# an empty value, the header given twice), or the service has no probe token to compare with.
REASON_WRONG_TOKEN: Final = "wrong_token"
REASON_NO_TOKEN: Final = "no_token_configured"
PROBE_MARK_REJECTION_REASONS: Final = (REASON_WRONG_TOKEN, REASON_NO_TOKEN)

# Values of ``result`` on BATCHING_CHANGES.
RESULT_APPLIED: Final = "applied"
RESULT_REJECTED: Final = "rejected"  # a malformed request, or limits out of bounds
RESULT_FAILED: Final = "failed"  # the engine could not apply them

# Values of ``param``: vLLM's two continuous-batching knobs, as the admin API names them.
PARAM_MAX_NUM_SEQS: Final = "max_num_seqs"
PARAM_MAX_NUM_BATCHED_TOKENS: Final = "max_num_batched_tokens"

# ---- latency, as the client sees it ------------------------------------------------------------
TIME_TO_FIRST_TOKEN: Final = Metric(
    "governor_time_to_first_token_seconds", "histogram",
    "Time from the request's first byte to the first streamed token, as seen by the client.",
    "seconds",
    (LABEL_MODEL, LABEL_CLASS),
    (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.75, 1.0, 1.5, 2.0,
     2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0),
)
INTER_TOKEN_LATENCY: Final = Metric(
    "governor_inter_token_latency_seconds", "histogram",
    "Time between successive streamed tokens of one response, as seen by the client.", "seconds",
    (LABEL_MODEL, LABEL_CLASS),
    (0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.06, 0.075, 0.09, 0.1, 0.12, 0.15, 0.2,
     0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0),
)
REQUEST_DURATION: Final = Metric(
    "governor_request_duration_seconds", "histogram",
    "Time from the request's first byte read to the last byte of its response written.", "seconds",
    (LABEL_ROUTE, LABEL_CLASS),
    (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0,
     60.0, 90.0, 120.0, 240.0, 480.0),
)

# ---- where a request's time goes ---------------------------------------------------------------
# One bucket set for every stage, so 1-2-5 steps from 50 µs (decoding a small body, rendering a
# short chat) to 60 s (the admission queue's default timeout; the engine's stages of a long
# generation may pass it, and their mean stays exact in _sum): a quantile read between two
# edges is off by at most the step, 2.5x, across six decades.
STAGE_BUCKETS: Final = (0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05,
                        0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 60.0)
REQUEST_STAGE: Final = Metric(
    "governor_request_stage_seconds", "histogram",
    "Time a generation request that reached the engine spent in each stage, from its first "
    "byte read to its last byte written; a request's stages add up to its duration (other: "
    "the time inside no named stage; parse: decoding and validating the body).", "seconds",
    (LABEL_STAGE,), STAGE_BUCKETS,
)
# Powers of four: a chat turn (a few hundred bytes) to the largest body accepted (4 MiB).
PROMPT_SIZE_BUCKETS: Final = (64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0,
                              1048576.0, 4194304.0)
REQUEST_PROMPT_BYTES: Final = Metric(
    "governor_request_prompt_bytes", "histogram",
    "UTF-8 bytes of each admitted generation request's prompt, as rendered for the engine.",
    "bytes",
    (), PROMPT_SIZE_BUCKETS,
)
REQUEST_PROMPT_TOKENS: Final = Metric(
    "governor_request_prompt_tokens", "histogram",
    "Tokens of each admitted generation request's prompt.", "tokens", (), PROMPT_SIZE_BUCKETS,
)
# Time to first token by the prompt's size: the smallest of these token counts the prompt fits
# in, or "more" (five label values, so the series stay few).
LABEL_PROMPT_SIZE: Final = "prompt_size"
PROMPT_SIZE_LIMITS: Final = (128, 512, 2048, 8192)
PROMPT_SIZE_MORE: Final = "more"
PROMPT_SIZES: Final = (*(str(limit) for limit in PROMPT_SIZE_LIMITS), PROMPT_SIZE_MORE)
TIME_TO_FIRST_TOKEN_BY_PROMPT: Final = Metric(
    "governor_time_to_first_token_by_prompt_seconds", "histogram",
    "Time to first token by prompt size: prompt_size is the smallest of 128, 512, 2048 and "
    "8192 tokens the prompt fits in, or more.", "seconds", (LABEL_PROMPT_SIZE,),
    TIME_TO_FIRST_TOKEN.buckets)


def prompt_size(tokens: int) -> str:
    """The ``prompt_size`` label of a prompt of ``tokens`` tokens::

        >>> prompt_size(100), prompt_size(128), prompt_size(129), prompt_size(100_000)
        ('128', '128', '512', 'more')
    """
    return next((str(limit) for limit in PROMPT_SIZE_LIMITS if tokens <= limit),
                PROMPT_SIZE_MORE)

# ---- requests and tokens ---------------------------------------------------------------------
REQUESTS: Final = Metric(
    "governor_requests", "counter",
    "Finished HTTP requests by route, status code and request class.", "requests",
    (LABEL_ROUTE, LABEL_CODE, LABEL_CLASS))
# Requests marked with the probe's header and token (governor.contracts.endpoints.PROBE_HEADER):
# counted here and in no other series of the service's, so the synthetic probe never counts in an
# SLI.
PROBE_REQUESTS_SERVED: Final = Metric(
    "governor_probe_requests_served", "counter",
    "Finished HTTP requests marked as the synthetic probe's, by route and status code; they are "
    "left out of every other request and latency series of the service.", "requests",
    (LABEL_ROUTE, LABEL_CODE))
# Requests that carried the probe's header without its token: counted as ordinary requests, and
# here by reason. The header's value is never a label or a log line.
PROBE_MARK_REJECTED: Final = Metric(
    "governor_probe_mark_rejected", "counter",
    "Requests marked as the synthetic probe's whose mark was refused (a token other than the "
    "service's, or no probe token on the service), by reason; they count as ordinary requests.",
    "requests", (LABEL_REASON,))
REQUESTS_IN_FLIGHT: Final = Metric(
    "governor_requests_in_flight", "gauge", "Generation requests holding an engine slot.",
    "requests")
QUEUE_DEPTH: Final = Metric(
    "governor_queue_depth", "gauge", "Generation requests waiting in the admission queue.",
    "requests")
ADMISSION_REJECTIONS: Final = Metric(
    "governor_admission_rejections", "counter",
    "Requests turned away by the admission queue, by reason and request class.", "requests",
    (LABEL_REASON, LABEL_CLASS))
ADMITTED_REQUESTS: Final = Metric(
    "governor_admitted_requests", "counter",
    "Generation requests the admission queue let into the engine, by request class.",
    "requests", (LABEL_CLASS,))
# The deadline gate's prediction beside what happened, so its error shows: both from the
# admission decision to the first token, observed together at the first token of each admitted
# request the gate predicted for (none before it has measured the prefill rate). The time to
# first token's edges: the predictions are read against the same targets.
ADMISSION_PREDICTED_WAIT: Final = Metric(
    "governor_admission_predicted_wait_seconds", "histogram",
    "Wait from the admission decision to the first token as the deadline gate predicted it (the "
    "prompt tokens ahead and the request's own over the measured prefill rate).", "seconds",
    (LABEL_CLASS,), TIME_TO_FIRST_TOKEN.buckets)
ADMISSION_WAIT: Final = Metric(
    "governor_admission_wait_seconds", "histogram",
    "Wait from the admission decision to the first token, of the requests the deadline gate "
    "predicted it for.", "seconds", (LABEL_CLASS,), TIME_TO_FIRST_TOKEN.buckets)
ADMISSION_PREFILL_RATE: Final = Metric(
    "governor_admission_prefill_tokens_per_second", "gauge",
    "Prompt tokens the engine brings to their first token per second it has any pending, as the "
    "deadline gate measures it (0 until measured).", "tokens per second")
ADMISSION_DEADLINE_SLACK: Final = Metric(
    "governor_admission_deadline_slack", "gauge",
    "Factor on each class's first-token target that makes its deadline (PUT /admin/admission).")
# Only in front of stock vLLM 0.32 and later (governor.vllm), where vLLM has the bound.
ADMISSION_VLLM_QUEUED_TOKENS: Final = Metric(
    "governor_admission_vllm_max_num_queued_tokens", "gauge",
    "vLLM's own bound on the prompt tokens of an API process's requests in prefill "
    "(max_num_queued_tokens, PUT /admin/admission), +Inf while unbounded; absent where vLLM has "
    "none.", "tokens")
ADMISSION_BACKLOG: Final = Metric(
    "governor_admission_backlog_prompt_tokens", "gauge",
    "Prompt tokens of admitted requests without a first token yet, waiting for an engine slot "
    "or in the engine: the backlog the deadline gate divides by the prefill rate.", "tokens")
PROMPT_TOKENS: Final = Metric(
    "governor_prompt_tokens", "counter", "Prompt tokens of admitted requests.", "tokens",
    (LABEL_MODEL,))
GENERATION_TOKENS: Final = Metric(
    "governor_generation_tokens", "counter", "Tokens generated and sent to clients.", "tokens",
    (LABEL_MODEL,))
STREAM_WRITE_SECONDS: Final = Metric(
    "governor_stream_write_seconds", "counter",
    "Seconds streamed responses spent encoding and writing to their clients after the first "
    "token (waits for a slow reader included), counted as they pass.", "seconds",
    (LABEL_MODEL,))

# ---- the batching knobs --------------------------------------------------------------------------
BATCHING_LIMIT: Final = Metric(
    "governor_batching_limit", "gauge", "Batching limit in force in the engine.", "",
    (LABEL_PARAM,))
BATCHING_FLOOR: Final = Metric(
    "governor_batching_floor", "gauge", "Lowest batching limit the admin API accepts.", "",
    (LABEL_PARAM,))
BATCHING_CEILING: Final = Metric(
    "governor_batching_ceiling", "gauge",
    "Start-up batching limit; live retuning never goes above it.", "", (LABEL_PARAM,))
BATCHING_CHANGES: Final = Metric(
    "governor_batching_changes", "counter", "Admin changes of the batching limits, by result.",
    "changes", (LABEL_RESULT,))

# ---- the service itself --------------------------------------------------------------------------
CONNECTIONS_REFUSED: Final = Metric(
    "governor_connections_refused", "counter",
    "Connections refused at a connection limit, or closed before their request's headers "
    "arrived, by reason.", "connections", (LABEL_REASON,))
ENGINE_READY: Final = Metric(
    "governor_engine_ready", "gauge", "1 while the engine is started and alive.")
STARTUP: Final = Metric(
    "governor_startup_seconds", "gauge",
    "Seconds each phase of the service's start took, set as it ends: the engine's start, then "
    "the warm-up requests sent before /health answers 200.", "seconds", (LABEL_PHASE,))
WARMUP_FIRST_TOKEN: Final = Metric(
    "governor_warmup_time_to_first_token_seconds", "gauge",
    "Slowest time to first token of the warm-up's first round (a cold engine) and of its last.",
    "seconds", (LABEL_ROUND,))
SERVICE_INFO: Final = Metric(
    "governor_service", "info", "The service's engine and model.", "",
    (LABEL_ENGINE, LABEL_MODEL, LABEL_VERSION))
# One series per GPU the engine runs on: joins the service's series to the GPU exporter's
# (``gpu_info``'s uuid) and dcgm-exporter's (``UUID``).
ENGINE_GPU_INFO: Final = Metric(
    "governor_engine_gpu", "info", "A GPU the engine runs on, by its UUID.", "", (LABEL_UUID,))

# The histograms a latency SLI of slo.yaml may count (its threshold must be one of their edges).
LATENCY_HISTOGRAMS: Final = (INTER_TOKEN_LATENCY, TIME_TO_FIRST_TOKEN, REQUEST_DURATION)
# The stages each of them lies on (governor.contracts.stages).
STAGE_PATHS: Final[dict[str, Path]] = {
    TIME_TO_FIRST_TOKEN.name: FIRST_TOKEN,
    INTER_TOKEN_LATENCY.name: BETWEEN_TOKENS,
    REQUEST_DURATION.name: WHOLE_REQUEST,
}
