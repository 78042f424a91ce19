"""The two generation routes: ``POST /v1/chat/completions`` and ``POST /v1/completions``.

One request's life: parse and validate → tokenize and check the context (both in the text
threads, :mod:`governor.inference.prompts`) → classify it (slo.yaml's
request classes: its vLLM priority, its admission limit, its ``class`` label) → wait for an engine
slot in the admission queue → stream deltas from the engine (SSE) or gather them → record the
latencies the client saw, with the trace id as exemplar, and the span tree.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Literal

from aiohttp import web
from opentelemetry import trace

from governor.contracts import traces as tr
from governor.contracts.endpoints import CHAT_COMPLETIONS_PATH, COMPLETIONS_PATH
from governor.contracts.metrics.service import (
    EXEMPLAR_TRACE_ID,
    REASON_QUEUE_FULL,
    REASON_QUEUE_TIMEOUT,
    REASON_SHED,
)
from governor.inference import keys
from governor.inference.admission import QueueFull, QueueTimeout, Shed
from governor.inference.body import read_body
from governor.inference.config import ServiceConfig
from governor.inference.engines.base import (
    Engine,
    EngineError,
    EngineErrorKind,
    FinishReason,
    GenerateRequest,
    TokenDelta,
)
from governor.inference.errors import (
    RATE_LIMIT,
    SERVER,
    UNAVAILABLE,
    APIError,
    bad_request,
)
from governor.inference.metrics import ClassLatency, ServiceMetrics
from governor.inference.prompts import prepare_in_pool
from governor.inference.protocol import GenerationParams, context_too_long
from governor.inference.sse import DONE, ChunkEncoder, Usage, error_event, full_response
from governor.inference.tracing import inject_headers, trace_id_hex

log = logging.getLogger(__name__)

Kind = Literal["chat", "completion"]
SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "chat")


async def completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "completion")


def engine_error(exc: EngineError, retry_after_seconds: int) -> APIError:
    if exc.kind is EngineErrorKind.INVALID_REQUEST:
        return bad_request(exc.message, param=exc.param)
    if exc.kind is EngineErrorKind.UNSUPPORTED:
        return APIError(501, exc.message, type_=SERVER, code="unsupported")
    return APIError(
        503, exc.message, type_=UNAVAILABLE, code=exc.kind.value,
        retry_after_seconds=retry_after_seconds,
    )


def resolve_max_tokens(
    params: GenerationParams, prompt_tokens: int, max_model_len: int, config: ServiceConfig
) -> int:
    param = "messages" if params.kind == "chat" else "prompt"
    available = max_model_len - prompt_tokens
    if params.max_tokens is not None:
        if params.max_tokens > available:
            raise context_too_long(max_model_len, prompt_tokens, params.max_tokens, param)
        return params.max_tokens
    if available < 1:
        raise context_too_long(max_model_len, prompt_tokens, 1, param)
    if params.kind == "completion":
        return min(config.default_completion_max_tokens, available)
    return min(config.max_tokens_limit, available)


async def _generate(request: web.Request, kind: Kind) -> web.StreamResponse:
    app = request.app
    config, engine = app[keys.CONFIG], app[keys.ENGINE]
    span = request[keys.SPAN]
    prepared = await prepare_in_pool(app, await read_body(request), kind)
    params, token_ids = prepared.params, prepared.token_ids
    route = CHAT_COMPLETIONS_PATH if kind == "chat" else COMPLETIONS_PATH
    request_class = config.classes.classify(route, request.headers, len(token_ids))
    request[keys.CLASS] = name = request_class.name
    max_tokens = resolve_max_tokens(params, len(token_ids), engine.max_model_len, config)
    request_id = f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{uuid.uuid4().hex}"
    _request_attributes(span, engine, params, request_id, max_tokens, len(token_ids))
    span.set_attribute(tr.REQUEST_CLASS, name)
    metrics = app[keys.METRICS]
    retry_after = config.admission.retry_after_seconds
    run = _Run(
        kind, params, engine, metrics, metrics.latency(name), app[keys.TRACING].tracer, span,
        GenerateRequest(request_id, prepared.prompt, token_ids, max_tokens, params.sampling,
                        trace_headers=inject_headers(span), priority=request_class.priority),
        retry_after,
    )
    await _admit(request, run, retry_after, name)
    try:
        if params.stream:
            return await run.stream(request)
        return await run.complete()
    finally:
        app[keys.ADMISSION].release(name)
        run.finish_span()


async def _admit(request: web.Request, run: _Run, retry_after: int, request_class: str) -> None:
    config = request.app[keys.CONFIG]
    metrics = request.app[keys.METRICS]
    try:
        await request.app[keys.ADMISSION].acquire(config.admission.queue_timeout_seconds,
                                                  request_class)
    except QueueFull:
        metrics.rejections.labels(REASON_QUEUE_FULL, request_class).inc()
        raise APIError(
            429, "the server is at capacity and its queue is full; retry later",
            type_=RATE_LIMIT, code="queue_full", retry_after_seconds=retry_after,
        ) from None
    except Shed:
        metrics.rejections.labels(REASON_SHED, request_class).inc()
        raise APIError(
            429, f"the server is at capacity and gave this {request_class} request's place in "
                 "the queue to a request of a higher class; retry later",
            type_=RATE_LIMIT, code="shed", retry_after_seconds=retry_after,
        ) from None
    except QueueTimeout:
        metrics.rejections.labels(REASON_QUEUE_TIMEOUT, request_class).inc()
        raise APIError(
            503, "no engine slot became free in time; retry later",
            type_=UNAVAILABLE, code="queue_timeout", retry_after_seconds=retry_after,
        ) from None
    run.admitted()


def _request_attributes(
    span: trace.Span, engine: Engine, params: GenerationParams, request_id: str,
    max_tokens: int, prompt_tokens: int,
) -> None:
    operation = tr.OPERATION_CHAT if params.kind == "chat" else tr.OPERATION_TEXT_COMPLETION
    span.update_name(tr.inference_span_name(operation, params.model))
    span.set_attributes({
        tr.PROVIDER_NAME: engine.system,
        tr.OPERATION_NAME: operation,
        tr.REQUEST_MODEL: params.model,
        tr.REQUEST_MAX_TOKENS: max_tokens,
        tr.REQUEST_TEMPERATURE: params.sampling.temperature,
        tr.REQUEST_TOP_P: params.sampling.top_p,
        tr.RESPONSE_ID: request_id,
        tr.USAGE_INPUT_TOKENS: prompt_tokens,
    })


class _Run:
    """One admitted generation: drives the engine stream and records what the client saw."""

    def __init__(
        self, kind: Kind, params: GenerationParams, engine: Engine, metrics: ServiceMetrics,
        latency: ClassLatency, tracer: trace.Tracer, span: trace.Span, request: GenerateRequest,
        retry_after: int,
    ) -> None:
        self.latency = latency
        self.tracer = tracer
        self.retry_after = retry_after
        self.kind = kind
        self.params = params
        self.engine = engine
        self.metrics = metrics
        self.span = span
        self.request = request
        self.created = int(time.time())
        self.exemplar = {EXEMPLAR_TRACE_ID: trace_id_hex(span)}
        # Wall-clock nanoseconds for the child spans; perf_counter for the latencies.
        self.start_ns = time.time_ns()
        self.start = time.perf_counter()
        self.admitted_ns = self.first_ns = self.last_ns = 0
        self.last = 0.0
        self.engine_queued_seconds: float | None = None
        self.completion_tokens = 0
        self.finish_reason: str | None = None

    def admitted(self) -> None:
        self.admitted_ns = time.time_ns()
        self.metrics.prompt_tokens.inc(len(self.request.prompt_token_ids))

    def usage(self) -> Usage:
        return Usage(len(self.request.prompt_token_ids), self.completion_tokens)

    def _observe(self, delta: TokenDelta) -> None:
        now = time.perf_counter()
        self.last_ns = time.time_ns()
        if self.first_ns == 0:
            self.first_ns = self.last_ns
            self.latency.ttft.observe(now - self.start, self.exemplar)
            self.engine_queued_seconds = delta.queued_seconds
        else:
            self.latency.itl.observe(now - self.last, self.exemplar)
        self.last = now
        self.completion_tokens += delta.num_tokens

    async def _deltas(self) -> AsyncIterator[TokenDelta]:
        """The engine's deltas; closing this early (disconnect, error) aborts the engine request."""
        stream = self.engine.generate(self.request)
        try:
            async for delta in stream:
                yield delta
                if delta.finish_reason is not None:
                    return
        finally:
            await stream.aclose()  # type: ignore[attr-defined]

    async def _first(self, deltas: AsyncIterator[TokenDelta]) -> TokenDelta | None:
        try:
            return await anext(deltas)
        except StopAsyncIteration:
            return None
        except EngineError as exc:
            raise engine_error(exc, self.retry_after) from exc

    async def stream(self, http: web.Request) -> web.StreamResponse:
        deltas = self._deltas()
        response = web.StreamResponse(headers=SSE_HEADERS)
        try:
            # The first delta before the status line: an engine refusal still gets its 4xx/503.
            first = await self._first(deltas)
            await response.prepare(http)
            http[keys.STREAMING] = True
            encoder = ChunkEncoder(self.kind, self.request.request_id, self.created,
                                   self.params.model, include_usage=self.params.include_usage)
            role = encoder.role()
            if role is not None:
                await response.write(role)
            try:
                await self._stream_deltas(response, encoder, first, deltas)
            except EngineError as exc:
                log.warning("request %s failed mid-stream: %s", self.request.request_id, exc)
                await response.write(error_event(engine_error(exc, self.retry_after).body()))
            await response.write(DONE)
            await response.write_eof()
        except ConnectionError:
            # The client went away: the finally below aborts the engine request.
            self.finish_reason = FinishReason.ABORT.value
            http[keys.CLIENT_GONE] = True
        finally:
            await deltas.aclose()  # type: ignore[attr-defined]
        return response

    async def _stream_deltas(
        self, response: web.StreamResponse, encoder: ChunkEncoder, first: TokenDelta | None,
        deltas: AsyncIterator[TokenDelta],
    ) -> None:
        delta = first
        while delta is not None:
            self._observe(delta)
            self.metrics.generation_tokens.inc(delta.num_tokens)
            if delta.finish_reason is not None:
                self.finish_reason = delta.finish_reason.value
                await response.write(encoder.finish(self.finish_reason, delta.text))
                break
            if delta.text:
                await response.write(encoder.text(delta.text))
            delta = await anext(deltas, None)
        if self.params.include_usage:
            await response.write(encoder.usage(self.usage()))

    async def complete(self) -> web.Response:
        deltas = self._deltas()
        parts: list[str] = []
        try:
            delta = await self._first(deltas)
            while delta is not None:
                self._observe(delta)
                parts.append(delta.text)
                if delta.finish_reason is not None:
                    self.finish_reason = delta.finish_reason.value
                    break
                delta = await anext(deltas, None)
        except EngineError as exc:
            raise engine_error(exc, self.retry_after) from exc
        finally:
            await deltas.aclose()  # type: ignore[attr-defined]
        self.metrics.generation_tokens.inc(self.completion_tokens)
        body = full_response(self.kind, self.request.request_id, self.created, self.params.model,
                             "".join(parts), self.finish_reason or "stop", self.usage())
        return web.Response(body=body, content_type="application/json")

    def finish_span(self) -> None:
        """Attributes of the outcome and the queue → prefill → decode child spans."""
        span = self.span
        span.set_attribute(tr.USAGE_OUTPUT_TOKENS, self.completion_tokens)
        if self.finish_reason is not None:
            span.set_attribute(tr.RESPONSE_FINISH_REASONS, [self.finish_reason])
        if not self.admitted_ns:
            return
        queue_end = self.admitted_ns
        if self.engine_queued_seconds is not None:
            queue_end += int(self.engine_queued_seconds * 1e9)
        if self.first_ns:
            queue_end = min(queue_end, self.first_ns)
        span.set_attribute(tr.TIME_IN_QUEUE, (queue_end - self.start_ns) / 1e9)
        self._child(tr.QUEUE_SPAN, self.start_ns, queue_end,
                    {tr.ENGINE_QUEUED_SECONDS: self.engine_queued_seconds or 0.0})
        if self.first_ns:
            span.set_attribute(tr.TIME_TO_FIRST_TOKEN, (self.first_ns - self.start_ns) / 1e9)
            self._child(tr.PREFILL_SPAN, queue_end, self.first_ns, {})
            span.add_event(tr.FIRST_TOKEN_EVENT, timestamp=self.first_ns)
            self._child(tr.DECODE_SPAN, self.first_ns, self.last_ns,
                        {tr.USAGE_OUTPUT_TOKENS: self.completion_tokens})

    def _child(self, name: str, start_ns: int, end_ns: int, attributes: dict[str, float]) -> None:
        child = self.tracer.start_span(
            name, context=trace.set_span_in_context(self.span), start_time=start_ns,
            attributes=attributes,
        )
        child.end(end_time=end_ns)
