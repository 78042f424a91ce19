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
from array import array
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
        history_seconds: float | None = None,
        on_finish: Callable[[VirtualSim, RequestRecord], None] | None = None,
    ) -> None:
        """``history_seconds`` bounds memory on long runs: steps, samples and finished requests
        older than that are forgotten (``None`` keeps everything)."""
        if history_seconds is not None and not history_seconds > 0:
            raise ValueError(f"history_seconds must be positive, got {history_seconds}")
        self.preset = preset
        self.core = EngineCore(preset, limits=limits, seed=seed, observer=self)
        self.now = 0.0
        self.steps: list[StepRecord] = []
        self._record_token_times = record_token_times
        self._history = history_seconds
        self._next_trim = history_seconds or math.inf
        self._on_finish = on_finish
        self._requests: dict[str, SimRequest] = {}
        self._arrivals: list[tuple[float, int, SimRequest]] = []  # (schedulable at, seq, request)
        self._limit_changes: list[tuple[float, int, BatchingLimits]] = []
        self._seq = 0  # submission order: names requests, breaks ties between equal times
        self._changes = 0
        self._samples = _SampleLog()

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
        heapq.heappush(self._limit_changes, (when, self._changes, limits))
        self._changes += 1
        self._apply_limit_changes(self.now)

    def run_until(self, end: float) -> None:
        """Run every step that starts before ``end`` (the last one may finish after it)."""
        self._advance(end, until_idle=False)

    def run_until_idle(self, limit: float = math.inf) -> None:
        """Run until every submitted request has finished (or until ``limit``).

        ``now`` is then the end of the last step, not a later time.
        """
        self._advance(limit, until_idle=True)

    def _advance(self, end: float, *, until_idle: bool) -> None:
        scheduler = self.core.scheduler
        while True:
            self._admit(self.now)
            self._apply_limit_changes(self.now)
            if not scheduler.has_work:
                if until_idle and not self._arrivals:
                    return
                upcoming = self._next_event()
                if upcoming >= end:
                    if not until_idle:
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
        self._samples.close_step(end)
        self.now = end
        if end >= self._next_trim and self._history is not None:
            self._forget_before(end - self._history)
            self._next_trim = end + self._history / 4
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
        self._samples.ttft.append(request.first_token_time - request.arrival_time)

    def on_inter_token(self, seconds: float) -> None:
        self._samples.itl.append(seconds)

    def on_finished(self, request: SimRequest) -> None:
        pass

    def on_step(self, iteration_tokens: int) -> None:
        pass

    # ---- reading results ---------------------------------------------------------------------

    def record(self, request_id: str) -> RequestRecord:
        return _record(self._requests[request_id])

    def records(self) -> list[RequestRecord]:
        return [_record(r) for r in self._requests.values()]

    def itl_samples(self, start: float, end: float) -> list[float]:
        """Every inter-token latency emitted by a step that ended in ``[start, end)``."""
        return self._samples.between(self._samples.itl, self._samples.itl_offsets, start, end)

    def ttft_samples(self, start: float, end: float) -> list[float]:
        """Every time to first token emitted by a step that ended in ``[start, end)``."""
        return self._samples.between(self._samples.ttft, self._samples.ttft_offsets, start, end)

    def window(self, start: float, end: float) -> WindowStats:
        """ITL and TTFT percentiles of the samples emitted by steps ending in ``[start, end)``."""
        itl = self.itl_samples(start, end)
        ttft = self.ttft_samples(start, end)
        p50, p90, p99, p100 = _percentiles(itl, (50, 90, 99, 100))
        t50, t99 = _percentiles(ttft, (50, 99))
        tokens = len(itl) + len(ttft)  # every generated token is one or the other
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

    def _forget_before(self, cutoff: float) -> None:
        dropped = self._samples.trim_before(cutoff)
        del self.steps[:dropped]
        self._requests = {
            rid: r for rid, r in self._requests.items() if not r.finished or r.finish_time >= cutoff
        }


class _SampleLog:
    """ITL and TTFT samples in emission order, indexed by the end of the step that emitted them.

    ``*_offsets[k]`` is the number of samples after step ``k``, so step ``k``'s samples are
    ``values[offsets[k - 1]:offsets[k]]``.
    """

    def __init__(self) -> None:
        self.itl = array("d")
        self.ttft = array("d")
        self.ends: list[float] = []
        self.itl_offsets: list[int] = []
        self.ttft_offsets: list[int] = []

    def close_step(self, end: float) -> None:
        self.ends.append(end)
        self.itl_offsets.append(len(self.itl))
        self.ttft_offsets.append(len(self.ttft))

    def between(
        self, values: array[float], offsets: list[int], start: float, end: float
    ) -> list[float]:
        first = bisect_left(self.ends, start)
        last = bisect_left(self.ends, end)
        lo = offsets[first - 1] if first > 0 else 0
        hi = offsets[last - 1] if last > 0 else 0
        return values[lo:hi].tolist()

    def trim_before(self, cutoff: float) -> int:
        """Forget the steps that ended before ``cutoff``; returns how many."""
        steps = bisect_left(self.ends, cutoff)
        if steps == 0:
            return 0
        for values, offsets in ((self.itl, self.itl_offsets), (self.ttft, self.ttft_offsets)):
            dropped = offsets[steps - 1]
            del values[:dropped]
            offsets[:] = [n - dropped for n in offsets[steps:]]
        del self.ends[:steps]
        return steps


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
