"""vLLM's own ``vllm:*`` engine series, as vLLM exposes them and the sim engine emits them, and
the HTTP series of stock ``vllm serve``.

Boards and rules built on these names work on a plain vLLM fleet as well as on Governor's sim.
Help texts, label names and buckets are vLLM's own, so a sim histogram reads like a real one.
vLLM >= 0.32 lets ``--custom-histogram-buckets`` replace the edges of a bucket family
(:data:`BUCKET_FAMILIES`); ``slo.yaml`` says so in ``vllm.custom_histogram_buckets``::

    >>> family_of("vllm:inter_token_latency_seconds")
    'inter_token_latency'
    >>> [m.name for m in BUCKET_FAMILIES["request_latency"]][:2]
    ['vllm:e2e_request_latency_seconds', 'vllm:request_queue_time_seconds']
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from governor.contracts.declaration import Metric

PREFIX: Final = "vllm:"

LABEL_MODEL: Final = "model_name"
LABEL_ENGINE: Final = "engine"
LABEL_FINISHED_REASON: Final = "finished_reason"
ENGINE_LABELS: Final = (LABEL_MODEL, LABEL_ENGINE)  # on every series

# vLLM's FinishReason values (the ``finished_reason`` label), all exposed from the start.
FINISHED_REASONS: Final = ("stop", "length", "abort", "error", "repetition")

TTFT_BUCKETS: Final = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)
ITL_BUCKETS: Final = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
)
REQUEST_LATENCY_BUCKETS: Final = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)
# vLLM's own (1, then powers of two from 8 to 16384), the same in 0.25, 0.26 and 0.32.
ITERATION_TOKENS_BUCKETS: Final = (1.0, *(float(2**i) for i in range(3, 15)))

# ---- scheduler state -----------------------------------------------------------------------------
NUM_REQUESTS_RUNNING: Final = Metric(
    "vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
    "requests", ENGINE_LABELS)
NUM_REQUESTS_WAITING: Final = Metric(
    "vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
    "requests", ENGINE_LABELS)
# A 0..1 fraction despite the name.
KV_CACHE_USAGE: Final = Metric(
    "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", "ratio",
    ENGINE_LABELS)

# ---- counters ------------------------------------------------------------------------------------
PROMPT_TOKENS: Final = Metric(
    "vllm:prompt_tokens", "counter", "Number of prefill tokens processed.", "tokens",
    ENGINE_LABELS)
GENERATION_TOKENS: Final = Metric(
    "vllm:generation_tokens", "counter", "Number of generation tokens processed.", "tokens",
    ENGINE_LABELS)
NUM_PREEMPTIONS: Final = Metric(
    "vllm:num_preemptions", "counter", "Cumulative number of preemption from the engine.",
    "requests", ENGINE_LABELS)
PREFIX_CACHE_QUERIES: Final = Metric(
    "vllm:prefix_cache_queries", "counter",
    "Prefix cache queries, in terms of number of queried tokens.", "tokens", ENGINE_LABELS)
PREFIX_CACHE_HITS: Final = Metric(
    "vllm:prefix_cache_hits", "counter",
    "Prefix cache hits, in terms of number of cached tokens.", "tokens", ENGINE_LABELS)
REQUEST_SUCCESS: Final = Metric(
    "vllm:request_success", "counter", "Count of successfully processed requests.", "requests",
    (*ENGINE_LABELS, LABEL_FINISHED_REASON))

# ---- series of vLLM's optional features, each only where the running vLLM has it -------------
# The admission limits (--max-num-queued-reqs, --max-num-queued-tokens): absent from 0.25,
# present in 0.32 and later; every reason reads 0 from the start. No ``engine`` label.
LABEL_REASON: Final = "reason"
ADMISSION_REJECTIONS: Final = Metric(
    "vllm:admission_rejections", "counter",
    "Number of admission attempts rejected by a queue limit, by reason.", "requests",
    (LABEL_MODEL, LABEL_REASON))
# Speculative decoding (--speculative-config): drafts proposed, draft tokens, tokens accepted.
SPEC_DECODE_DRAFTS: Final = Metric(
    "vllm:spec_decode_num_drafts", "counter", "Number of spec decoding drafts.", "drafts",
    ENGINE_LABELS)
SPEC_DECODE_DRAFT_TOKENS: Final = Metric(
    "vllm:spec_decode_num_draft_tokens", "counter", "Number of draft tokens.", "tokens",
    ENGINE_LABELS)
SPEC_DECODE_ACCEPTED_TOKENS: Final = Metric(
    "vllm:spec_decode_num_accepted_tokens", "counter", "Number of accepted tokens.", "tokens",
    ENGINE_LABELS)
# LoRA (--enable-lora): a gauge whose value is the time of its last update and whose labels
# carry the state, the adapters as comma-separated names.
LABEL_MAX_LORA: Final = "max_lora"
LABEL_RUNNING_LORA: Final = "running_lora_adapters"
LABEL_WAITING_LORA: Final = "waiting_lora_adapters"
LORA_REQUESTS_INFO: Final = Metric(
    "vllm:lora_requests_info", "gauge", "Running stats on lora requests.", "",
    (LABEL_MAX_LORA, LABEL_WAITING_LORA, LABEL_RUNNING_LORA))
# Prompt lengths: a 1-2-5 series of edges up to the server's max_model_len.
REQUEST_PROMPT_TOKENS: Final = Metric(
    "vllm:request_prompt_tokens", "histogram", "Number of prefill tokens processed.", "tokens",
    ENGINE_LABELS, (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0))
PROMPT_TOKENS_EDGES: Final = "1-2-5 up to max_model_len"

# ---- histograms (a latency SLI of slo.yaml may count any but the last) ------------------------
TIME_TO_FIRST_TOKEN: Final = Metric(
    "vllm:time_to_first_token_seconds", "histogram",
    "Histogram of time to first token in seconds.", "seconds", ENGINE_LABELS, TTFT_BUCKETS)
INTER_TOKEN_LATENCY: Final = Metric(
    "vllm:inter_token_latency_seconds", "histogram",
    "Histogram of inter-token latency in seconds.", "seconds", ENGINE_LABELS, ITL_BUCKETS)
E2E_REQUEST_LATENCY: Final = Metric(
    "vllm:e2e_request_latency_seconds", "histogram",
    "Histogram of e2e request latency in seconds.", "seconds", ENGINE_LABELS,
    REQUEST_LATENCY_BUCKETS)
REQUEST_QUEUE_TIME: Final = Metric(
    "vllm:request_queue_time_seconds", "histogram",
    "Histogram of time spent in WAITING phase for request.", "seconds", ENGINE_LABELS,
    REQUEST_LATENCY_BUCKETS)
REQUEST_PREFILL_TIME: Final = Metric(
    "vllm:request_prefill_time_seconds", "histogram",
    "Histogram of time spent in PREFILL phase for request.", "seconds", ENGINE_LABELS,
    REQUEST_LATENCY_BUCKETS)
REQUEST_DECODE_TIME: Final = Metric(
    "vllm:request_decode_time_seconds", "histogram",
    "Histogram of time spent in DECODE phase for request.", "seconds", ENGINE_LABELS,
    REQUEST_LATENCY_BUCKETS)
# vLLM >= 0.34 (vllm/renderers/metrics.py): templating, tokenization and multimodal preprocessing
# before a request reaches the engine, registered when the first request is rendered.
LABEL_REQUEST_TYPE: Final = "request_type"
REQUEST_RENDER_DURATION: Final = Metric(
    "vllm:request_render_duration_seconds", "histogram",
    "Time spent rendering a request, including chat templating, tokenization, and multimodal "
    "preprocessing.", "seconds", (LABEL_MODEL, LABEL_REQUEST_TYPE),
    (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
     5.0, 10.0))
# A histogram whose name ends in _total (vLLM's choice): its series are _total_bucket, ….
ITERATION_TOKENS: Final = Metric(
    "vllm:iteration_tokens_total", "histogram", "Histogram of number of tokens per engine_step.",
    "tokens", ENGINE_LABELS, ITERATION_TOKENS_BUCKETS)

LATENCY_HISTOGRAMS: Final = (INTER_TOKEN_LATENCY, TIME_TO_FIRST_TOKEN, E2E_REQUEST_LATENCY,
                             REQUEST_QUEUE_TIME, REQUEST_PREFILL_TIME, REQUEST_DECODE_TIME)

# ---- bucket families ---------------------------------------------------------------------------
# vLLM's ``--custom-histogram-buckets`` keys (vLLM >= 0.32, vllm.v1.metrics.buckets), each with the
# histograms declared here whose edges it replaces; families of histograms Governor does not read
# map to none. The flag replaces a family's edges for every histogram in it.
CUSTOM_BUCKETS_FLAG: Final = "--custom-histogram-buckets"
CUSTOM_BUCKETS_SINCE: Final = "0.32"
BUCKET_FAMILIES: Final[Mapping[str, tuple[Metric, ...]]] = MappingProxyType({
    "inter_token_latency": (INTER_TOKEN_LATENCY,),
    "time_to_first_token": (TIME_TO_FIRST_TOKEN,),
    "request_latency": (E2E_REQUEST_LATENCY, REQUEST_QUEUE_TIME, REQUEST_PREFILL_TIME,
                        REQUEST_DECODE_TIME),
    "iteration_tokens": (ITERATION_TOKENS,),
    "request_params_n": (),
    "request_num_preemptions": (),
    "request_tokens": (),
    "kv_cache_residency": (),
})


def family_of(histogram: str) -> str | None:
    """The bucket family whose edges ``--custom-histogram-buckets`` sets for ``histogram``."""
    for family, members in BUCKET_FAMILIES.items():
        if any(member.name == histogram for member in members):
            return family
    return None


# ---- stock vllm serve's HTTP series (prometheus-fastapi-instrumentator) ------------------------
# Status codes are grouped ("2xx", "4xx", "5xx"); a path no route matches is handler="none".
# vLLM >= 0.25 exposes them the same way; governor serve does not (it has governor_requests).
LABEL_HANDLER: Final = "handler"
LABEL_METHOD: Final = "method"
LABEL_STATUS: Final = "status"
STATUS_SERVER_ERROR: Final = "5xx"
HTTP_REQUESTS: Final = Metric(
    "http_requests", "counter", "Total number of requests by method, status and handler.",
    "requests", (LABEL_HANDLER, LABEL_METHOD, LABEL_STATUS))
