"""Step time of one engine iteration, from a roofline of the model on the GPU.

An iteration runs the whole batch through the model once. Its time is the sum of what cannot
overlap on a GPU:

* ``step_overhead`` - the fixed host cost of an iteration (scheduling, input preparation,
  CUDA-graph replay, sampling set-up);
* ``mixed_step_overhead`` - paid by a step that carries any prefill chunk: only uniform decode
  batches replay vLLM's full CUDA graph; a mixed batch runs attention outside the graph
  (piecewise mode) and builds variable-length attention metadata;
* ``per_sequence * sequences`` - host and sampler cost per scheduled request (block tables,
  logits processing, output bookkeeping); with the KV read it makes a decode step grow with the
  batch while the GEMMs are still bound by the weight read;
* the dense layers (GEMMs): every weight is streamed from HBM once per iteration and every
  scheduled token multiplies through it, so they cost the weight read ``W / (eta * BW)`` or the
  compute ``tokens * FLOPs per token / (MFU * peak)``, whichever dominates. The two are joined by
  a p-norm (``roofline_sharpness``): near the ridge (about 200 tokens per step on an H200)
  neither bound is reached alone and a step costs more than the larger of the two;
* attention, separate kernels that do not overlap the GEMMs: decodes read their whole context's
  KV cache (``context tokens * KV bytes per token / (eta * BW)``), and prefill chunks compute a
  score per (query, key) pair (``pairs * FLOPs per pair / (attention efficiency * peak)``),
  which is the term quadratic in the prompt length; a chunk also re-reads its prefix's KV.

Everything here is pure arithmetic on a :class:`StepShape`; the scheduler builds the shape.
:meth:`Roofline.parts` splits the same step into what the host and the GPU spend, for the
simulated GPU (:mod:`.device`) to charge and for faults to stretch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from governor.inference.engines.sim.presets import Preset


@dataclass(slots=True)
class StepShape:
    """What one iteration computes, accumulated by the scheduler as it schedules requests."""

    num_seqs: int = 0
    decode_tokens: int = 0
    # Tokens of KV cache the decodes read (their whole context).
    decode_context_tokens: int = 0
    prefill_tokens: int = 0
    # Tokens of already-computed prefix that the prefill chunks attend to (read from the cache).
    prefill_context_tokens: int = 0
    # (query, key) pairs the prefill chunks score: causal within the chunk plus the prefix.
    attention_pairs: int = 0
    # Requests that sample a token at the end of this step (decodes and completing prefills).
    sampled_tokens: int = 0
    # Prompts whose first chunk this step computes (new requests, or preempted ones again).
    new_prompts: int = 0

    def add_decode(self, context_tokens: int) -> None:
        self.num_seqs += 1
        self.decode_tokens += 1
        self.decode_context_tokens += context_tokens
        self.sampled_tokens += 1

    def add_prefill(self, start: int, tokens: int, samples: bool) -> None:
        self.num_seqs += 1
        self.prefill_tokens += tokens
        self.prefill_context_tokens += start
        self.attention_pairs += tokens * start + tokens * (tokens + 1) // 2
        if start == 0:
            self.new_prompts += 1
        if samples:
            self.sampled_tokens += 1

    @property
    def scheduled_tokens(self) -> int:
        return self.decode_tokens + self.prefill_tokens


@dataclass(frozen=True, slots=True)
class StepParts:
    """One step's time by where it is spent: ``host + gpu`` is :meth:`Roofline.step_seconds`
    (up to rounding). ``compute`` and ``memory`` are shares of ``gpu`` that overlap."""

    host: float  # fixed, mixed-batch and per-sequence overheads: no kernel runs
    gpu: float  # the kernels: the dense layers (the roofline's p-norm) and attention
    compute: float  # the tensor pipes: GEMM FLOPs at the MFU, prefill attention at its efficiency
    memory: float  # DRAM streaming at η·BW: the weight read and the KV reads


NO_PARTS = StepParts(0.0, 0.0, 0.0, 0.0)


@dataclass(frozen=True, slots=True)
class Roofline:
    """The preset's constants, folded into seconds per unit of work once."""

    step_overhead: float
    per_sequence: float
    mixed_step_overhead: float
    sharpness: float
    weight_read: float
    per_linear_token: float
    per_sampled_token: float
    per_kv_token: float
    per_attention_pair: float

    @classmethod
    def of(cls, preset: Preset) -> Roofline:
        model, gpu, eff = preset.model, preset.hardware, preset.efficiency
        bandwidth = eff.bandwidth_efficiency * gpu.hbm_bandwidth_bytes_per_second
        gemm_flops = eff.mfu * gpu.peak_flops
        attention_flops = eff.attention_efficiency * gpu.peak_flops
        return cls(
            step_overhead=eff.step_overhead_seconds,
            per_sequence=eff.per_sequence_seconds,
            mixed_step_overhead=eff.mixed_step_overhead_seconds,
            sharpness=eff.roofline_sharpness,
            weight_read=model.weight_bytes / bandwidth,
            per_linear_token=model.linear_flops_per_token / gemm_flops,
            per_sampled_token=model.lm_head_flops_per_token / gemm_flops,
            per_kv_token=model.kv_bytes_per_token / bandwidth,
            per_attention_pair=model.attention_flops_per_pair / attention_flops,
        )

    def step_seconds(self, shape: StepShape) -> float:
        """Duration of one iteration of ``shape`` (0 for an empty step)."""
        if shape.num_seqs == 0:
            return 0.0
        gemm_compute = (
            shape.scheduled_tokens * self.per_linear_token
            + shape.sampled_tokens * self.per_sampled_token
        )
        attention = (
            shape.decode_context_tokens + shape.prefill_context_tokens
        ) * self.per_kv_token + shape.attention_pairs * self.per_attention_pair
        return (
            self.step_overhead
            + (self.mixed_step_overhead if shape.prefill_tokens else 0.0)
            + shape.num_seqs * self.per_sequence
            + self.gemm_seconds(gemm_compute)
            + attention
        )

    def parts(self, shape: StepShape) -> StepParts:
        """The terms of :meth:`step_seconds`, grouped by where the time goes."""
        if shape.num_seqs == 0:
            return NO_PARTS
        gemm_compute = (
            shape.scheduled_tokens * self.per_linear_token
            + shape.sampled_tokens * self.per_sampled_token
        )
        kv_read = (shape.decode_context_tokens + shape.prefill_context_tokens) * self.per_kv_token
        attention_compute = shape.attention_pairs * self.per_attention_pair
        host = (
            self.step_overhead
            + (self.mixed_step_overhead if shape.prefill_tokens else 0.0)
            + shape.num_seqs * self.per_sequence
        )
        return StepParts(
            host=host,
            gpu=self.gemm_seconds(gemm_compute) + kv_read + attention_compute,
            compute=gemm_compute + attention_compute,
            memory=self.weight_read + kv_read,
        )

    def gemm_seconds(self, compute_seconds: float) -> float:
        """The dense layers: weight read and compute, joined by the roofline's p-norm."""
        p = self.sharpness
        memory = self.weight_read
        if math.isinf(p):
            return max(memory, compute_seconds)
        high, low = max(memory, compute_seconds), min(memory, compute_seconds)
        return float(high * (1.0 + (low / high) ** p) ** (1.0 / p))

    def decode_step_seconds(self, batch: int, context_tokens: int) -> float:
        """A decode-only step of ``batch`` requests with ``context_tokens`` of context each."""
        shape = StepShape()
        for _ in range(batch):
            shape.add_decode(context_tokens)
        return self.step_seconds(shape)

    def prefill_step_seconds(self, prompt_tokens: int) -> float:
        """A step that prefills one whole prompt alone."""
        shape = StepShape()
        shape.add_prefill(0, prompt_tokens, samples=True)
        return self.step_seconds(shape)
