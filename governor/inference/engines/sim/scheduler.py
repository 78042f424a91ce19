"""vLLM V1's scheduling policy over simulated requests, one engine step at a time.

Each step (``Scheduler.schedule`` in ``vllm/v1/core/sched/scheduler.py``):

1. RUNNING requests first, in admission order: a decode takes one token, a request still
   prefilling takes the rest of its prompt up to what is left of the token budget
   (``max_num_batched_tokens``). A request that gets no budget is skipped this step. When the
   KV cache has no block for a request, a running request is preempted (its blocks freed, its
   progress reset to recompute) until the request fits or is itself the victim: under ``fcfs``
   the newest running request; under ``priority`` the one of lowest rank — the largest
   ``(priority, arrival_time)`` — and if it was already scheduled this step, it leaves the step
   and gives its tokens back to the budget.
2. Then, unless something was preempted, WAITING requests in queue order while there is budget
   and fewer than ``max_num_seqs`` are running: each first takes its longest cached prefix
   (prefix caching), then as much of the rest of its prompt as the budget allows (chunked
   prefill). The queue is FCFS, or under ``priority`` ordered by ``(priority, arrival_time)``
   (:mod:`.queues`). A waiting request that finds no KV blocks ends the step's admissions: it
   waits, and preempts nobody — however high its priority (vLLM preempts only to grow a
   running request).

Limits are read at every step, so a change applies at the next one; lowering ``max_num_seqs``
below the number running preempts nothing, it only stops admission until enough finish.

With async scheduling (vLLM's default) the next step is scheduled while the current one runs,
so a request that arrives during a step is admitted one step later than a synchronous
scheduler would; the one exception is an engine that would otherwise have nothing to run. Under
``priority`` such a request is passed over, not waited for: it is not in vLLM's queue yet, and
those that are behind it in rank may be admitted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

from governor.inference.engines.base import BatchingLimits, FinishReason
from governor.inference.engines.settings import SchedulingPolicy
from governor.inference.engines.sim.kv import KVCache
from governor.inference.engines.sim.queues import waiting_queue
from governor.inference.engines.sim.request import SimRequest, Status
from governor.inference.engines.sim.roofline import StepShape

_WAITING, _RUNNING, _FINISHED = Status.WAITING, Status.RUNNING, Status.FINISHED


@dataclass(slots=True)
class Counters:
    """Engine-lifetime totals, named after the vLLM counters they feed."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    prefix_cache_queries: int = 0  # tokens looked up by new requests
    prefix_cache_hits: int = 0  # of which found in the cache
    steps: int = 0
    finished: dict[FinishReason, int] = field(
        default_factory=lambda: dict.fromkeys(FinishReason, 0)
    )


class StepObserver(Protocol):
    """Receives what vLLM's stat loggers observe, at the moments vLLM observes it."""

    def on_first_token(self, request: SimRequest) -> None: ...

    def on_inter_token(self, seconds: float) -> None: ...

    def on_finished(self, request: SimRequest) -> None: ...

    def on_step(self, iteration_tokens: int) -> None: ...


class StepPlan:
    """The requests one step computes, how many tokens each, and the step's shape."""

    __slots__ = ("num_preempted", "requests", "shape", "start", "tokens")

    def __init__(self, start: float) -> None:
        self.start = start
        self.requests: list[SimRequest] = []
        self.tokens: list[int] = []
        self.shape = StepShape()
        self.num_preempted = 0

    @property
    def empty(self) -> bool:
        return not self.requests


def _rank(request: SimRequest) -> tuple[int, float, int]:
    return request.rank


def _shape_of(plan: StepPlan) -> StepShape:
    """The shape of the step's requests as scheduled (they have not advanced yet)."""
    shape = StepShape()
    for req, n in zip(plan.requests, plan.tokens, strict=True):
        start = req.num_computed
        need = req.num_prompt_tokens + req.num_outputs - start
        if need == 1:
            shape.add_decode(start)
        else:
            shape.add_prefill(start, n, samples=n == need)
    return shape


class Scheduler:
    def __init__(
        self,
        kv: KVCache,
        limits: BatchingLimits,
        *,
        async_scheduling: bool = True,
        observer: StepObserver | None = None,
        policy: SchedulingPolicy = "fcfs",
    ) -> None:
        self.kv = kv
        self.limits = limits
        self.async_scheduling = async_scheduling
        self.observer = observer
        self.policy = policy
        self.waiting = waiting_queue(policy)
        self.running: list[SimRequest] = []
        self._added = 0  # requests that ever reached the queue: the last key of their rank
        self.counters = Counters()
        self._prev_start = -math.inf
        self._prev_end = -math.inf

    @property
    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def add(self, request: SimRequest, now: float) -> None:
        """Queue a request; it is schedulable from ``now``."""
        request.queued_time = now
        request.status = _WAITING
        request.rank = (request.priority, request.arrival_time, self._added)
        self._added += 1
        self.waiting.add(request)

    def schedule(self, now: float) -> StepPlan:
        plan = StepPlan(now)
        budget = self.limits.max_num_batched_tokens
        budget = self._schedule_running(plan, budget)
        if plan.num_preempted == 0 and self.waiting:
            # An engine with nothing else to run schedules at once, whatever arrived when.
            pipelined = self.async_scheduling and not plan.empty
            self._schedule_waiting(plan, budget, now, pipelined=pipelined)
        return plan

    def _schedule_running(self, plan: StepPlan, budget: int) -> int:
        kv, running = self.kv, self.running
        block_size = kv.block_size
        requests, tokens = plan.requests, plan.tokens
        decodes = decode_context = 0
        shape = plan.shape
        by_rank = self.policy == "priority"
        reshape = False  # a request left the step after it was scheduled
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            start = req.num_computed
            need = req.num_prompt_tokens + req.num_outputs - start
            n = need if need < budget else budget
            if len(req.blocks) * block_size < start + n:
                while not kv.allocate(req.blocks, start + n):
                    if by_rank:
                        victim = max(running, key=_rank)
                        index = running.index(victim)
                        del running[index]
                        if index < i:  # scheduled already: out of the step, tokens back
                            i -= 1
                            budget += self._unschedule(plan, victim)
                            reshape = True
                    else:
                        victim = running.pop()
                    self._preempt(victim)
                    plan.num_preempted += 1
                    if victim is req:
                        break
                if req.status is not _RUNNING:
                    break
            requests.append(req)
            tokens.append(n)
            budget -= n
            if need == 1:
                decodes += 1
                decode_context += start
            else:
                shape.add_prefill(start, n, samples=n == need)
                self._register_prompt_blocks(req, start + n)
            i += 1
        if reshape:
            plan.shape = _shape_of(plan)
            return budget
        shape.num_seqs += decodes
        shape.decode_tokens += decodes
        shape.sampled_tokens += decodes
        shape.decode_context_tokens += decode_context
        return budget

    @staticmethod
    def _unschedule(plan: StepPlan, req: SimRequest) -> int:
        """Take ``req`` out of the step's plan; returns the tokens it had been given."""
        index = plan.requests.index(req)
        del plan.requests[index]
        return plan.tokens.pop(index)

    def _schedule_waiting(
        self, plan: StepPlan, budget: int, now: float, *, pipelined: bool
    ) -> None:
        kv, waiting, running = self.kv, self.waiting, self.running
        counters = self.counters
        max_seqs = self.limits.max_num_seqs
        prev_start, prev_end = self._prev_start, self._prev_end
        passed_over: list[SimRequest] = []
        while budget > 0 and waiting and len(running) < max_seqs:
            req = waiting.peek()
            if pipelined and prev_start < req.queued_time <= prev_end:
                # Arrived while the step now ending was running: not in vLLM's queue yet. In
                # arrival order everything behind it arrived later still.
                if self.policy != "priority":
                    break
                passed_over.append(waiting.pop_first())
                continue
            hit: list[int] = []  # waiting requests hold no blocks: fresh, or preempted
            if req.block_hashes and kv.enable_prefix_caching:
                # The last token is always recomputed, to sample from its logits.
                max_blocks = (req.num_tokens - 1) // kv.block_size
                hit = kv.longest_cached_prefix(req.block_hashes, max_blocks)
            cached = len(hit) * kv.block_size
            need = req.num_tokens - cached
            n = need if need < budget else budget
            if not kv.allocate(req.blocks, cached + n, hit):
                break
            waiting.pop_first()
            if req.num_preemptions == 0 and kv.enable_prefix_caching:
                counters.prefix_cache_queries += req.num_tokens
                counters.prefix_cache_hits += cached
                req.num_cached_tokens = cached
            req.num_computed = cached
            req.status = _RUNNING
            if math.isnan(req.scheduled_time):
                req.scheduled_time = now
            running.append(req)
            plan.requests.append(req)
            plan.tokens.append(n)
            budget -= n
            if need == 1:
                plan.shape.add_decode(cached)
            else:
                plan.shape.add_prefill(cached, n, samples=n == need)
                self._register_prompt_blocks(req, cached + n)
        for req in passed_over:
            waiting.add(req)

    def _register_prompt_blocks(self, req: SimRequest, computed: int) -> None:
        hashes = req.block_hashes
        if not hashes:
            return
        block_size = self.kv.block_size
        first = req.num_computed // block_size
        last = min(computed // block_size, len(hashes))
        for index in range(first, last):
            self.kv.register(req.blocks[index], hashes[index])

    def _preempt(self, req: SimRequest) -> None:
        self.kv.free(req.blocks)
        req.num_computed = 0
        req.status = _WAITING
        req.num_preemptions += 1
        self.counters.preemptions += 1
        self.waiting.prepend(req)

    def complete(self, plan: StepPlan, end: float) -> list[SimRequest]:
        """Apply a step that ended at ``end``: advance requests, emit tokens, finish requests.

        Returns the requests that got an output token in this step, in the step's order (the
        engine core's output message); those that finished are marked so. Requests aborted
        while the step ran are left alone.
        """
        counters, observer = self.counters, self.observer
        emitted: list[SimRequest] = []
        any_finished = False
        prefilled = 0
        for req, n in zip(plan.requests, plan.tokens, strict=True):
            if req.status is not _RUNNING:
                continue
            computed = req.num_computed + n
            req.num_computed = computed
            if computed != req.num_prompt_tokens + req.num_outputs:
                continue  # a prefill chunk that did not reach the end of the prompt
            req.num_outputs += 1
            emitted.append(req)
            if req.num_outputs == 1 and math.isnan(req.first_token_time):
                req.first_token_time = end
                counters.prompt_tokens += req.num_prompt_tokens
                prefilled += req.num_prompt_tokens - req.num_cached_tokens
                if observer is not None:
                    observer.on_first_token(req)
            elif observer is not None:
                observer.on_inter_token(end - req.last_token_time)
            req.last_token_time = end
            if req.num_outputs >= req.num_outputs_target:
                self._finish(req, end)
                any_finished = True
        counters.generation_tokens += len(emitted)
        counters.steps += 1
        if any_finished:
            self.running = [r for r in self.running if r.status is _RUNNING]
        self._prev_start, self._prev_end = plan.start, end
        if observer is not None:
            observer.on_step(prefilled + len(emitted))
            if any_finished:
                for req in emitted:
                    if req.status is _FINISHED:
                        observer.on_finished(req)
        return emitted

    def _finish(self, req: SimRequest, end: float) -> None:
        req.status = _FINISHED
        req.finish_time = end
        self.kv.free(req.blocks)
        self.counters.finished[req.finish_reason] += 1

    def abort(self, req: SimRequest, now: float) -> bool:
        """Drop a request at once and free its KV blocks; False if it had already finished."""
        if req.status is _FINISHED:
            return False
        if req.status is _RUNNING:
            self.running.remove(req)
        else:
            self.waiting.remove(req)
        self.kv.free(req.blocks)
        req.status = _FINISHED
        req.finish_reason = FinishReason.ABORT
        req.finish_time = now
        return True
