"""One admitted generation: drives the engine's stream and records what the client saw.

A run streams (server-sent events) or gathers its response within the request's deadline,
writing through a :class:`~governor.inference.http.timeouts.ClientWriter`, so that a client that
stops reading ends its own request; it records time to first token, inter-token latency and
the tokens, with the trace id as exemplar, the span tree (queue → prefill → decode), and
the request's engine and writing stages on its
:class:`~governor.inference.telemetry.stages.StageClock`.
A streamed token costs the stages one clock reading (the end of its write) and no call: the
writes' time is summed as they end and placed on the clock when the response ends::

    run = Generation(kind, params, engine, metrics, latency, tracer, span, request, retry_after,
              deadline, write_timeout_seconds, clock)
    response = await (run.stream(http) if params.stream else run.complete())
    run.finish()
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from math import inf
from typing import Final, Literal

from aiohttp import web
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.util.types import AttributeValue

from governor.contracts import traces as tr
from governor.contracts.stages import Stage
from governor.inference import keys
from governor.inference.engines.base import (
    Engine,
    EngineError,
    EngineErrorKind,
    EngineTimes,
    FinishReason,
    GenerateRequest,
    TokenDelta,
)
from governor.inference.http.errors import (
    CLIENT_GONE,
    CLIENT_TOO_SLOW,
    SERVER,
    UNAVAILABLE,
    APIError,
    bad_request,
)
from governor.inference.http.timeouts import ClientTooSlow, ClientWriter
from governor.inference.openai.protocol import GenerationParams
from governor.inference.openai.sse import DONE, ChunkEncoder, Usage, error_event, full_response
from governor.inference.telemetry.metrics import ClassLatency, ServiceMetrics
from governor.inference.telemetry.request_log import RequestFacts
from governor.inference.telemetry.stages import StageClock
from governor.inference.telemetry.tracing import exemplar

log = logging.getLogger(__name__)

Kind = Literal["chat", "completion"]
SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}


_NOTHING_KNOWN: Final = EngineTimes()


def engine_error(exc: EngineError, retry_after_seconds: int) -> APIError:
    if exc.kind is EngineErrorKind.INVALID_REQUEST:
        return bad_request(exc.message, param=exc.param)
    if exc.kind is EngineErrorKind.UNSUPPORTED:
        return APIError(501, exc.message, type_=SERVER, code="unsupported")
    return APIError(
        503, exc.message, type_=UNAVAILABLE, code=exc.kind.value,
        retry_after_seconds=retry_after_seconds,
    )


def deadline_exceeded() -> APIError:
    return APIError(504, "the request did not finish before its deadline",
                    type_=UNAVAILABLE, code="deadline_exceeded")


class Generation:
    """One admitted generation: drives the engine stream and records what the client saw."""

    def __init__(
        self, kind: Kind, params: GenerationParams, engine: Engine, metrics: ServiceMetrics,
        latency: ClassLatency, tracer: trace.Tracer, span: trace.Span, request: GenerateRequest,
        retry_after: int, deadline: float, write_timeout_seconds: float, clock: StageClock, *,
        facts: RequestFacts | None = None,
        engine_attributes: Mapping[str, AttributeValue] | None = None,
    ) -> None:
        self.deadline = deadline  # loop time
        self.clock = clock
        self.write_timeout_seconds = write_timeout_seconds
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
        self.exemplar = exemplar(span)  # None for a span that is not sampled
        # Wall-clock nanoseconds for the child spans; perf_counter for the latencies, which
        # start at the request's first byte.
        self.start_ns = time.time_ns()
        self.arrived_ns = self.start_ns - int((time.perf_counter() - clock.start) * 1e9)
        self.admitted_ns = self.first_ns = self.last_ns = 0
        self.last = 0.0
        self.engine_queued_seconds: float | None = None
        # The engine's own decode time, reported with its last token (None: not reported).
        self.engine_decode_seconds: float | None = None
        # Seconds spent encoding and writing the response since the first token (and the time
        # the client made the writes wait): the stream_write stage, placed at the end.
        self.written = 0.0
        self.completion_tokens = 0
        self.finish_reason: str | None = None
        self.facts = facts  # --request-log's record, or None
        # On the queue, prefill and decode spans: where the engine ran (its GPUs, its rank).
        self.engine_attributes = engine_attributes or {}
        # Told the first token's time (perf_counter): the admission queue's deadline gate
        # measures the prefill rate from it.
        self.on_first_token: Callable[[float], None] | None = None

    def admitted(self) -> None:
        self.admitted_ns = time.time_ns()
        self.clock.reached_engine = True
        self.metrics.prompt_tokens.inc(len(self.request.prompt_token_ids))

    def usage(self) -> Usage:
        return Usage(len(self.request.prompt_token_ids), self.completion_tokens)

    def _observe(self, delta: TokenDelta) -> None:
        now = time.perf_counter()
        self.last_ns = time.time_ns()
        if self.first_ns == 0:
            self.first_ns = self.last_ns
            self.latency.ttft.observe(now - self.clock.start, self.exemplar)
            self.metrics.observe_ttft_by_prompt(len(self.request.prompt_token_ids),
                                                now - self.clock.start)
            if self.on_first_token is not None:
                self.on_first_token(now)
            if self.facts is not None:
                self.facts.first_token(now - self.clock.start, delta.num_tokens)
        else:
            self.latency.itl.observe(now - self.last, self.exemplar)
            if self.facts is not None:
                self.facts.next_token(now - self.last, delta.num_tokens)
        if delta.times is not None and delta.times.decode_seconds is not None:
            self.engine_decode_seconds = delta.times.decode_seconds
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
        """The first delta; the wait for it split by the engine's own queue and prefill times
        (what they do not cover, the hops to and from the engine, is ``other``)."""
        try:
            first = await anext(deltas)
        except StopAsyncIteration:
            return None
        except EngineError as exc:
            raise engine_error(exc, self.retry_after) from exc
        times = first.times or _NOTHING_KNOWN
        self.engine_queued_seconds = times.queued_seconds
        self.clock.split(((Stage.ENGINE_QUEUE, times.queued_seconds),
                          (Stage.PREFILL, times.prefill_seconds)))
        return first

    async def _timed(self, writing: Awaitable[object]) -> None:
        """A write of the response (not a token's), counted as stream_write."""
        started = time.perf_counter()
        try:
            await writing
        finally:
            self.written += time.perf_counter() - started

    async def stream(self, http: web.Request) -> web.StreamResponse:
        """The response as server-sent events. Ends early when the client goes away (499),
        stops reading (408: the connection is dropped) or the engine fails (an error event,
        counted under the status the failure would have had before the first token)."""
        deltas = self._deltas()
        connections = http.app[keys.CONFIG].connections
        writer = ClientWriter(http, web.StreamResponse(headers=SSE_HEADERS),
                              self.write_timeout_seconds, connections.stream_send_buffer_bytes)
        try:
            await self._stream(http, writer, deltas)
        except ClientTooSlow as exc:
            log.info("request %s dropped: %s", self.request.request_id, exc)
            self.outcome(http, CLIENT_TOO_SLOW)
        except ConnectionError:
            self.outcome(http, CLIENT_GONE)
        finally:
            writer.unpace()
            await deltas.aclose()  # type: ignore[attr-defined]  # aborts an unfinished request
        if http.get(keys.OUTCOME) == CLIENT_TOO_SLOW:
            writer.abandon()  # last: dropping the connection may cancel this handler
        return writer.response

    def outcome(self, http: web.Request, code: str) -> None:
        if code in (CLIENT_GONE, CLIENT_TOO_SLOW):
            self.finish_reason = FinishReason.ABORT.value
        http[keys.OUTCOME] = code

    async def _stream(
        self, http: web.Request, writer: ClientWriter, deltas: AsyncIterator[TokenDelta]
    ) -> None:
        deadline = asyncio.timeout_at(self.deadline)
        try:
            async with deadline:
                # The first delta before the status line: an engine refusal still gets its
                # 4xx/503 (and a request out of time its 504).
                first = await self._first(deltas)
                encoder = ChunkEncoder(self.kind, self.request.request_id, self.created,
                                       self.params.model, include_usage=self.params.include_usage)
                started = time.perf_counter()  # the status line, and the chat's role event
                try:
                    await writer.prepare()
                    http[keys.STREAMING] = True
                    role = encoder.role()
                    if role is not None:
                        await writer.write(role)
                finally:
                    self.written += time.perf_counter() - started
                await self._stream_deltas(writer, encoder, first, deltas)
        except TimeoutError:
            if not deadline.expired():
                raise
            if writer.waiting:
                raise ClientTooSlow("the client was not reading when the deadline passed"
                                    ) from None
            if not writer.response.prepared:
                raise deadline_exceeded() from None
            await self._end_with_error(http, writer, deadline_exceeded())
            return
        except EngineError as exc:  # after the first delta: the status line is gone
            log.warning("request %s failed mid-stream: %s", self.request.request_id, exc)
            await self._end_with_error(http, writer, engine_error(exc, self.retry_after))
            return
        started = time.perf_counter()
        try:
            await writer.write(DONE)
            await writer.write_eof()
        finally:
            self.written += time.perf_counter() - started

    async def _end(self, writer: ClientWriter, *events: bytes) -> None:
        for event in events:
            await writer.write(event)
        await writer.write_eof()

    async def _end_with_error(
        self, http: web.Request, writer: ClientWriter, error: APIError
    ) -> None:
        """End a started stream with OpenAI's error event, counted under the error's status."""
        self.outcome(http, str(error.status))
        await self._timed(self._end(writer, error_event(error.body()), DONE))

    async def _stream_deltas(
        self, writer: ClientWriter, encoder: ChunkEncoder, first: TokenDelta | None,
        deltas: AsyncIterator[TokenDelta],
    ) -> None:
        delta = first
        while delta is not None:
            self._observe(delta)  # self.last: when it arrived
            self.metrics.generation_tokens.inc(delta.num_tokens)
            try:
                if delta.finish_reason is not None:
                    self.finish_reason = delta.finish_reason.value
                    await writer.write(encoder.finish(self.finish_reason, delta.text))
                    break
                if delta.text:
                    await writer.write(encoder.text(delta.text))
            finally:  # a write the client made wait, or never took, counts too
                writing = time.perf_counter() - self.last
                self.written += writing
                self.metrics.stream_write_seconds.inc(writing)  # live: the verdict reads it
            delta = await anext(deltas, None)
        if self.params.include_usage:
            await self._timed(writer.write(encoder.usage(self.usage())))

    async def complete(self) -> web.Response:
        """The whole response, built here and sent by the middleware (write timeout and all)."""
        deltas = self._deltas()
        deadline = asyncio.timeout_at(self.deadline)
        try:
            async with deadline:
                text = await self._gather(deltas)
        except EngineError as exc:
            raise engine_error(exc, self.retry_after) from exc
        except TimeoutError:
            if deadline.expired():
                raise deadline_exceeded() from None
            raise
        finally:
            await deltas.aclose()  # type: ignore[attr-defined]
        self.metrics.generation_tokens.inc(self.completion_tokens)
        encoding = time.perf_counter()
        body = full_response(self.kind, self.request.request_id, self.created, self.params.model,
                             text, self.finish_reason or "stop", self.usage())
        self.written += time.perf_counter() - encoding  # the middleware times the sending
        return web.Response(body=body, content_type="application/json")

    async def _gather(self, deltas: AsyncIterator[TokenDelta]) -> str:
        parts: list[str] = []
        delta = await self._first(deltas)
        while delta is not None:
            self._observe(delta)
            parts.append(delta.text)
            if delta.finish_reason is not None:
                self.finish_reason = delta.finish_reason.value
                break
            delta = await anext(deltas, None)
        return "".join(parts)

    def finish(self) -> None:
        """The stages since the first token: the writes' time, then the wait for the engine's
        later tokens as decode, at most the engine's own decode time when it reported one (the
        rest is ``other``); the span's outcome and its queue → prefill → decode children."""
        if self.first_ns:
            decode = inf if self.engine_decode_seconds is None else self.engine_decode_seconds
            self.clock.split(((Stage.STREAM_WRITE, self.written), (Stage.DECODE, decode)))
        self._finish_span()

    def _finish_span(self) -> None:
        span = self.span
        attributes: dict[str, int | float | list[str]] = {
            tr.USAGE_OUTPUT_TOKENS: self.completion_tokens}
        if self.finish_reason is not None:
            attributes[tr.RESPONSE_FINISH_REASONS] = [self.finish_reason]
        if self.admitted_ns:
            parent = trace.set_span_in_context(span)  # once for the three children
            queue_end = self.admitted_ns
            if self.engine_queued_seconds is not None:
                queue_end += int(self.engine_queued_seconds * 1e9)
            if self.first_ns:
                queue_end = min(queue_end, self.first_ns)
            attributes[tr.TIME_IN_QUEUE] = (queue_end - self.start_ns) / 1e9
            self._child(parent, tr.QUEUE_SPAN, self.start_ns, queue_end,
                        {tr.ENGINE_QUEUED_SECONDS: self.engine_queued_seconds or 0.0})
            if self.first_ns:
                attributes[tr.TIME_TO_FIRST_TOKEN] = (self.first_ns - self.arrived_ns) / 1e9
                self._child(parent, tr.PREFILL_SPAN, queue_end, self.first_ns, {})
                span.add_event(tr.FIRST_TOKEN_EVENT, timestamp=self.first_ns)
                self._child(parent, tr.DECODE_SPAN, self.first_ns, self.last_ns,
                            {tr.USAGE_OUTPUT_TOKENS: self.completion_tokens})
        span.set_attributes(attributes)  # at once: each call takes the span's locks

    def _child(self, parent: Context, name: str, start_ns: int, end_ns: int,
               attributes: Mapping[str, float]) -> None:
        child = self.tracer.start_span(name, context=parent, start_time=start_ns,
                                       attributes={**attributes, **self.engine_attributes})
        child.end(end_time=end_ns)
