"""A request's state inside the simulated engine (mutable, owned by the scheduler)."""

from __future__ import annotations

import enum
import math

from governor.inference.engines.base import FinishReason


class Status(enum.IntEnum):
    WAITING = 0
    RUNNING = 1
    FINISHED = 2


class SimRequest:
    """One request: its sizes, its progress, its KV blocks and its timestamps.

    The scheduler treats the request's tokens as prompt followed by outputs: each step computes
    some of the tokens not computed yet, and a step that computes the last known token samples
    the next output. A preempted request drops its KV and recomputes prompt and outputs so far.
    ``num_outputs_target`` and ``finish_reason`` are decided before the request starts (the
    simulated model knows where its text ends), so the scheduler never runs a wasted step.

    The ``*_time`` fields are the engine core's; in virtual time the frontend model
    (:mod:`.frontend`) adds what the caller sees: ``num_delivered`` outputs so far, the
    first and last delivery, and ``token_times``, one entry per output *event* (outputs that
    reached the caller together are one event, as in vLLM's ``RequestOutputCollector``).
    """

    __slots__ = (
        "arrival_time",
        "block_hashes",
        "blocks",
        "delivery_seq",
        "finish_reason",
        "finish_time",
        "first_delivery_time",
        "first_token_time",
        "last_delivery_time",
        "last_token_time",
        "num_cached_tokens",
        "num_computed",
        "num_delivered",
        "num_outputs",
        "num_outputs_target",
        "num_preemptions",
        "num_prompt_tokens",
        "priority",
        "queued_time",
        "rank",
        "request_id",
        "scheduled_time",
        "sink",
        "status",
        "token_times",
    )

    def __init__(
        self,
        request_id: str,
        *,
        arrival_time: float,
        num_prompt_tokens: int,
        num_outputs_target: int,
        finish_reason: FinishReason,
        block_hashes: list[int] | None = None,
        record_token_times: bool = False,
        sink: object = None,
        priority: int = 0,
    ) -> None:
        self.request_id = request_id
        # vLLM's request priority (lower is scheduled first under the priority policy), and the
        # rank the scheduler orders by: (priority, arrival, order of first reaching it).
        self.priority = priority
        self.rank = (priority, arrival_time, 0)
        self.arrival_time = arrival_time
        self.num_prompt_tokens = num_prompt_tokens
        self.num_outputs_target = num_outputs_target
        self.finish_reason = finish_reason
        self.block_hashes: list[int] = block_hashes or []
        self.blocks: list[int] = []
        self.status = Status.WAITING
        self.num_computed = 0
        self.num_outputs = 0
        self.num_preemptions = 0
        self.num_cached_tokens = 0
        self.queued_time = math.nan
        self.scheduled_time = math.nan
        self.first_token_time = math.nan
        self.last_token_time = math.nan
        self.finish_time = math.nan
        # What the caller sees (virtual time's frontend model).
        self.num_delivered = 0
        self.delivery_seq = -1  # the frontend job that last delivered to this request
        self.first_delivery_time = math.nan
        self.last_delivery_time = math.nan
        self.token_times: list[float] | None = [] if record_token_times else None
        # Whoever delivers this request's tokens (the real-time engine's stream).
        self.sink = sink

    @property
    def num_tokens(self) -> int:
        return self.num_prompt_tokens + self.num_outputs

    @property
    def finished(self) -> bool:
        return self.status is Status.FINISHED

    @property
    def delivered(self) -> bool:
        """Finished, and every output has reached the caller."""
        return self.status is Status.FINISHED and self.num_delivered == self.num_outputs

    def __repr__(self) -> str:
        return (
            f"SimRequest({self.request_id!r}, {self.status.name}, prompt={self.num_prompt_tokens},"
            f" computed={self.num_computed}, outputs={self.num_outputs}/{self.num_outputs_target})"
        )
