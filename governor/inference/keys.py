"""Typed application and request keys, in one module."""

from __future__ import annotations

import asyncio

from aiohttp import web
from opentelemetry import trace
from opentelemetry.util.types import AttributeValue
from prometheus_client import CollectorRegistry

from governor.inference.admission.estimate import PromptSizes
from governor.inference.admission.queue import AdmissionQueue
from governor.inference.config import ServiceConfig
from governor.inference.engines.base import Engine
from governor.inference.telemetry.metrics import ServiceMetrics
from governor.inference.telemetry.request_log import RequestFacts, RequestLogWriter
from governor.inference.telemetry.stages import StageClock
from governor.inference.telemetry.tracing import Tracing
from governor.inference.textwork import TextWork

CONFIG = web.AppKey("config", ServiceConfig)
ENGINE = web.AppKey("engine", Engine)
REGISTRY = web.AppKey("registry", CollectorRegistry)
METRICS = web.AppKey("metrics", ServiceMetrics)
TRACING = web.AppKey("tracing", Tracing)
# What every engine span carries (its GPUs, its data-parallel place), set once the engine is made.
ENGINE_SPAN_ATTRIBUTES = web.AppKey("engine_span_attributes", dict[str, AttributeValue])
ADMISSION = web.AppKey("admission", AdmissionQueue)
# The tokens per byte of the prompts tokenized lately: a prompt's length before its tokens.
PROMPT_SIZES = web.AppKey("prompt_sizes", PromptSizes)
ADMIN_LOCK = web.AppKey("admin_lock", asyncio.Lock)
# The threads that prepare prompts (decode, validate, render, tokenize), and their turns.
TEXT_WORK = web.AppKey("text_work", TextWork)
# Set once the engine has started and the warm-up is done: /health answers 200 from then on.
WARMED = web.AppKey("warmed", asyncio.Event)
# ``--request-log``'s writer (absent without the option).
REQUEST_LOG = web.AppKey("request_log", RequestLogWriter)

# Per request: the SERVER span the middleware opened (absent for /metrics and /health).
SPAN = web.RequestKey("span", trace.Span)
# Per request: the clock of its stages, started at its first byte
# (governor.inference.telemetry.stages).
STAGES = web.RequestKey("stages", StageClock)
# Per request: set once the SSE status line is sent.
STREAMING = web.RequestKey("streaming", bool)
# Per request: the code it is counted under when its status line does not tell how it ended (a
# stream the client left, or stopped reading, or that failed after its first token).
OUTCOME = web.RequestKey("outcome", str)
# Per request: marked as the synthetic probe's (governor.contracts.endpoints.PROBE_HEADER), so
# counted only in governor_probe_requests_served.
PROBE = web.RequestKey("probe", bool)
# Per generation request: its request class, once its prompt is classified.
CLASS = web.RequestKey("class", str)
# Per generation request, with ``--request-log``: what its log record is built from.
FACTS = web.RequestKey("facts", RequestFacts)
