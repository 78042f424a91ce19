"""Real-time mode: the simulated engine behind the service, one asyncio step loop.

``create_sim_engine(settings, registry)`` is what ``--engine sim`` builds. The step loop
schedules a step, sleeps until the step's simulated end (``time_scale`` wall seconds per
simulated second; 0 makes every step free), applies it, and wakes only the consumers that got
new tokens and are waiting. A consumer turns whatever its request produced since it last looked
into one :class:`TokenDelta`, so a slow consumer gets fewer, larger deltas instead of a backlog.

Timestamps follow the step plan, not the moment the loop woke up, so the ``vllm:*`` latencies
are the simulated ones even when the event loop wakes up late; if it falls behind by more than
a few milliseconds, the timeline restarts from the moment the loop gets to it.

The engine runs on a simulated GPU (:mod:`.device`): every step is charged to it, and the faults
a drill sets on it (``PUT /admin/sim/faults``) slow the steps, stall the loop after an XID and
slow :meth:`SimEngine.tokenize`. The service reads it through :meth:`SimEngine.device_report`.

vLLM's frontend process (:mod:`.frontend`) is not simulated here: the service's own event loop
is the frontend. It tokenizes every prompt and turns every step's tokens into stream chunks,
paying those CPU costs for real, so sleeping for the modelled ones as well would count them
twice. The engine keeps only the one-way hop to the engine-core process (``ipc_seconds``), a
latency that costs the loop nothing; the step loop wakes consumers as each step ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Final

from prometheus_client import CollectorRegistry

from governor.contracts.simdevice import DeviceReport, Faults
from governor.inference.engines.base import (
    BatchingLimits,
    EngineError,
    EngineErrorKind,
    EngineStats,
    EngineTimes,
    FinishReason,
    GenerateRequest,
    TokenDelta,
)
from governor.inference.engines.registry import EngineEntry
from governor.inference.engines.settings import EngineSettings, SchedulingPolicy
from governor.inference.engines.sim.core import EngineCore, RequestTooLarge
from governor.inference.engines.sim.metrics import VllmMetrics
from governor.inference.engines.sim.presets import Preset, get_preset
from governor.inference.engines.sim.request import SimRequest, Status
from governor.inference.engines.sim.tokenizer import (
    MAX_TOKEN_BYTES,
    OutputPlan,
    SimTokenizer,
    plan_output,
    render_chat,
)

log = logging.getLogger(__name__)

_MAX_LAG_SECONDS = 0.005


class _Stream:
    """Delivery state of one request: what its consumer has taken so far."""

    __slots__ = ("chars", "plan", "request", "sent", "waiter")

    def __init__(self, request: SimRequest, plan: OutputPlan) -> None:
        self.request = request
        self.plan = plan
        self.sent = 0  # tokens handed to the consumer
        self.chars = 0  # characters handed to the consumer
        self.waiter: asyncio.Future[None] | None = None

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)


class SimEngine:
    """The :class:`~governor.inference.engines.base.Engine` of ``--engine sim``."""

    def __init__(
        self,
        preset: Preset,
        *,
        model_name: str,
        registry: CollectorRegistry,
        floor: BatchingLimits,
        seed: int = 0,
        time_scale: float = 1.0,
        clock: Callable[[], float] | None = None,
        policy: SchedulingPolicy = "fcfs",
        gpu_uuid: str | None = None,
    ) -> None:
        if not time_scale >= 0 or math.isinf(time_scale):
            raise ValueError(f"time_scale must be a finite number ≥ 0, got {time_scale}")
        ceiling = BatchingLimits(preset.max_num_seqs, preset.max_num_batched_tokens)
        if not floor.within(BatchingLimits(1, 1), ceiling):
            raise ValueError(f"floor {floor.as_dict()} is not within [1, {ceiling.as_dict()}]")
        self.preset = preset
        self._model_name = model_name
        self._floor = floor
        self._ceiling = ceiling
        self._time_scale = time_scale
        self._clock = clock
        self._metrics = VllmMetrics(model_name)
        self._core = EngineCore(preset, limits=ceiling, seed=seed, observer=self._metrics,
                                policy=policy, gpu_uuid=gpu_uuid, time_scale=time_scale)
        self._device = self._core.device
        self._metrics.scheduler = self._core.scheduler
        registry.register(self._metrics)
        self._tokenizer = SimTokenizer(preset.model.vocab_size)
        self._streams: dict[str, _Stream] = {}
        self._task: asyncio.Task[None] | None = None
        self._wakeup: asyncio.Event | None = None
        self._failure: BaseException | None = None
        self._closed = False
        self._last_enqueued = -math.inf

    # ---- Engine properties -------------------------------------------------------------------

    @property
    def system(self) -> str:
        return "vllm"

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def max_model_len(self) -> int:
        return self.preset.max_model_len

    @property
    def max_token_bytes(self) -> int:
        return MAX_TOKEN_BYTES

    @property
    def ready(self) -> bool:
        return self._task is not None and not self._task.done() and not self._closed

    @property
    def limits(self) -> BatchingLimits:
        return self._core.limits

    @property
    def floor(self) -> BatchingLimits:
        return self._floor

    @property
    def ceiling(self) -> BatchingLimits:
        return self._ceiling

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        if self._task is not None:
            return
        self._wakeup = asyncio.Event()
        self._task = asyncio.create_task(self._step_loop(), name=f"sim-engine {self._model_name}")

    async def close(self) -> None:
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for stream in list(self._streams.values()):
            self._abort_stream(stream)

    # ---- requests ----------------------------------------------------------------------------

    def tokenize(self, text: str) -> Sequence[int]:
        # Thread-safe: the tokenizer's only state is a memo of piece ids, in which a race at
        # worst computes an id twice.
        slowed = self._device.tokenize_seconds(text)
        if slowed:
            time.sleep(slowed)  # a text thread's time, as a slow tokenizer would take it
        return self._tokenizer.encode(text)

    def render_chat(self, messages: Sequence[Mapping[str, str]]) -> str:
        return render_chat(messages)

    async def generate(self, request: GenerateRequest) -> AsyncIterator[TokenDelta]:
        stream = self._submit(request)
        sim_request, plan = stream.request, stream.plan
        loop = asyncio.get_running_loop()
        first = True
        try:
            while True:
                produced = sim_request.num_outputs
                finished = sim_request.status is Status.FINISHED
                if produced == stream.sent and not finished:
                    if self._failure is not None:
                        raise EngineError(EngineErrorKind.DEAD, self._not_ready_reason())
                    stream.waiter = loop.create_future()
                    await stream.waiter
                    continue
                text = plan.text(stream.sent, produced)
                if plan.text_limit is not None and stream.chars + len(text) > plan.text_limit:
                    text = text[: max(plan.text_limit - stream.chars, 0)]
                delta = TokenDelta(
                    text=text,
                    num_tokens=produced - stream.sent,
                    finish_reason=sim_request.finish_reason if finished else None,
                    times=_times(sim_request, first, finished) if first or finished else None,
                    cached_prompt_tokens=sim_request.num_cached_tokens if finished else None,
                )
                stream.sent = produced
                stream.chars += len(text)
                first = False
                yield delta
                if finished:
                    return
        finally:
            if sim_request.status is not Status.FINISHED:
                self._abort_stream(stream)  # the consumer went away early
            self._streams.pop(request.request_id, None)

    def _submit(self, request: GenerateRequest) -> _Stream:
        if not self.ready:
            raise EngineError(EngineErrorKind.DEAD, self._not_ready_reason())
        if request.request_id in self._streams:
            raise EngineError(
                EngineErrorKind.INVALID_REQUEST, f"request id {request.request_id!r} is in use"
            )
        plan = plan_output(request.prompt, request.max_tokens, request.sampling)
        try:
            # max_tokens, not the planned length, is what the client asked room for.
            self._core.check_fits(len(request.prompt_token_ids), request.max_tokens)
            sim_request = self._core.new_request(
                request.request_id,
                arrival_time=self._now(),
                prompt=request.prompt_token_ids,
                num_outputs=plan.num_tokens,
                finish_reason=plan.finish_reason,
                priority=request.priority,
            )
        except RequestTooLarge as exc:
            raise EngineError(EngineErrorKind.INVALID_REQUEST, str(exc), param=exc.param) from exc
        stream = _Stream(sim_request, plan)
        sim_request.sink = stream
        self._streams[request.request_id] = stream
        # Only the hop to the engine-core process is simulated here: the service's own event
        # loop tokenizes and streams, so it pays the frontend's CPU costs for real.
        latency = self.preset.frontend.ipc_seconds * self._time_scale
        if latency > 0:
            asyncio.get_running_loop().call_later(latency, self._enqueue, stream)
        else:
            self._enqueue(stream)
        return stream

    def _enqueue(self, stream: _Stream) -> None:
        request = stream.request
        if request.status is Status.FINISHED or self._closed:
            return  # aborted before it reached the scheduler
        now = self._now()
        self._last_enqueued = now
        self._core.scheduler.add(request, now)
        if self._wakeup is not None:
            self._wakeup.set()

    async def abort(self, request_id: str) -> None:
        stream = self._streams.get(request_id)
        if stream is not None:
            self._abort_stream(stream)

    def _abort_stream(self, stream: _Stream) -> None:
        request = stream.request
        if request.status is Status.WAITING and math.isnan(request.queued_time):
            # Still on its way to the scheduler (the IPC hop): just mark it finished.
            request.status = Status.FINISHED
            request.finish_reason = FinishReason.ABORT
        else:
            self._core.scheduler.abort(request, self._now())
        stream.wake()
        if self._wakeup is not None:
            self._wakeup.set()  # freed blocks may let a waiting request in

    # ---- limits and stats --------------------------------------------------------------------

    async def set_limits(self, limits: BatchingLimits) -> BatchingLimits:
        if not limits.within(self._floor, self._ceiling):
            raise EngineError(
                EngineErrorKind.INVALID_REQUEST,
                f"limits {limits.as_dict()} are outside [{self._floor.as_dict()}, "
                f"{self._ceiling.as_dict()}]",
            )
        self._core.limits = limits  # read by the next step's scheduling
        return limits

    async def ranks(self) -> list[dict[str, Any]] | None:
        return None  # one simulated engine, no data parallelism

    def stats(self) -> EngineStats:
        scheduler = self._core.scheduler
        return EngineStats(
            num_requests_running=len(scheduler.running),
            num_requests_waiting=len(scheduler.waiting),
            kv_cache_usage_ratio=self._core.kv.usage,
        )

    # ---- the simulated GPU (governor.inference.engines.capabilities) -------------------------

    @property
    def gpu_uuids(self) -> tuple[str, ...]:
        return (self._device.gpu_uuid,)

    @property
    def faults(self) -> Faults:
        return self._device.faults

    def set_faults(self, faults: Faults) -> Faults:
        """Replace the faults of the simulated GPU; returns those they replaced."""
        return self._device.set_faults(faults, self._now())

    def device_report(self) -> DeviceReport:
        return self._device.report(self._now())

    # ---- the step loop -----------------------------------------------------------------------

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    def _not_ready_reason(self) -> str:
        if self._failure is not None:
            return f"the simulated engine died: {self._failure!r}"
        if self._closed:
            return "the simulated engine is shut down"
        return "the simulated engine has not started"

    async def _step_loop(self) -> None:
        try:
            await self._run_steps()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("simulated engine step loop failed")
            self._failure = exc
            for stream in list(self._streams.values()):
                stream.wake()  # consumers raise EngineError(DEAD)

    async def _run_steps(self) -> None:
        core, scheduler, device = self._core, self._core.scheduler, self._device
        wakeup = self._wakeup
        assert wakeup is not None
        scale = self._time_scale
        planned_end = -math.inf
        idle = True  # no step in flight: the next one pays the idle-start cost
        while True:
            if not scheduler.has_work:
                wakeup.clear()
                await wakeup.wait()
                idle = True
                continue
            now = self._now()
            resume = device.resume_at(now)
            if resume > now:  # recovering from an XID: nothing runs on the GPU
                await asyncio.sleep(resume - now)
                idle = True
                continue
            # A late wake-up (the event loop's timers are coarse) does not shift the timeline;
            # a loop that fell far behind restarts it from now.
            start = planned_end if now - planned_end < _MAX_LAG_SECONDS else now
            # ...but a step never starts before a request it may admit has arrived.
            start = max(start, self._last_enqueued)
            plan = scheduler.schedule(start)
            if plan.empty:
                # Nothing fits until a request finishes or is aborted: wait for news.
                wakeup.clear()
                await wakeup.wait()
                idle = True
                continue
            planned_end = start + core.step_seconds(plan, idle=idle) * scale
            idle = False
            delay = planned_end - self._now()
            await asyncio.sleep(delay if delay > 0 else 0)
            scheduler.complete(plan, planned_end)
            for request in plan.requests:
                stream = request.sink
                if isinstance(stream, _Stream) and stream.waiter is not None:
                    stream.wake()


def _times(request: SimRequest, first: bool, finished: bool) -> EngineTimes:
    """The request's queue and prefill (for its first delta) and decode (for its last)."""
    return EngineTimes(
        _known(request.scheduled_time - request.queued_time) if first else None,
        _known(request.first_token_time - request.scheduled_time) if first else None,
        _known(request.last_token_time - request.first_token_time) if finished else None)


def _known(seconds: float) -> float | None:
    """An interval between two of the engine's timestamps; ``None`` while one is unset (NaN)."""
    return None if math.isnan(seconds) else seconds


def create_sim_engine(settings: EngineSettings, registry: CollectorRegistry) -> SimEngine:
    """The simulated engine ``governor serve --engine sim`` runs, from the service settings."""
    preset = get_preset(settings.preset)
    for name, value in (
        ("max_num_seqs", settings.max_num_seqs),
        ("max_num_batched_tokens", settings.max_num_batched_tokens),
        ("max_model_len", settings.max_model_len),
    ):
        if value is not None and value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    if settings.max_model_len is not None and settings.max_model_len > preset.max_model_len:
        raise ValueError(
            f"max_model_len {settings.max_model_len} exceeds the {preset.name} preset's "
            f"{preset.max_model_len}"
        )
    preset = preset.with_overrides(
        max_model_len=settings.max_model_len,
        max_num_seqs=settings.max_num_seqs,
        max_num_batched_tokens=settings.max_num_batched_tokens,
    )
    floor = BatchingLimits(
        min(settings.min_num_seqs, preset.max_num_seqs),
        min(settings.min_num_batched_tokens, preset.max_num_batched_tokens),
    )
    return SimEngine(
        preset,
        model_name=settings.served_model_name or preset.name,
        registry=registry,
        floor=floor,
        seed=settings.seed,
        time_scale=settings.time_scale,
        policy=settings.scheduling_policy,
        gpu_uuid=settings.gpu_uuid,
    )


ENGINE: Final = EngineEntry(
    summary="the embedded simulated engine: continuous batching on a roofline preset, no GPU",
    create=create_sim_engine,
)
