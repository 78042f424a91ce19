"""Virtual-clock mode: the simulated engine as a discrete-event simulation, minutes in seconds.

Time jumps from one step's end to the next (or to the next arrival when idle), so a workload of
millions of tokens runs as fast as the scheduler can plan steps. Deterministic given the seed.

Use (an open-loop workload, then a closed control loop)::

    sim = VirtualSim(get_preset("llama-3-8b@h200"), seed=1)
    for i in range(64):
        sim.submit(arrival=0.0, prompt=128, output_tokens=2000)
    for k in range(20):
        sim.submit(arrival=k * 1.0, prompt=7000, output_tokens=1)
    while sim.now < 20.0:
        sim.run_until(sim.now + 5.0)
        stats = sim.window(sim.now - 5.0, sim.now)        # ITL/TTFT percentiles of the window
        if stats.itl_p99 > 0.030:
            sim.set_limits(BatchingLimits(256, sim.limits.max_num_batched_tokens // 2))
    itls = sim.record("r0").inter_token_latencies         # every token of one request

A request's prompt is a token count (content nobody shares) or token ids (prefix caching looks
them up). ``on_finish`` lets a closed-loop workload submit the next request when one ends.
"""

from __future__ import annotations

import heapq
import itertools
import math
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from inference.engines.base import BatchingLimits, FinishReason
from inference.engines.sim.core import EngineCore
from inference.engines.sim.presets import Preset
from inference.engines.sim.request import SimRequest
from inference.engines.sim.scheduler import Counters, StepPlan


@dataclass(frozen=True, slots=True)
class StepRecord:
    start: float
    duration: float
    decode_tokens: int
    prefill_tokens: int
    num_running: int  # after the step
    num_waiting: int  # after the step
    kv_usage: float  # after the step
    preemptions: int  # during scheduling of this step


@dataclass(frozen=True, slots=True)
class RequestRecord:
    request_id: str
    arrival_time: float
    queued_time: float  # reached the scheduler (after the frontend latency)
    scheduled_time: float  # first scheduled (NaN while waiting)
    first_token_time: float
    finish_time: float
    num_prompt_tokens: int
    num_output_tokens: int
    num_cached_tokens: int
    num_preemptions: int
    finish_reason: FinishReason | None  # None while unfinished
    token_times: tuple[float, ...]

    @property
    def time_to_first_token(self) -> float:
        return self.first_token_time - self.arrival_time

    @property
    def inter_token_latencies(self) -> list[float]:
        return [b - a for a, b in itertools.pairwise(self.token_times)]


@dataclass(frozen=True, slots=True)
class WindowStats:
    """Latency percentiles of one time window, as a Prometheus query over it would see them.

    ITLs are the samples observed (tokens emitted) in the window, TTFTs those of requests whose
    first token came in it. Percentiles are NaN when the window has no sample.
    """

    start: float
    end: float
    itl_count: int
    itl_p50: float
    itl_p90: float
    itl_p99: float
    itl_max: float
    ttft_count: int
    ttft_p50: float
    ttft_p99: float
    generation_tokens_per_second: float


def _percentiles(values: Sequence[float], qs: Sequence[float]) -> list[float]:
    if not values:
        return [math.nan] * len(qs)
    return [float(v) for v in np.percentile(np.asarray(values), qs)]


class VirtualSim:
    def __init__(
        self,
        preset: Preset,
        *,
        limits: BatchingLimits | None = None,
        seed: int = 0,
        record_token_times: bool = True,
        on_finish: Callable[[VirtualSim, RequestRecord], None] | None = None,
    ) -> None:
        self.preset = preset
        self.core = EngineCore(preset, limits=limits, seed=seed, observer=self)
        self.now = 0.0
        self.steps: list[StepRecord] = []
        self._record_token_times = record_token_times
        self._on_finish = on_finish
        self._requests: dict[str, SimRequest] = {}
        self._arrivals: list[tuple[float, int, SimRequest]] = []  # (schedulable at, seq, request)
        self._limit_changes: list[tuple[float, int, BatchingLimits]] = []
        self._seq = 0
        # Samples in emission order, and for each step the offset of its first sample.
        self._itl: list[float] = []
        self._ttft: list[float] = []
        self._step_ends: list[float] = []
        self._itl_offsets: list[int] = []
        self._ttft_offsets: list[int] = []

    # ---- driving ---------------------------------------------------------------------------

    @property
    def limits(self) -> BatchingLimits:
        return self.core.limits

    @property
    def counters(self) -> Counters:
        return self.core.scheduler.counters

    def submit(
        self,
        *,
        arrival: float,
        prompt: int | Sequence[int],
        output_tokens: int,
        request_id: str | None = None,
        finish_reason: FinishReason = FinishReason.LENGTH,
    ) -> str:
        """Add a request arriving at ``arrival`` (not before ``now``) that emits ``output_tokens``.

        Returns its id (``request_id``, or ``r<n>`` in submission order).
        """
        if arrival < self.now:
            raise ValueError(f"arrival {arrival} is before the simulation's now {self.now}")
        request_id = request_id or f"r{self._seq}"
        if request_id in self._requests:
            raise ValueError(f"duplicate request id {request_id!r}")
        request = self.core.new_request(
            request_id,
            arrival_time=arrival,
            prompt=prompt,
            num_outputs=output_tokens,
            finish_reason=finish_reason,
            record_token_times=self._record_token_times,
        )
        self._requests[request_id] = request
        latency = self.preset.efficiency.frontend_latency_seconds
        heapq.heappush(self._arrivals, (arrival + latency, self._seq, request))
        self._seq += 1
        return request_id

    def set_limits(self, limits: BatchingLimits, *, at: float | None = None) -> None:
        """Change the limits from the first step that starts at or after ``at`` (default now)."""
        when = self.now if at is None else at
        heapq.heappush(self._limit_changes, (when, self._seq, limits))
        self._seq += 1
        self._apply_limit_changes(self.now)

    def run_until(self, end: float) -> None:
        """Run every step that starts before ``end`` (the last one may finish after it)."""
        scheduler = self.core.scheduler
        while True:
            self._admit(self.now)
            self._apply_limit_changes(self.now)
            if not scheduler.has_work:
                upcoming = self._next_event()
                if upcoming >= end:
                    self.now = max(self.now, end)
                    return
                self.now = upcoming
                continue
            if self.now >= end:
                return
            plan = scheduler.schedule(self.now)
            if plan.empty:
                raise RuntimeError(f"nothing schedulable at {self.now}: {scheduler.waiting[0]!r}")
            self._run_step(plan)

    def run_until_idle(self, limit: float = math.inf) -> None:
        """Run until every submitted request has finished (or until ``limit``)."""
        while self.now < limit and (self.core.scheduler.has_work or self._arrivals):
            self.run_until(min(limit, max(self._next_event(), self.now) + 1.0))

    def _run_step(self, plan: StepPlan) -> None:
        end = plan.start + self.core.step_seconds(plan)
        self._admit(end)
        finished = self.core.scheduler.complete(plan, end)
        kv = self.core.kv
        scheduler = self.core.scheduler
        self.steps.append(
            StepRecord(
                start=plan.start,
                duration=end - plan.start,
                decode_tokens=plan.shape.decode_tokens,
                prefill_tokens=plan.shape.prefill_tokens,
                num_running=len(scheduler.running),
                num_waiting=len(scheduler.waiting),
                kv_usage=kv.usage,
                preemptions=plan.num_preempted,
            )
        )
        self._step_ends.append(end)
        self._itl_offsets.append(len(self._itl))
        self._ttft_offsets.append(len(self._ttft))
        self.now = end
        if self._on_finish is not None:
            for request in finished:
                self._on_finish(self, _record(request))

    def _admit(self, until: float) -> None:
        arrivals, scheduler = self._arrivals, self.core.scheduler
        while arrivals and arrivals[0][0] <= until:
            at, _, request = heapq.heappop(arrivals)
            scheduler.add(request, at)

    def _apply_limit_changes(self, now: float) -> None:
        changes = self._limit_changes
        while changes and changes[0][0] <= now:
            self.core.limits = heapq.heappop(changes)[2]

    def _next_event(self) -> float:
        candidates = [math.inf]
        if self._arrivals:
            candidates.append(self._arrivals[0][0])
        if self._limit_changes:
            candidates.append(self._limit_changes[0][0])
        return min(candidates)

    # ---- StepObserver: collect samples for windows -------------------------------------------

    def on_first_token(self, request: SimRequest) -> None:
        self._ttft.append(request.first_token_time - request.arrival_time)

    def on_inter_token(self, seconds: float) -> None:
        self._itl.append(seconds)

    def on_finished(self, request: SimRequest) -> None:
        pass

    def on_step(self, iteration_tokens: int) -> None:
        pass

    # ---- reading results ---------------------------------------------------------------------

    def record(self, request_id: str) -> RequestRecord:
        return _record(self._requests[request_id])

    def records(self) -> list[RequestRecord]:
        return [_record(r) for r in self._requests.values()]

    def window(self, start: float, end: float) -> WindowStats:
        """ITL and TTFT percentiles of the samples emitted by steps ending in ``[start, end)``."""
        first = bisect_left(self._step_ends, start)
        last = bisect_left(self._step_ends, end)
        itl = self._samples_between(self._itl, self._itl_offsets, first, last)
        ttft = self._samples_between(self._ttft, self._ttft_offsets, first, last)
        p50, p90, p99, p100 = _percentiles(itl, (50, 90, 99, 100))
        t50, t99 = _percentiles(ttft, (50, 99))
        tokens = len(itl) + len(ttft)
        duration = end - start
        return WindowStats(
            start=start,
            end=end,
            itl_count=len(itl),
            itl_p50=p50,
            itl_p90=p90,
            itl_p99=p99,
            itl_max=p100,
            ttft_count=len(ttft),
            ttft_p50=t50,
            ttft_p99=t99,
            generation_tokens_per_second=tokens / duration if duration > 0 else math.nan,
        )

    @staticmethod
    def _samples_between(
        samples: list[float], offsets: list[int], first: int, last: int
    ) -> list[float]:
        # offsets[k] is the sample count *after* step k, so step k's samples are
        # samples[offsets[k-1]:offsets[k]].
        lo = offsets[first - 1] if first > 0 else 0
        hi = offsets[last - 1] if last > 0 else 0
        return samples[lo:hi]


def _record(request: SimRequest) -> RequestRecord:
    return RequestRecord(
        request_id=request.request_id,
        arrival_time=request.arrival_time,
        queued_time=request.queued_time,
        scheduled_time=request.scheduled_time,
        first_token_time=request.first_token_time,
        finish_time=request.finish_time,
        num_prompt_tokens=request.num_prompt_tokens,
        num_output_tokens=request.num_outputs,
        num_cached_tokens=request.num_cached_tokens,
        num_preemptions=request.num_preemptions,
        finish_reason=request.finish_reason if request.finished else None,
        token_times=tuple(request.token_times or ()),
    )
