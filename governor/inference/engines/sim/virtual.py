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
``gate`` puts an admission policy in front of the engine, as the service's admission queue is:
it sees every request arrive, in time order with every delivery, and either lets it in or holds
it; a held request goes on with :meth:`VirtualSim.admit` (its TTFT then includes the wait) or is
turned away with :meth:`VirtualSim.turn_away`.

What a caller of vLLM times is modelled too: requests pass through the frontend process
(:mod:`.frontend`) on their way in, and every step's outputs on their way out, so token times,
TTFT and inter-token latencies here are *deliveries* to the caller, the way the H200 tables
(docs/h200-measurements.md) measured them, and engine-side times (``queued_time``,
``scheduled_time``, the step log) are the engine core's.
"""

from __future__ import annotations

import heapq
import itertools
import math
from array import array
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from governor.common.quantiles import percentiles
from governor.inference.engines.base import BatchingLimits, FinishReason
from governor.inference.engines.settings import SchedulingPolicy
from governor.inference.engines.sim.core import EngineCore
from governor.inference.engines.sim.frontend import Frontend
from governor.inference.engines.sim.presets import Preset
from governor.inference.engines.sim.request import SimRequest, Status
from governor.inference.engines.sim.scheduler import Counters, StepPlan


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
    """One request as its caller saw it, with the engine core's queue and schedule times."""

    request_id: str
    arrival_time: float
    queued_time: float  # reached the scheduler (after the frontend's input processing)
    scheduled_time: float  # first scheduled (NaN while waiting)
    first_token_time: float  # the first output reached the caller
    finish_time: float  # the last output reached the caller (NaN until then)
    num_prompt_tokens: int
    num_output_tokens: int  # delivered so far
    num_cached_tokens: int
    num_preemptions: int
    finish_reason: FinishReason | None  # None until the last output is delivered
    # One entry per output event: outputs that reached the caller together are one event.
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

    ITLs are the samples observed (output events delivered) in the window, TTFTs those of
    requests whose first token was delivered in it. Percentiles are NaN when the window has no
    sample.
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
        policy: SchedulingPolicy = "fcfs",
        gate: Callable[[VirtualSim, str, float], bool] | None = None,
        on_first_token: Callable[[VirtualSim, str, float], None] | None = None,
    ) -> None:
        """``history_seconds`` bounds memory on long runs: steps, samples and finished requests
        older than that are forgotten (``None`` keeps everything). ``on_finish`` is called when
        a request's last output reaches its caller, at ``record.finish_time``: a closed loop
        submits the next request at that time or later. ``policy`` is vLLM's scheduling policy:
        ``"priority"`` orders waiting requests by ``submit(priority=…)`` (lower first).
        ``gate(sim, request_id, at)`` is asked as each request arrives: False holds it.
        ``on_first_token(sim, request_id, at)`` is told when a request's first output reaches
        its caller."""
        if history_seconds is not None and not history_seconds > 0:
            raise ValueError(f"history_seconds must be positive, got {history_seconds}")
        self.preset = preset
        self.core = EngineCore(preset, limits=limits, seed=seed, policy=policy)
        self.frontend = Frontend(preset.frontend, self._deliver)
        self.now = 0.0
        self.steps: list[StepRecord] = []
        self._record_token_times = record_token_times
        self._history = history_seconds
        self._next_trim = history_seconds or math.inf
        self._on_finish = on_finish
        self._gate = gate
        self._on_first_token = on_first_token
        self._admitted: set[str] = set()  # held by the gate, then let in
        self._requests: dict[str, SimRequest] = {}
        # Requests not yet at the frontend: (arrival, seq, request).
        self._incoming: list[tuple[float, int, SimRequest]] = []
        # Requests on their way to the scheduler: (schedulable at, seq, request).
        self._arrivals: list[tuple[float, int, SimRequest]] = []
        self._limit_changes: list[tuple[float, int, BatchingLimits]] = []
        self._seq = 0  # submission order: names requests, breaks ties between equal times
        self._changes = 0
        self._fed = -math.inf  # the latest frontend event handled
        self._deliveries = 0
        self._samples = _SampleLog()
        # The last step's end and outputs, until the next step's preparation lets them go.
        self._held: tuple[float, list[SimRequest]] | None = None

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
        priority: int = 0,
    ) -> str:
        """Add a request arriving at ``arrival`` (not before ``now``) that emits ``output_tokens``.

        Returns its id (``request_id``, or ``r<n>`` in submission order).
        """
        clock = max(self.now, self._fed)
        if arrival < clock:
            raise ValueError(f"arrival {arrival} is before the simulation's now {clock}")
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
            priority=priority,
        )
        self._requests[request_id] = request
        heapq.heappush(self._incoming, (arrival, self._seq, request))
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
        """Run until every submitted request has finished and reached its caller (or until
        ``limit``).

        ``now`` is then the time of the last thing that happened (a step's end, or the start of
        the frontend's last delivery), not a later time.
        """
        self._advance(limit, until_idle=True)

    def _advance(self, end: float, *, until_idle: bool) -> None:
        scheduler = self.core.scheduler
        while True:
            self._feed_frontend(self.now)
            self._admit(self.now)
            self._apply_limit_changes(self.now)
            if not scheduler.has_work:
                self._release(0.0)
                work = self._next_work()
                if until_idle and work == math.inf:
                    return
                changes = self._limit_changes
                upcoming = min(work, changes[0][0]) if changes else work
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
                first = scheduler.waiting.peek()
                raise RuntimeError(f"nothing schedulable at {self.now}: {first!r}")
            released = self._release(self.core.hold_seconds(plan))
            self._run_step(plan, not_before=released)

    def _run_step(self, plan: StepPlan, *, not_before: float = -math.inf) -> None:
        last = self.steps[-1] if self.steps else None
        idle = last is None or plan.start > last.start + last.duration
        # The step cannot end before the host has prepared it (it released the last outputs).
        end = max(plan.start + self.core.step_seconds(plan, idle=idle), not_before)
        self._feed_frontend(end)  # what the frontend does while the GPU runs the step
        self._admit(end)
        emitted = self.core.scheduler.complete(plan, end)
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
        self.now = end
        self._held = (end, emitted)
        if end >= self._next_trim and self._history is not None:
            self._forget_before(end - self._history)
            self._next_trim = end + self._history / 4

    def _release(self, hold: float) -> float:
        """Hand the last step's outputs to the frontend ``hold`` after the step ended; returns
        when (-inf if there were none)."""
        if self._held is None:
            return -math.inf
        end, emitted = self._held
        self._held = None
        at = end + hold
        self._feed_frontend(at)
        self.frontend.outputs(at, emitted)
        self._fed = at
        return at

    def _feed_frontend(self, until: float) -> None:
        """Hand the frontend, in time order, what happens up to ``until``: prompts arriving, and
        the starts of output jobs (from then on nothing joins them: deliver them)."""
        frontend, incoming, arrivals = self.frontend, self._incoming, self._arrivals
        while True:
            job = frontend.next_start
            arrival = incoming[0][0] if incoming else math.inf
            if job <= arrival:
                if job > until:
                    return
                self._fed = job
                frontend.deliver_next()
            else:
                if arrival > until:
                    return
                _, seq, request = heapq.heappop(incoming)
                self._fed = arrival
                if self._gated(request, arrival):
                    continue
                ready = frontend.tokenize(arrival, request.num_prompt_tokens)
                heapq.heappush(arrivals, (ready, seq, request))

    def _gated(self, request: SimRequest, at: float) -> bool:
        """Whether the gate holds back a request arriving at ``at``."""
        if self._gate is None or request.request_id in self._admitted:
            return False
        return not self._gate(self, request.request_id, at)

    def admit(self, request_id: str, at: float) -> None:
        """Let a request the gate held reach the engine at ``at`` (not before the last event)."""
        request = self._requests[request_id]
        if request_id in self._admitted or request.status is not Status.WAITING:
            raise ValueError(f"{request_id!r} is not held by the gate")
        self._admitted.add(request_id)
        heapq.heappush(self._incoming, (max(at, self._fed), self._seq, request))
        self._seq += 1

    def turn_away(self, request_id: str, at: float) -> None:
        """A request the gate held never reaches the engine: it ends at ``at`` with no output
        (finish reason ``abort``, as a request the service answered 429 or 503)."""
        request = self._requests[request_id]
        if request_id in self._admitted or request.status is not Status.WAITING:
            raise ValueError(f"{request_id!r} is not held by the gate")
        request.status = Status.FINISHED
        request.finish_reason = FinishReason.ABORT
        request.finish_time = at

    def _deliver(self, at: float, outputs: list[SimRequest]) -> None:
        """A frontend job's outputs reach their callers at ``at``: one event per request."""
        self._deliveries += 1
        job = self._deliveries
        samples = self._samples
        finished: list[SimRequest] = []
        for req in outputs:
            req.num_delivered += 1
            if req.delivery_seq != job:  # else merged into this job's event for the request
                req.delivery_seq = job
                if math.isnan(req.last_delivery_time):
                    req.first_delivery_time = at
                    samples.ttft.append(at - req.arrival_time)
                    if self._on_first_token is not None:
                        self._on_first_token(self, req.request_id, at)
                else:
                    samples.itl.append(at - req.last_delivery_time)
                req.last_delivery_time = at
                if req.token_times is not None:
                    req.token_times.append(at)
            if req.num_delivered == req.num_outputs_target:
                finished.append(req)
        samples.close(at, len(outputs))
        if self._on_finish is not None:
            for req in finished:
                self._on_finish(self, _record(req))

    def _admit(self, until: float) -> None:
        arrivals, scheduler = self._arrivals, self.core.scheduler
        while arrivals and arrivals[0][0] <= until:
            at, _, request = heapq.heappop(arrivals)
            scheduler.add(request, at)

    def _apply_limit_changes(self, now: float) -> None:
        changes = self._limit_changes
        while changes and changes[0][0] <= now:
            self.core.limits = heapq.heappop(changes)[2]

    def _next_work(self) -> float:
        """When the next request arrives somewhere, or the frontend next delivers (∞: never)."""
        candidates = [math.inf, self.frontend.next_start]
        for heap in (self._incoming, self._arrivals):
            if heap:
                candidates.append(heap[0][0])
        return min(candidates)

    # ---- reading results ---------------------------------------------------------------------

    def record(self, request_id: str) -> RequestRecord:
        return _record(self._requests[request_id])

    def records(self) -> list[RequestRecord]:
        return [_record(r) for r in self._requests.values()]

    def itl_samples(self, start: float, end: float) -> list[float]:
        """Every inter-token latency whose output event was delivered in ``[start, end)``."""
        return self._samples.between(self._samples.itl, self._samples.itl_offsets, start, end)

    def ttft_samples(self, start: float, end: float) -> list[float]:
        """Every time to first token whose first output was delivered in ``[start, end)``."""
        return self._samples.between(self._samples.ttft, self._samples.ttft_offsets, start, end)

    def window(self, start: float, end: float) -> WindowStats:
        """ITL and TTFT percentiles of the samples delivered in ``[start, end)``."""
        itl = self.itl_samples(start, end)
        ttft = self.ttft_samples(start, end)
        p50, p90, p99, p100 = percentiles(itl, (50, 90, 99, 100))
        t50, t99 = percentiles(ttft, (50, 99))
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
            generation_tokens_per_second=(
                self._samples.tokens_between(start, end) / duration if duration > 0 else math.nan
            ),
        )

    def _forget_before(self, cutoff: float) -> None:
        self._samples.trim_before(cutoff)
        del self.steps[: bisect_left(self.steps, cutoff, key=lambda s: s.start + s.duration)]
        self._requests = {
            rid: r
            for rid, r in self._requests.items()
            if not r.delivered or r.last_delivery_time >= cutoff
        }


class _SampleLog:
    """ITL and TTFT samples in delivery order, indexed by the time of the delivery that made them.

    ``*_offsets[k]`` is the number of samples after delivery ``k``, so delivery ``k``'s samples
    are ``values[offsets[k - 1]:offsets[k]]``; ``tokens[k]`` counts the tokens delivered up to
    and including delivery ``k`` (merged outputs make fewer samples than tokens).
    """

    def __init__(self) -> None:
        self.itl = array("d")
        self.ttft = array("d")
        self.times: list[float] = []
        self.itl_offsets: list[int] = []
        self.ttft_offsets: list[int] = []
        self.tokens: list[int] = []
        self._tokens = 0
        self._dropped_tokens = 0

    def close(self, at: float, tokens: int) -> None:
        self._tokens += tokens
        self.times.append(at)
        self.itl_offsets.append(len(self.itl))
        self.ttft_offsets.append(len(self.ttft))
        self.tokens.append(self._tokens)

    def between(
        self, values: array[float], offsets: list[int], start: float, end: float
    ) -> list[float]:
        first = bisect_left(self.times, start)
        last = bisect_left(self.times, end)
        lo = offsets[first - 1] if first > 0 else 0
        hi = offsets[last - 1] if last > 0 else 0
        return values[lo:hi].tolist()

    def tokens_between(self, start: float, end: float) -> int:
        first = bisect_left(self.times, start)
        last = bisect_left(self.times, end)
        lo = self.tokens[first - 1] if first > 0 else self._dropped_tokens
        hi = self.tokens[last - 1] if last > 0 else self._dropped_tokens
        return hi - lo

    def trim_before(self, cutoff: float) -> None:
        """Forget the deliveries made before ``cutoff``."""
        dropped = bisect_left(self.times, cutoff)
        if dropped == 0:
            return
        for values, offsets in ((self.itl, self.itl_offsets), (self.ttft, self.ttft_offsets)):
            count = offsets[dropped - 1]
            del values[:count]
            offsets[:] = [n - count for n in offsets[dropped:]]
        self._dropped_tokens = self.tokens[dropped - 1]
        del self.tokens[:dropped]
        del self.times[:dropped]


def _record(request: SimRequest) -> RequestRecord:
    delivered = request.delivered
    return RequestRecord(
        request_id=request.request_id,
        arrival_time=request.arrival_time,
        queued_time=request.queued_time,
        scheduled_time=request.scheduled_time,
        first_token_time=request.first_delivery_time,
        finish_time=request.last_delivery_time if delivered else math.nan,
        num_prompt_tokens=request.num_prompt_tokens,
        num_output_tokens=request.num_delivered,
        num_cached_tokens=request.num_cached_tokens,
        num_preemptions=request.num_preemptions,
        finish_reason=request.finish_reason if delivered else None,
        token_times=tuple(request.token_times or ()),
    )
