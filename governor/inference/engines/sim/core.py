"""What both time modes share: a preset's KV cache, scheduler and step clock, and request set-up.

The virtual-clock driver (:mod:`.virtual`) and the real-time engine (:mod:`.engine`) differ only
in how they let time pass between ``schedule`` and ``complete``; everything that decides what a
step computes and how long it takes lives here, so both modes give the same steps for the same
arrivals.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from governor.contracts.simdevice import fake_gpu_uuid
from governor.inference.engines.base import BatchingLimits, FinishReason
from governor.inference.engines.settings import SchedulingPolicy
from governor.inference.engines.sim.device import SimDevice
from governor.inference.engines.sim.kv import KVCache, prompt_block_hashes
from governor.inference.engines.sim.presets import Preset
from governor.inference.engines.sim.request import SimRequest
from governor.inference.engines.sim.roofline import Roofline
from governor.inference.engines.sim.scheduler import Scheduler, StepObserver, StepPlan


class RequestTooLarge(ValueError):
    """A request the engine can never serve: longer than the model or the whole KV cache."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class EngineCore:
    def __init__(
        self,
        preset: Preset,
        *,
        limits: BatchingLimits | None = None,
        seed: int = 0,
        observer: StepObserver | None = None,
        policy: SchedulingPolicy = "fcfs",
        gpu_uuid: str | None = None,
        time_scale: float = 1.0,
    ) -> None:
        """``gpu_uuid`` names the simulated GPU (the exporter's first fake GPU by default);
        ``time_scale`` turns its counters into wall seconds."""
        self.preset = preset
        self.kv = KVCache(
            preset.num_kv_blocks,
            preset.block_size,
            enable_prefix_caching=preset.enable_prefix_caching,
        )
        self.scheduler = Scheduler(
            self.kv,
            limits or BatchingLimits(preset.max_num_seqs, preset.max_num_batched_tokens),
            async_scheduling=preset.async_scheduling,
            observer=observer,
            policy=policy,
        )
        self.roofline = Roofline.of(preset)
        self.device = SimDevice(preset, gpu_uuid or fake_gpu_uuid(0), time_scale=time_scale)
        self._rng = random.Random(seed)
        self._jitter_rate = (
            1.0 / preset.efficiency.jitter_mean_seconds
            if preset.efficiency.jitter_mean_seconds > 0
            else 0.0
        )

    @property
    def limits(self) -> BatchingLimits:
        return self.scheduler.limits

    @limits.setter
    def limits(self, limits: BatchingLimits) -> None:
        self.scheduler.limits = limits

    def step_seconds(self, plan: StepPlan, *, idle: bool = False) -> float:
        """How long ``plan`` takes on the simulated GPU, host jitter included; ``idle``: the
        step starts an engine that had nothing in flight (see ``Efficiency.idle_start_seconds``).
        The step is charged to :attr:`device`, whose faults may slow it.
        """
        shape, roofline = plan.shape, self.roofline
        seconds = self.device.step(roofline.parts(shape), roofline.step_seconds(shape),
                                   shape.scheduled_tokens)
        if idle:
            seconds += self.preset.efficiency.idle_start_seconds
        if self._jitter_rate:
            seconds += self._rng.expovariate(self._jitter_rate)
        return seconds

    def hold_seconds(self, plan: StepPlan) -> float:
        """How long after its end the previous step's outputs wait for ``plan``'s preparation
        (see ``Efficiency.new_request_hold_seconds``)."""
        shape, eff = plan.shape, self.preset.efficiency
        if shape.new_prompts == 0:
            return 0.0
        if shape.scheduled_tokens > eff.cudagraph_max_tokens:
            hold = eff.new_request_hold_large_seconds
        else:
            hold = eff.new_request_hold_seconds
        if hold and eff.new_request_hold_spread:
            hold *= 1.0 + eff.new_request_hold_spread * (2.0 * self._rng.random() - 1.0)
        return hold

    def check_fits(self, num_prompt_tokens: int, max_tokens: int) -> None:
        """Raise :class:`RequestTooLarge` for a request this preset can never run."""
        preset = self.preset
        if num_prompt_tokens < 1:
            raise RequestTooLarge("the prompt is empty", param="prompt")
        if max_tokens < 1:
            raise RequestTooLarge(
                f"max_tokens must be at least 1, got {max_tokens}", param="max_tokens"
            )
        total = num_prompt_tokens + max_tokens
        if total > preset.max_model_len:
            raise RequestTooLarge(
                f"prompt ({num_prompt_tokens} tokens) plus max_tokens ({max_tokens}) is "
                f"{total} tokens, more than the model's context length {preset.max_model_len}",
                param="max_tokens",
            )
        if self.kv.blocks_for(total) > preset.num_kv_blocks:
            raise RequestTooLarge(
                f"{total} tokens need more KV cache than the engine has "
                f"({preset.kv_capacity_tokens} tokens)",
                param="max_tokens",
            )

    def new_request(
        self,
        request_id: str,
        *,
        arrival_time: float,
        prompt: int | Sequence[int],
        num_outputs: int,
        finish_reason: FinishReason,
        record_token_times: bool = False,
        sink: object = None,
        priority: int = 0,
    ) -> SimRequest:
        """A request for ``prompt`` (token ids, or a count of tokens nobody shares); ``priority``
        is vLLM's (lower first), honoured under the priority policy."""
        if isinstance(prompt, int):
            num_prompt, hashes = prompt, None
        else:
            num_prompt = len(prompt)
            hashes = (
                prompt_block_hashes(prompt, self.preset.block_size)
                if self.preset.enable_prefix_caching
                else None
            )
        self.check_fits(num_prompt, num_outputs)
        return SimRequest(
            request_id,
            arrival_time=arrival_time,
            num_prompt_tokens=num_prompt,
            num_outputs_target=num_outputs,
            finish_reason=finish_reason,
            block_hashes=hashes,
            record_token_times=record_token_times,
            sink=sink,
            priority=priority,
        )
