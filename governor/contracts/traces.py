"""The names on the service's spans: OpenTelemetry's GenAI conventions, vLLM's, and our own.

Each API request is one SERVER span named ``{operation} {model}`` (``chat llama-3-8b``), as the
GenAI conventions name inference spans, with the HTTP server attributes kept beside the GenAI
ones. Attributes the conventions define keep their names; latencies use the names vLLM puts on
its own ``llm_request`` span, so one query finds both; everything else this project adds lives
under ``governor.*``, outside the reserved ``gen_ai`` namespace.
"""

from __future__ import annotations

from typing import Final

# OpenTelemetry GenAI semantic conventions (v1.37): attributes of an inference span.
PROVIDER_NAME: Final = "gen_ai.provider.name"
OPERATION_NAME: Final = "gen_ai.operation.name"
REQUEST_MODEL: Final = "gen_ai.request.model"
REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
REQUEST_TEMPERATURE: Final = "gen_ai.request.temperature"
REQUEST_TOP_P: Final = "gen_ai.request.top_p"
RESPONSE_ID: Final = "gen_ai.response.id"
RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
OPERATION_CHAT: Final = "chat"
OPERATION_TEXT_COMPLETION: Final = "text_completion"

# vLLM's own latency attributes (seconds), as on its ``llm_request`` span.
TIME_IN_QUEUE: Final = "gen_ai.latency.time_in_queue"
TIME_TO_FIRST_TOKEN: Final = "gen_ai.latency.time_to_first_token"

# This project's: the three phases of a request as child spans, and the first token as an event.
QUEUE_SPAN: Final = "governor.queue"
PREFILL_SPAN: Final = "governor.prefill"
DECODE_SPAN: Final = "governor.decode"
FIRST_TOKEN_EVENT: Final = "governor.first_token"
ENGINE_QUEUED_SECONDS: Final = "governor.engine.queued_seconds"
# On the engine's spans (queue, prefill, decode): the UUIDs of the GPUs it ran on, as NVML and
# the GPU exporter's uuid label name them, when the engine knows them (absent on a CPU).
ENGINE_GPU_UUIDS: Final = "governor.engine.gpu_uuids"
# GPUs the engine was given by index (CUDA_VISIBLE_DEVICES) that no NVML could name by UUID.
ENGINE_GPU_INDICES: Final = "governor.engine.gpu_indices"
# vLLM's data parallelism: how many ranks the deployment has, and the rank the request ran on
# when the engine serves one rank only (absent when it spreads requests over several: vLLM
# 0.32 does not say which one took a request).
ENGINE_DATA_PARALLEL_SIZE: Final = "governor.engine.data_parallel_size"
ENGINE_DATA_PARALLEL_RANK: Final = "governor.engine.data_parallel_rank"
REQUEST_CLASS: Final = "governor.request.class"
PROMPT_BYTES: Final = "governor.request.prompt_bytes"
# At the request's end, one event with the seconds of every stage (governor.contracts.stages),
# which add up to the span's duration, and that duration.
STAGES_EVENT: Final = "governor.stages"
STAGES_DURATION: Final = "governor.stage.total_seconds"


def stage_attribute(stage: str) -> str:
    """The stages event's attribute for one stage: ``governor.stage.tokenize_seconds``."""
    return f"governor.stage.{stage}_seconds"


def inference_span_name(operation: str, model: str) -> str:
    """``{gen_ai.operation.name} {gen_ai.request.model}``."""
    return f"{operation} {model}"
