"""Every metric name the inference service exposes, in one place.

Generators (``alerts``, ``dashboards``) import these; nobody retypes them. ``VLLM_*`` are vLLM's
own names, which the ``sim`` engine emits identically so that boards and rules built on them also
work on an existing vLLM fleet. Counters are named without ``_total`` as prometheus_client
declares them; the exposed series carry ``_total`` (see :func:`counter_series`).
"""

from __future__ import annotations

from typing import Final

# ---- the service's own series, as seen on the HTTP stream ---
TIME_TO_FIRST_TOKEN: Final = "governor_time_to_first_token_seconds"
INTER_TOKEN_LATENCY: Final = "governor_inter_token_latency_seconds"
REQUEST_DURATION: Final = "governor_request_duration_seconds"
REQUESTS: Final = "governor_requests"  # counter {route, code}
REQUESTS_IN_FLIGHT: Final = "governor_requests_in_flight"
QUEUE_DEPTH: Final = "governor_queue_depth"  # admission queue, waiting for an engine slot
ADMISSION_REJECTIONS: Final = "governor_admission_rejections"  # counter {reason}
PROMPT_TOKENS: Final = "governor_prompt_tokens"  # counter
GENERATION_TOKENS: Final = "governor_generation_tokens"  # counter
BATCHING_LIMIT: Final = "governor_batching_limit"  # gauge {param}
BATCHING_FLOOR: Final = "governor_batching_floor"  # gauge {param}
BATCHING_CEILING: Final = "governor_batching_ceiling"  # gauge {param}
BATCHING_CHANGES: Final = "governor_batching_changes"  # counter {result}
ENGINE_READY: Final = "governor_engine_ready"  # gauge 0/1
SERVICE_INFO: Final = "governor_service"  # info {engine, model, version}

# Label names.
LABEL_MODEL: Final = "model"
LABEL_ROUTE: Final = "route"
LABEL_CODE: Final = "code"
LABEL_PARAM: Final = "param"
LABEL_REASON: Final = "reason"
LABEL_RESULT: Final = "result"
EXEMPLAR_TRACE_ID: Final = "trace_id"

PARAM_MAX_NUM_SEQS: Final = "max_num_seqs"
PARAM_MAX_NUM_BATCHED_TOKENS: Final = "max_num_batched_tokens"

# Latency buckets (seconds). They contain the default SLO thresholds exactly (0.12 s inter-token,
# 1 s time to first token) and enough edges around them for histogram_quantile to be honest.
INTER_TOKEN_LATENCY_BUCKETS: Final[tuple[float, ...]] = (
    0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.06, 0.075, 0.09, 0.1, 0.12, 0.15, 0.2,
    0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
)
TIME_TO_FIRST_TOKEN_BUCKETS: Final[tuple[float, ...]] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.75, 1.0, 1.5, 2.0, 2.5,
    5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)
REQUEST_DURATION_BUCKETS: Final[tuple[float, ...]] = (
    0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
    90.0, 120.0, 240.0, 480.0,
)

# ---- vLLM's own engine series (emitted by vLLM itself, or identically by the sim engine) ---
VLLM_NUM_REQUESTS_RUNNING: Final = "vllm:num_requests_running"
VLLM_NUM_REQUESTS_WAITING: Final = "vllm:num_requests_waiting"
VLLM_KV_CACHE_USAGE: Final = "vllm:kv_cache_usage_perc"  # a 0..1 fraction despite the name
VLLM_TIME_TO_FIRST_TOKEN: Final = "vllm:time_to_first_token_seconds"
VLLM_INTER_TOKEN_LATENCY: Final = "vllm:inter_token_latency_seconds"
VLLM_E2E_REQUEST_LATENCY: Final = "vllm:e2e_request_latency_seconds"
VLLM_REQUEST_QUEUE_TIME: Final = "vllm:request_queue_time_seconds"
VLLM_REQUEST_PREFILL_TIME: Final = "vllm:request_prefill_time_seconds"
VLLM_REQUEST_DECODE_TIME: Final = "vllm:request_decode_time_seconds"
VLLM_PROMPT_TOKENS: Final = "vllm:prompt_tokens"  # counter
VLLM_GENERATION_TOKENS: Final = "vllm:generation_tokens"  # counter
VLLM_NUM_PREEMPTIONS: Final = "vllm:num_preemptions"  # counter
VLLM_PREFIX_CACHE_QUERIES: Final = "vllm:prefix_cache_queries"  # counter, in tokens
VLLM_PREFIX_CACHE_HITS: Final = "vllm:prefix_cache_hits"  # counter, in tokens
VLLM_REQUEST_SUCCESS: Final = "vllm:request_success"  # counter {finished_reason}
VLLM_ITERATION_TOKENS: Final = "vllm:iteration_tokens_total"  # histogram (the name ends in _total)

VLLM_LABEL_MODEL: Final = "model_name"
VLLM_LABEL_ENGINE: Final = "engine"
VLLM_LABEL_FINISHED_REASON: Final = "finished_reason"

# vLLM's default buckets (v1/metrics/buckets.py), so sim histograms read like the real ones.
VLLM_TTFT_BUCKETS: Final[tuple[float, ...]] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)
VLLM_ITL_BUCKETS: Final[tuple[float, ...]] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
)
VLLM_REQUEST_LATENCY_BUCKETS: Final[tuple[float, ...]] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
)
VLLM_ITERATION_TOKENS_BUCKETS: Final[tuple[float, ...]] = tuple(float(2**i) for i in range(15))


def counter_series(name: str) -> str:
    """A counter's exposed sample: ``vllm:num_preemptions`` → ``vllm:num_preemptions_total``."""
    return name if name.endswith("_total") else name + "_total"


def bucket_series(name: str) -> str:
    return name + "_bucket"
