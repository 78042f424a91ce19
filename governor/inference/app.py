"""``create_app(config)``: the inference service as an aiohttp application.

The factory never reads argv or the environment beyond what it is given; resources live in
``cleanup_ctx`` generators (tracing, engine, admission) so tests build the very same app::

    app = create_app(ServiceConfig(engine=EngineSettings(kind="sim", preset="tiny")))
    web.run_app(app, port=8000)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

from aiohttp import web
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.util.types import AttributeValue
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.openmetrics import exposition as openmetrics

from governor import __version__ as VERSION
from governor.admission.policy import AdmissionPolicy
from governor.contracts import traces as tr
from governor.contracts.endpoints import (
    ADMIN_ADMISSION_PATH,
    ADMIN_BATCHING_PATH,
    CHAT_COMPLETIONS_PATH,
    COMPLETIONS_PATH,
    HEALTH_PATH,
    METRICS_PATH,
    PROBE_HEADER,
)
from governor.contracts.metrics.service import (
    PHASE_ENGINE,
    PHASE_WARMUP,
    ROUND_FIRST,
    ROUND_LAST,
    UNCLASSIFIED,
)
from governor.contracts.simdevice import DEVICE_PATH, FAULTS_PATH
from governor.contracts.stages import Stage
from governor.inference import admin, device, keys
from governor.inference.admission.estimate import PromptSizes
from governor.inference.admission.queue import AdmissionQueue
from governor.inference.config import ServiceConfig
from governor.inference.engines.base import Engine
from governor.inference.engines.capabilities import OnGpus, Placed
from governor.inference.engines.registry import create_engine
from governor.inference.http.body import body_too_large, check_declared_size
from governor.inference.http.errors import (
    CLIENT_GONE,
    CLIENT_TOO_SLOW,
    INVALID_REQUEST,
    NOT_FOUND,
    SERVER,
    APIError,
)
from governor.inference.http.listener import first_byte_at, serving
from governor.inference.http.timeouts import ClientTooSlow, ClientWriter
from governor.inference.openai import routes
from governor.inference.openai.prompts import text_work_ctx
from governor.inference.probe_mark import probe_mark
from governor.inference.telemetry.metrics import ServiceMetrics
from governor.inference.telemetry.request_log import RequestFacts, RequestLogWriter
from governor.inference.telemetry.stages import RequestStages, StageClock
from governor.inference.telemetry.tracing import (
    add_stages_event,
    exemplar,
    setup_tracing,
)
from governor.inference.warmup import WarmupResult, warm_up
from governor.vllm.runtime_info import runtime_versions

log = logging.getLogger(__name__)

EngineFactory = Callable[[ServiceConfig, CollectorRegistry], Engine]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
TRACED_PREFIXES = ("/v1/", "/admin/")
GENERATION_ROUTES = frozenset({CHAT_COMPLETIONS_PATH, COMPLETIONS_PATH})


def default_engine_factory(config: ServiceConfig, registry: CollectorRegistry) -> Engine:
    return create_engine(config.engine, registry)


def create_app(
    config: ServiceConfig,
    *,
    engine_factory: EngineFactory = default_engine_factory,
    env: Mapping[str, str] | None = None,
    registry: CollectorRegistry | None = None,
    on_engine_failure: Callable[[str], None] | None = None,
) -> web.Application:
    """The service. ``on_engine_failure`` is called with the root cause when the engine fails to
    start (``governor serve`` stops the process with it); without it the service stays up and
    ``/health`` answers 503."""
    app = web.Application(client_max_size=config.max_body_bytes, middlewares=[_observe])
    app[keys.CONFIG] = config
    app[keys.REGISTRY] = registry or CollectorRegistry(auto_describe=True)
    app[keys.ADMIN_LOCK] = asyncio.Lock()
    app.cleanup_ctx.append(_tracing_ctx(os.environ if env is None else env))
    app.cleanup_ctx.append(text_work_ctx)
    app.cleanup_ctx.append(_request_log_ctx)
    app.cleanup_ctx.append(_engine_ctx(engine_factory, on_engine_failure))
    app.router.add_post(CHAT_COMPLETIONS_PATH, routes.chat_completions)
    app.router.add_post(COMPLETIONS_PATH, routes.completions)
    app.router.add_get("/v1/models", _models)
    app.router.add_get(HEALTH_PATH, _health)
    app.router.add_get(METRICS_PATH, _metrics)
    app.router.add_get(ADMIN_BATCHING_PATH, admin.get_batching)
    app.router.add_put(ADMIN_BATCHING_PATH, admin.put_batching)
    app.router.add_get(ADMIN_ADMISSION_PATH, admin.get_admission)
    app.router.add_put(ADMIN_ADMISSION_PATH, admin.put_admission)
    app.router.add_get(DEVICE_PATH, device.get_device)
    app.router.add_get(FAULTS_PATH, device.get_faults)
    app.router.add_put(FAULTS_PATH, device.put_faults)
    return app


def _tracing_ctx(
    env: Mapping[str, str],
) -> Callable[[web.Application], AsyncIterator[None]]:
    async def tracing_ctx(app: web.Application) -> AsyncIterator[None]:
        app[keys.TRACING] = setup_tracing(app[keys.CONFIG].tracing, env)
        yield
        # Flushing pending spans may block on the network: keep it off the event loop.
        await asyncio.to_thread(app[keys.TRACING].shutdown)

    return tracing_ctx


async def _request_log_ctx(app: web.Application) -> AsyncIterator[None]:
    settings = app[keys.CONFIG].request_log
    if settings.path is None:
        yield
        return
    writer = await asyncio.to_thread(RequestLogWriter, settings)
    app[keys.REQUEST_LOG] = writer
    log.info("request log: %s (rotated at %d bytes, %d kept)", settings.path,
             settings.max_bytes, settings.backups)
    yield
    await asyncio.to_thread(writer.close)


def _engine_ctx(
    factory: EngineFactory, on_failure: Callable[[str], None] | None,
) -> Callable[[web.Application], AsyncIterator[None]]:
    async def engine_ctx(app: web.Application) -> AsyncIterator[None]:
        config = app[keys.CONFIG]
        engine = factory(config, app[keys.REGISTRY])
        metrics = ServiceMetrics(app[keys.REGISTRY], engine.model_name, config.classes.names,
                                 dict(config.latency_buckets))
        metrics.set_info(config.engine.kind, engine.model_name, VERSION)
        metrics.set_runtime(runtime_versions())
        metrics.engine_ready.set_function(lambda: 1.0 if engine.ready else 0.0)
        if isinstance(engine, OnGpus) and engine.gpu_uuids:
            metrics.set_gpus(engine.gpu_uuids)
        app[keys.ENGINE_SPAN_ATTRIBUTES] = engine_span_attributes(engine)
        app[keys.ENGINE], app[keys.METRICS] = engine, metrics
        policy = AdmissionPolicy.of(config.classes, config.admission.max_in_flight,
                                    config.admission.max_queue)
        app[keys.ADMISSION] = admission = AdmissionQueue(
            policy.max_in_flight, policy.max_queue, classes=policy.classes,
            first_token_targets=dict(config.admission.first_token_targets),
            deadlines=config.admission.deadline_settings())
        metrics.read_queue(admission)
        app[keys.PROMPT_SIZES] = PromptSizes()
        app[keys.WARMED] = warmed = asyncio.Event()
        # Start in the background: /health answers 503 until the engine is ready (vLLM takes
        # tens of seconds) and warm, and a failed start leaves the service up to say so.
        starting = asyncio.create_task(
            _start(engine, metrics, config, warmed, on_failure), name="engine-start")
        yield
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        await engine.close()

    return engine_ctx


async def _start(engine: Engine, metrics: ServiceMetrics, config: ServiceConfig,
                 warmed: asyncio.Event, on_failure: Callable[[str], None] | None) -> None:
    try:
        began = time.perf_counter()
        await engine.start()
        metrics.startup.labels(PHASE_ENGINE).set(time.perf_counter() - began)
        warmup = await warm_up(engine, config.warmup, config.classes)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        cause = root_cause(exc)
        if on_failure is None:
            log.exception("the engine failed to start (%s); /health answers 503", cause)
        else:
            log.debug("engine start failure", exc_info=True)
            on_failure(cause)
        return
    _record_warmup(metrics, warmup)
    metrics.set_limits(metrics.limit, engine.limits)
    metrics.set_limits(metrics.floor, engine.floor)
    metrics.set_limits(metrics.ceiling, engine.ceiling)
    warmed.set()
    log.info("engine ready: %s, limits %s (warm-up %.1f s)", engine.model_name,
             engine.limits.as_dict(), warmup.seconds)


def _record_warmup(metrics: ServiceMetrics, warmup: WarmupResult) -> None:
    metrics.startup.labels(PHASE_WARMUP).set(warmup.seconds)
    for round_, seconds in ((ROUND_FIRST, warmup.first_round_ttft_seconds),
                            (ROUND_LAST, warmup.last_round_ttft_seconds)):
        if seconds is not None:
            metrics.warmup_first_token.labels(round_).set(seconds)


def root_cause(exc: BaseException) -> str:
    """The innermost exception of a chain, in one line: what an operator must fix."""
    seen: set[int] = set()
    while (exc.__cause__ or exc.__context__) is not None and id(exc) not in seen:
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:1000]


def _route(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


def _from_http_exception(exc: web.HTTPException) -> APIError:
    if exc.status == 413:
        return body_too_large(exc.text or "")
    if exc.status == 404:
        return APIError(404, "no such route", type_=NOT_FOUND)
    return APIError(exc.status, exc.reason, type_=INVALID_REQUEST if exc.status < 500 else SERVER)


def engine_span_attributes(engine: Engine) -> dict[str, AttributeValue]:
    """What the engine's spans (queue, prefill, decode) say of where it runs: its GPUs (none on
    a CPU) and, for an engine that knows it, its data-parallel place."""
    out: dict[str, AttributeValue] = {}
    if isinstance(engine, OnGpus) and engine.gpu_uuids:
        out[tr.ENGINE_GPU_UUIDS] = list(engine.gpu_uuids)
    if isinstance(engine, Placed):
        place = engine.placement
        if place.gpu_indices:
            out[tr.ENGINE_GPU_INDICES] = list(place.gpu_indices)
        out[tr.ENGINE_DATA_PARALLEL_SIZE] = place.data_parallel_size
        if place.data_parallel_rank is not None:
            out[tr.ENGINE_DATA_PARALLEL_RANK] = place.data_parallel_rank
    return out


def _is_probe(request: web.Request) -> bool:
    """Whether the request carries the synthetic probe's mark with the probe token (aiohttp's
    headers ignore the name's case); a refused mark is counted, its value never shown."""
    token = request.app[keys.CONFIG].probe_token
    mark = probe_mark(request.headers.getall(PROBE_HEADER, []), token)
    metrics = request.app.get(keys.METRICS)
    if mark.rejected is not None and metrics is not None:
        metrics.probe_mark_rejected.labels(mark.rejected).inc()
    return mark.probe


def _clock(request: web.Request) -> StageClock:
    """The request's stage clock, from its first byte (from now when that is unknown); the
    time up to now was reading its headers."""
    now = time.perf_counter()
    arrived = first_byte_at(request)
    return StageClock(now if arrived is None or arrived > now else arrived, read=now)


@web.middleware
async def _observe(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Status, duration, stages and span of every request, from its first byte; OpenAI error
    bodies for every failure; and every response the handler did not send itself sent within
    the write timeout."""
    app = request.app
    route = _route(request)
    request[keys.STAGES] = clock = _clock(request)
    span = _start_span(request, route, clock.start)
    code = "500"
    request[keys.PROBE] = probe = _is_probe(request)
    # The probe's requests are not traffic: a replayed log would not want them either.
    writer = None if probe else app.get(keys.REQUEST_LOG)
    if writer is not None and route in GENERATION_ROUTES:
        request[keys.FACTS] = RequestFacts(time.time())
    # The span is the current one while the handler runs, so every log line of the request
    # carries its trace id (governor.common.logs).
    with _current(span), serving(request) as only_request:
        try:
            response = await _respond(request, handler)
            if only_request:  # /health or /metrics served past a connection limit
                response.force_close()
            code = request.get(keys.OUTCOME) or str(response.status)
            if not response.prepared:
                code = await _deliver(request, response, code)
            return response
        except asyncio.CancelledError:
            # The client closed the connection; the engine request is aborted.
            code = request.get(keys.OUTCOME, CLIENT_GONE)
            raise
        finally:
            request_class = request.get(keys.CLASS, UNCLASSIFIED)
            stages = clock.finish()
            _record(app, route, code, request_class, stages, span, probe=probe)
            if writer is not None and keys.FACTS in request:
                facts: RequestFacts = request[keys.FACTS]
                facts.stages = stages
                writer.submit(facts, route, request_class, code)


async def _respond(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The handler's response, or the OpenAI error response for what it raised."""
    try:
        check_declared_size(request.content_length, request.app[keys.CONFIG].max_body_bytes)
        return await handler(request)
    except APIError as exc:
        return exc.response()
    except web.HTTPException as exc:
        return _from_http_exception(exc).response()
    except Exception:
        if request.get(keys.STREAMING):
            raise  # the status line is gone; aiohttp drops the connection
        log.exception("unexpected error on %s %s", request.method, request.path)
        return APIError(500, "internal server error", type_=SERVER).response()


async def _deliver(request: web.Request, response: web.StreamResponse, code: str) -> str:
    """Send a response the handler built; the code the request is counted under. A client that
    does not read it within the write timeout (a large completion, /metrics) is hung up on,
    rather than holding the connection for as long as it likes; one that has gone (its end of
    the connection came in as the response was ready) is counted 499, as it would be a moment
    later, when its request is cancelled."""
    timeout = request.app[keys.CONFIG].connections.write_timeout_seconds
    writer = ClientWriter(request, response, timeout)
    try:
        await writer.send()
    except ClientTooSlow:
        writer.abandon()
        return CLIENT_TOO_SLOW
    except ConnectionError:
        return CLIENT_GONE
    finally:
        request[keys.STAGES].reach(Stage.STREAM_WRITE)
    return code


def _start_span(request: web.Request, route: str, arrived: float) -> trace.Span | None:
    """The SERVER span of a request under :data:`TRACED_PREFIXES`, from its first byte
    (``arrived``, ``time.perf_counter``)."""
    if not route.startswith(TRACED_PREFIXES):
        return None
    start_ns = time.time_ns() - int((time.perf_counter() - arrived) * 1e9)
    tracing = request.app[keys.TRACING]
    span = tracing.tracer.start_span(
        f"{request.method} {route}", context=tracing.extract_context(request.headers),
        kind=SpanKind.SERVER, start_time=start_ns,
        attributes={"http.request.method": request.method, "http.route": route,
                    "url.path": request.path},
    )
    request[keys.SPAN] = span
    return span


def _current(span: trace.Span | None) -> contextlib.AbstractContextManager[object]:
    if span is None:
        return contextlib.nullcontext()
    return trace.use_span(span, end_on_exit=False, record_exception=False,
                          set_status_on_exception=False)


def _record(
    app: web.Application, route: str, code: str, request_class: str, stages: RequestStages,
    span: trace.Span | None, *, probe: bool = False,
) -> None:
    metrics = app.get(keys.METRICS)
    generation = route in GENERATION_ROUTES
    if metrics is not None and probe:
        metrics.probe_requests.labels(route, code).inc()
    elif metrics is not None:
        metrics.requests.labels(route, code, request_class).inc()
        if span is not None:
            metrics.duration.labels(route, request_class).observe(stages.duration_seconds,
                                                                  exemplar(span))
        if generation and stages.reached_engine:
            metrics.observe_stages(stages)
    if span is not None:
        if generation and app[keys.TRACING].traces_endpoint is not None:
            add_stages_event(span, stages)  # only for spans that go somewhere: it costs µs
        span.set_attribute("http.response.status_code", int(code))
        if code.startswith("5"):
            span.set_status(StatusCode.ERROR)
        span.end()


async def _models(request: web.Request) -> web.Response:
    engine = request.app[keys.ENGINE]
    return web.json_response({"object": "list", "data": [{
        "id": engine.model_name, "object": "model", "created": 0, "owned_by": "governor",
        "max_model_len": engine.max_model_len,
    }]})


async def _health(request: web.Request) -> web.Response:
    engine = request.app[keys.ENGINE]
    if engine.ready and request.app[keys.WARMED].is_set():
        return web.json_response({"status": "ok"})
    if engine.ready:  # up, and sending its warm-up requests
        return web.json_response({"status": "warming_up"}, status=503)
    return web.json_response({"status": "unavailable"}, status=503)


OPENMETRICS = "application/openmetrics-text"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"


def _wants_openmetrics(accept: str) -> bool:
    return any(part.split(";")[0].strip() == OPENMETRICS for part in accept.split(","))


def _render_metrics(registry: CollectorRegistry, openmetrics_wanted: bool) -> tuple[bytes, str]:
    if openmetrics_wanted:
        # prometheus_client's default OpenMetrics escaping rewrites the colon in vLLM's sample
        # names ("vllm:x" → "vllm_x") but not in their TYPE lines, which no parser accepts; names
        # with colons are valid classic names, so "allow-utf-8" leaves them as they are.
        body = openmetrics.generate_latest(  # type: ignore[no-untyped-call]
            registry, escaping=openmetrics.ALLOWUTF8)
        return body, OPENMETRICS_CONTENT_TYPE
    return generate_latest(registry), CONTENT_TYPE_PLAIN_0_0_4


async def _metrics(request: web.Request) -> web.Response:
    # Rendering vLLM's families takes milliseconds; in a worker thread the event loop keeps
    # streaming tokens meanwhile (the service runs with a short GIL switch interval).
    body, content_type = await asyncio.to_thread(
        _render_metrics, request.app[keys.REGISTRY],
        _wants_openmetrics(request.headers.get("Accept", "")))
    response = web.Response(body=body)
    response.headers["Content-Type"] = content_type
    return response
