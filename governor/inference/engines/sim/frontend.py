"""vLLM's frontend process in virtual time: one asyncio loop serving prompts and outputs in turn.

vLLM's ``AsyncLLM`` (docs/vllm.md) runs in the caller's process on a single event
loop, while the engine core steps the GPU in another process. That one loop does two kinds of
work, one job at a time, in the order it becomes ready:

* **a prompt's input processing** when a request arrives: tokenization and the rest of
  ``process_inputs`` run synchronously inside ``generate()``, so a long prompt blocks the loop
  for a time that grows with its length; only then is the request sent to the engine core;
* **an engine step's outputs** when the step ends: the output handler receives the step's
  message, turns every request's new token into a ``RequestOutput`` (detokenization, stats) and
  hands it to the request's collector; the consumers (the callers of ``generate()``) run after
  the handler yields.

The output handler drains every step message already waiting before it yields, so when the loop
has fallen behind (a long tokenization, a busy stretch) the outputs of several steps reach a
consumer together, merged into one event by ``RequestOutputCollector``. :class:`Frontend` is
that loop as a FIFO single server: a tokenization job occupies it from the prompt's arrival; a
step's outputs join the output job still waiting at the back of the queue, if there is one, or
start a new job. A job's outputs are delivered when it ends, and what a caller times (TTFT,
inter-token latency) is the time between deliveries, not between GPU steps.

Everything is deterministic arithmetic: a job's start is fixed once it reaches the queue, its
end once nothing can merge into it any more (when it starts).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

from governor.inference.engines.sim.presets import FrontendCosts
from governor.inference.engines.sim.request import SimRequest

# Called with the time a job's outputs reach their consumers and the requests they belong to,
# one entry per output (a request appears once per step the job merged).
Deliver = Callable[[float, list[SimRequest]], None]


class _OutputJob:
    __slots__ = ("end", "outputs", "start")

    def __init__(self, start: float, end: float, outputs: list[SimRequest]) -> None:
        self.start = start
        self.end = end
        self.outputs = outputs


class Frontend:
    """The ``AsyncLLM`` event loop of one engine, as a FIFO single server in virtual time.

    Feed it in time order (:meth:`tokenize` at arrivals, :meth:`outputs` at step ends) and
    call :meth:`deliver_next` when the simulation's clock reaches :attr:`next_start`; it calls
    ``deliver`` once per output job, in time order.
    """

    def __init__(self, costs: FrontendCosts, deliver: Deliver) -> None:
        self.costs = costs
        self._deliver = deliver
        self._free_at = -math.inf  # when the last queued job ends
        self._pending: deque[_OutputJob] = deque()  # output jobs not yet delivered
        self._open: _OutputJob | None = None  # the queue's last job, while outputs may join it
        self._last_fed = -math.inf

    @property
    def next_start(self) -> float:
        """When the oldest undelivered output job starts (∞ if none): deliver it then."""
        return self._pending[0].start if self._pending else math.inf

    @property
    def busy_until(self) -> float:
        """When the loop has done everything queued so far."""
        return self._free_at

    def tokenize(self, at: float, num_prompt_tokens: int) -> float:
        """Queue the input processing of a prompt that arrives at ``at``.

        Returns when the engine core has the request (its processing done, plus the hop).
        """
        self._check_order(at)
        costs = self.costs
        start = at if at > self._free_at else self._free_at
        cost = costs.tokenize_seconds + costs.tokenize_per_token_seconds * num_prompt_tokens
        self._free_at = start + cost
        self._open = None  # outputs that come later queue behind this prompt
        return self._free_at + costs.ipc_seconds

    def outputs(self, step_end: float, requests: list[SimRequest]) -> None:
        """Queue the outputs of a step that ended at ``step_end`` (one per request in it)."""
        if not requests:
            return
        # The message's hop back is folded into ``output_batch_seconds`` (receiving it), so
        # a step's outputs queue at the step's end, in order with the prompts arriving.
        at = step_end
        self._check_order(at)
        cost = self.costs.output_batch_seconds + self.costs.per_output_seconds * len(requests)
        job = self._open
        if job is not None and job.start > at:
            # The loop is still busy: the handler will drain this message with the waiting one.
            job.outputs.extend(requests)
            job.end += cost
            self._free_at = job.end
            return
        start = at if at > self._free_at else self._free_at
        job = _OutputJob(start, start + cost, list(requests))
        self._free_at = job.end
        self._pending.append(job)
        self._open = job

    def deliver_next(self) -> None:
        """Deliver the oldest undelivered output job (it has started: nothing joins it now)."""
        job = self._pending.popleft()
        if job is self._open:
            self._open = None
        self._deliver(job.end, job.outputs)

    def _check_order(self, at: float) -> None:
        if at < self._last_fed:
            raise ValueError(f"frontend fed out of order: {at} after {self._last_fed}")
        self._last_fed = at
