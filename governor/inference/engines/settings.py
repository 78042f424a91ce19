"""Engine settings, validated once where they enter (CLI, environment)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from governor.contracts.batching import DEFAULT_FLOOR

# vLLM's scheduling policies: first come first served, or by request priority (lower first).
SchedulingPolicy = Literal["fcfs", "priority"]
SCHEDULING_POLICIES: tuple[SchedulingPolicy, ...] = ("fcfs", "priority")


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """What ``governor serve`` passes to the engine factory.

    ``max_num_seqs``/``max_num_batched_tokens`` are the start-up values, which are also the
    ceiling of live retuning; ``None`` takes the engine's (or the sim preset's) default.
    """

    kind: str = "sim"  # an installed engine's name (governor.inference.engines.registry)
    # vllm: the model directory or name; sim: unused (the preset defines the model).
    model: str | None = None
    # The name clients use in ``"model"``; defaults to the model (vllm) or the preset (sim).
    served_model_name: str | None = None
    preset: str = "llama-3-8b@h200"
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    min_num_seqs: int = DEFAULT_FLOOR.max_num_seqs
    min_num_batched_tokens: int = DEFAULT_FLOOR.max_num_batched_tokens
    max_model_len: int | None = None
    seed: int = 0
    # sim: wall seconds per simulated second (1.0 real time; 0 makes every step free).
    time_scale: float = 1.0
    # vllm: more AsyncEngineArgs as ``key=value`` (e.g. ``gpu_memory_utilization=0.85``).
    extra_args: tuple[str, ...] = field(default_factory=tuple)
    # vllm: where vLLM's own ``llm_request`` spans go (the service's collector).
    otlp_traces_endpoint: str | None = None
    # "priority" when slo.yaml declares request classes: the engine then orders its waiting
    # requests by (priority, arrival), as vLLM's scheduling_policy="priority" does.
    scheduling_policy: SchedulingPolicy = "fcfs"
    # sim: the UUID of the simulated GPU the engine runs on; None: the first fake GPU of
    # ``governor exporter --fake-gpus`` (governor.contracts.simdevice.fake_gpu_uuid(0)).
    gpu_uuid: str | None = None
