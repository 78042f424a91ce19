"""The two generation routes: ``POST /v1/chat/completions`` and ``POST /v1/completions``.

One request's life, within its deadline (``--request-timeout``): in its turn, read the body,
then decode, validate, render and tokenize it in the text threads, the prompt's bytes checked
before it is tokenized (:mod:`governor.inference.openai.prompts`); under the deadline gate a
request is refused as early as what is known of it decides it: before its body is read, or on
the event loop on its prompt's estimated length before it waits for a text thread → classify
it (slo.yaml's request classes: its vLLM priority, its admission limit, its ``class`` label)
→ wait for an engine slot
in the admission queue → stream deltas from the engine (SSE) or gather them, and record what
the client saw (:mod:`governor.inference.openai.generation`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import NoReturn

from aiohttp import web
from opentelemetry import trace

from governor.admission.deadline import Judgement
from governor.admission.refusal import refusal_message
from governor.contracts import traces as tr
from governor.contracts.endpoints import CHAT_COMPLETIONS_PATH, COMPLETIONS_PATH
from governor.contracts.metrics.service import (
    REASON_DEADLINE_PASSED,
    REASON_QUEUE_FULL,
    REASON_QUEUE_TIMEOUT,
    REASON_SHED,
)
from governor.contracts.stages import Stage
from governor.inference import keys
from governor.inference.admission.queue import (
    DeadlinePassed,
    QueueFull,
    QueueTimeout,
    Shed,
    Ticket,
    TooLate,
)
from governor.inference.config import ServiceConfig
from governor.inference.engines.base import Engine, GenerateRequest
from governor.inference.http.body import decode_json
from governor.inference.http.errors import RATE_LIMIT, UNAVAILABLE, APIError
from governor.inference.openai.generation import Generation, Kind
from governor.inference.openai.prompts import Decoded, Screen, prepare_request, text_bytes
from governor.inference.openai.protocol import GenerationParams, context_too_long
from governor.inference.telemetry.tracing import inject_headers

log = logging.getLogger(__name__)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "chat")


async def completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, "completion")


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
    deadline = asyncio.get_running_loop().time() + config.connections.request_timeout_seconds
    route = CHAT_COMPLETIONS_PATH if kind == "chat" else COMPLETIONS_PATH
    _refuse_unread(request, route)
    prepared = await prepare_request(request, kind, deadline, _screen(request, route, kind))
    params, token_ids = prepared.params, prepared.token_ids
    app[keys.PROMPT_SIZES].learn(prepared.text_bytes, len(token_ids))
    metrics = app[keys.METRICS]
    request_class = config.classes.classify(route, request.headers, len(token_ids))
    request[keys.CLASS] = name = request_class.name
    facts = request.get(keys.FACTS)
    if facts is not None:
        facts.prompt_tokens = len(token_ids)
    max_tokens = resolve_max_tokens(params, len(token_ids), engine.max_model_len, config)
    request_id = f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{uuid.uuid4().hex}"
    attributes = _request_attributes(span, engine, params, request_id, max_tokens,
                                     len(token_ids))
    attributes[tr.REQUEST_CLASS] = name
    if app[keys.TRACING].traces_endpoint is not None:  # µs each, for spans that go somewhere
        attributes[tr.PROMPT_BYTES] = prepared.prompt_bytes
    span.set_attributes(attributes)  # at once: each call takes the span's locks
    retry_after = config.admission.retry_after_seconds
    probe = request.get(keys.PROBE, False)
    latency = metrics.unobserved if probe else metrics.latency(name)
    run = Generation(
        kind, params, engine, metrics, latency, app[keys.TRACING].tracer, span,
        GenerateRequest(request_id, prepared.prompt, token_ids, max_tokens, params.sampling,
                        trace_headers=inject_headers(span), priority=request_class.priority),
        retry_after, deadline, config.connections.write_timeout_seconds, request[keys.STAGES],
        facts=facts, engine_attributes=app[keys.ENGINE_SPAN_ATTRIBUTES],
    )
    queue = app[keys.ADMISSION]
    ticket = await _admit(request, run, retry_after, name, len(token_ids))
    admission = metrics.admission(name)
    if not probe:
        metrics.observe_prompt(prepared.prompt_bytes, len(token_ids))
        admission.admitted.inc()

    def first_token(at: float) -> None:
        sample = queue.first_token(ticket, at)
        if not probe:
            # With the time to first token, not at the stream's end: the verdict splits a
            # first-token breach by these stages, and a stage seen late reads as another's.
            metrics.observe_first_token_stages(request[keys.STAGES].first_token())
            if sample is not None:
                admission.observe_wait(sample)

    run.on_first_token = first_token
    try:
        if params.stream:
            return await run.stream(request)
        return await run.complete()
    finally:
        queue.release(name, ticket)
        run.finish()


# A body's bytes per prompt token where a refusal's class must be guessed before reading it
# (the stock-vLLM gate's estimate, governor.vllm.prompts).
_BYTES_PER_TOKEN = 4


def _refuse_unread(request: web.Request, route: str) -> None:
    """Refuse before the body is read, parsed or tokenized when the prompt tokens already
    ahead keep the request past its first-token deadline in every class it can fall in:
    its own prompt would only add to the wait. A refusal costs the service no text thread and
    no tokenization, at the time overload makes them scarce. Where the class depends on the
    prompt's length (the shipped spec's documents), the refusal is as certain, and its ``class``
    label is the one its declared length suggests (a token per four bytes)."""
    app = request.app
    config, queue = app[keys.CONFIG], app[keys.ADMISSION]
    headers = request.headers
    names = config.classes.candidates(route, headers)
    started = request[keys.STAGES].start
    refused = queue.refused_whatever_its_length(names, time.perf_counter() - started)
    if refused is None:
        return
    guess = (request.content_length or 0) // _BYTES_PER_TOKEN
    name = config.classes.classify(route, headers, guess).name
    name = name if name in refused else next(iter(refused))
    _refuse(request, name, refused[name])


def _screen(request: web.Request, route: str, kind: Kind) -> Screen | None:
    """The refusal on the prompt's estimated length, on the event loop before the request waits
    for a text thread (:class:`~governor.inference.admission.estimate.PromptSizes`): refused
    with the fewest tokens its text is expected to make, in the one class every length it may
    make gives, it is refused with its exact count too (a longer prompt only waits longer). A
    request it cannot decide so (no rate, a short prompt, one that may not fit the context, a
    class that depends on the exact count) is tokenized and judged exactly."""
    app = request.app
    queue, sizes, clock = app[keys.ADMISSION], app[keys.PROMPT_SIZES], request[keys.STAGES]
    if queue.gate.rate is None:  # nothing is refused by deadline: nothing to decode early for
        return None
    classes = app[keys.CONFIG].classes

    def screen(raw: bytes) -> Decoded | None:
        # The text is at most the body: one the gate admits with as many tokens as that many
        # bytes may make, in every class, is left for the text thread to decode.
        ceiling = sizes.bounds(len(raw))
        if ceiling is None or not queue.may_refuse(
                classes.candidates(route, request.headers), ceiling[1],
                time.perf_counter() - clock.start):
            return None
        decoded = Decoded(decode_json(raw))
        clock.reach(Stage.PARSE)
        bounds = sizes.bounds(text_bytes(decoded.value, kind))
        if bounds is None:
            return decoded
        fewest, most = bounds
        if most >= app[keys.ENGINE].max_model_len:  # it may not fit: its 400 is for the count
            return decoded
        names = classes.candidates(route, request.headers, fewest, most)
        if len(names) != 1:
            return decoded
        refused = queue.refused_with_at_least(names, fewest, time.perf_counter() - clock.start)
        if refused is not None:
            _refuse(request, names[0], refused[names[0]])
        return decoded

    return screen


def _refuse(request: web.Request, name: str, judgement: Judgement) -> NoReturn:
    """Answer 429 for a request of class ``name`` the deadline gate refused, and count it."""
    request[keys.CLASS] = name
    request[keys.STAGES].reach(Stage.ADMISSION)
    request.app[keys.METRICS].rejections.labels(judgement.reason, name).inc()
    raise APIError(429, refusal_message(name, judgement), type_=RATE_LIMIT,
                   code=judgement.reason, retry_after_seconds=judgement.retry_after_seconds)


async def _admit(request: web.Request, run: Generation, retry_after: int,
                 request_class: str, prompt_tokens: int) -> Ticket:
    config = request.app[keys.CONFIG]
    metrics = request.app[keys.METRICS]
    # The wait is bounded by the queue timeout, and by what is left of the request's deadline.
    left = run.deadline - asyncio.get_running_loop().time()
    clock = run.clock
    clock.reach(Stage.OTHER)  # classifying, the engine request
    try:
        ticket = await request.app[keys.ADMISSION].acquire(
            min(config.admission.queue_timeout_seconds, left), request_class,
            tokens=prompt_tokens, waited=time.perf_counter() - clock.start)
    except TooLate as refused:
        judgement = refused.judgement
        metrics.rejections.labels(judgement.reason, request_class).inc()
        raise APIError(429, refusal_message(request_class, judgement), type_=RATE_LIMIT,
                       code=judgement.reason,
                       retry_after_seconds=judgement.retry_after_seconds) from None
    except DeadlinePassed as shed:
        metrics.rejections.labels(REASON_DEADLINE_PASSED, request_class).inc()
        raise APIError(
            429, f"the server is at capacity: this {request_class} request waited past its "
                 "first-token deadline and was shed before it reached the engine; retry later",
            type_=RATE_LIMIT, code=REASON_DEADLINE_PASSED,
            retry_after_seconds=shed.retry_after_seconds,
        ) from None
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
    finally:
        clock.reach(Stage.ADMISSION)
    run.admitted()
    return ticket


def _request_attributes(
    span: trace.Span, engine: Engine, params: GenerationParams, request_id: str,
    max_tokens: int, prompt_tokens: int,
) -> dict[str, str | int | float]:
    """The span's name and the request's attributes, to be set with the others."""
    operation = tr.OPERATION_CHAT if params.kind == "chat" else tr.OPERATION_TEXT_COMPLETION
    span.update_name(tr.inference_span_name(operation, params.model))
    return {
        tr.PROVIDER_NAME: engine.system,
        tr.OPERATION_NAME: operation,
        tr.REQUEST_MODEL: params.model,
        tr.REQUEST_MAX_TOKENS: max_tokens,
        tr.REQUEST_TEMPERATURE: params.sampling.temperature,
        tr.REQUEST_TOP_P: params.sampling.top_p,
        tr.RESPONSE_ID: request_id,
        tr.USAGE_INPUT_TOKENS: prompt_tokens,
    }


