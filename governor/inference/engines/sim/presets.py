"""Model + hardware presets of the simulated engine, and where each constant comes from.

A preset fixes what a vLLM deployment fixes at start-up: the model's shape, the GPU, the KV
cache capacity, vLLM's default batching limits for that GPU class, and the efficiencies that
turn the roofline into measured step times (see :mod:`governor.inference.engines.sim.roofline`).

* ``llama-3-8b@h200`` — calibrated against real vLLM 0.25 on an H200 (docs/h200-measurements.md):
  Llama-3-8B shape, BF16, ``gpu_memory_utilization`` 0.85 → 840,016 KV tokens, as measured.
* ``llama-3-8b@h100`` — the same model and efficiencies on an H100 SXM 80 GB (3.35 TB/s,
  989 TFLOPS dense BF16): Hopper has the same SMs and kernels, so only the bandwidth and the
  memory change; KV capacity follows from vLLM's default utilisation 0.9.
* ``tiny`` — a small fast model for tests: millisecond steps, 4096 KV tokens, small limits.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

BLOCK_SIZE = 16  # vLLM's default KV block size on CUDA, in tokens


@dataclass(frozen=True, slots=True)
class ModelShape:
    """A dense decoder-only transformer, enough of it to count bytes and FLOPs."""

    name: str
    num_params: float
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    bytes_per_param: int = 2  # BF16

    @property
    def weight_bytes(self) -> float:
        return self.num_params * self.bytes_per_param

    @property
    def kv_bytes_per_token(self) -> int:
        # K and V, per layer, per KV head.
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.bytes_per_param

    @property
    def lm_head_flops_per_token(self) -> float:
        """The output projection runs only for the positions that sample a token."""
        return 2.0 * self.vocab_size * self.hidden_size

    @property
    def linear_flops_per_token(self) -> float:
        """Dense-layer FLOPs of one token, without the embedding lookup and the LM head."""
        return 2.0 * (self.num_params - 2 * self.vocab_size * self.hidden_size)

    @property
    def attention_flops_per_pair(self) -> float:
        """QKᵀ and PV for one (query, key) pair over all layers and query heads."""
        return 4.0 * self.num_layers * self.num_attention_heads * self.head_dim


@dataclass(frozen=True, slots=True)
class Hardware:
    name: str
    memory_bytes: float
    hbm_bandwidth_bytes_per_second: float
    peak_flops: float  # dense BF16


@dataclass(frozen=True, slots=True)
class Efficiency:
    """How far the real engine is from the ideal roofline, and its host-side costs."""

    bandwidth_efficiency: float  # η: achieved / peak HBM bandwidth
    mfu: float  # GEMM FLOPs achieved / peak
    attention_efficiency: float  # prefill attention FLOPs achieved / peak
    step_overhead_seconds: float
    per_sequence_seconds: float
    # A step that mixes prefill chunks with decodes cannot replay the full CUDA graph captured
    # for uniform decode batches: attention runs outside the graph (vLLM's piecewise mode).
    mixed_step_overhead_seconds: float
    # How sharply the GEMMs turn from memory- to compute-bound: the step pays the p-norm of
    # the two times (∞ is the ideal roofline's max, 1 their sum). Near the ridge neither bound
    # is reached alone, which is what makes small prefill chunks cost more than the max.
    roofline_sharpness: float
    # Host jitter added to every step: exponentially distributed with this mean.
    jitter_mean_seconds: float
    # Paid by a step that starts an idle engine: with async scheduling a busy engine prepares
    # the next step's inputs and launches its kernels while the GPU runs the current one, and
    # post-processes each step while the GPU runs the next; from idle, none of it overlaps.
    idle_start_seconds: float = 0.0
    # With async scheduling the engine core prepares and launches step k+1 before it hands out
    # step k's outputs. A step that admits a new prompt takes long to prepare, so step k's
    # outputs leave this long after step k ends (its GPU time is not delayed, only the
    # release; the next step cannot end before it): ``new_request_hold_seconds`` for a batch
    # of at most ``cudagraph_max_tokens`` (replayed from a captured CUDA graph),
    # ``new_request_hold_large_seconds`` above it, each scaled by a uniform factor in
    # ``1 ± new_request_hold_spread``. Measured on the H200 (lab/results/
    # budget_h200.md): the decode step before a 2000-token prompt's first chunk releases its
    # outputs 26-29 ms after it began (16-37 ms), a plain decode step after 7 ms.
    new_request_hold_seconds: float = 0.0
    new_request_hold_large_seconds: float = 0.0
    new_request_hold_spread: float = 0.0
    cudagraph_max_tokens: int = 512


@dataclass(frozen=True, slots=True)
class FrontendCosts:
    """CPU time of vLLM's frontend process (``AsyncLLM``: one asyncio loop), and its IPC hop.

    See :mod:`governor.inference.engines.sim.frontend` for how the loop serves these jobs.
    """

    # Input processing of one prompt, outside the tokenizer proper (request set-up, validation,
    # the output processor's per-request state).
    tokenize_seconds: float
    # Tokenization and the per-token work around it (token-id lists, validation, serialisation).
    tokenize_per_token_seconds: float
    # One engine step's outputs: the hop back, receiving and decoding the message, the
    # handler's own overhead.
    output_batch_seconds: float
    # One request's output in that step: detokenize, stats, hand it to its consumer, and the
    # consumer's turn on the loop.
    per_output_seconds: float
    # A request's hop to the engine-core process (ZMQ), after its input processing: latency,
    # not CPU.
    ipc_seconds: float


# A frontend that costs nothing: outputs reach their consumers when the step ends.
FREE_FRONTEND = FrontendCosts(0.0, 0.0, 0.0, 0.0, 0.0)


@dataclass(frozen=True, slots=True)
class Preset:
    name: str
    model: ModelShape
    hardware: Hardware
    efficiency: Efficiency
    frontend: FrontendCosts
    max_model_len: int
    num_kv_blocks: int
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int = BLOCK_SIZE
    enable_prefix_caching: bool = True
    # vLLM's async scheduling: the next step is scheduled while this one runs, so a request
    # that arrives during a step can join only the step after the next one.
    async_scheduling: bool = True

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_kv_blocks * self.block_size

    def with_overrides(
        self,
        *,
        max_model_len: int | None = None,
        max_num_seqs: int | None = None,
        max_num_batched_tokens: int | None = None,
        enable_prefix_caching: bool | None = None,
    ) -> Preset:
        """The preset with some start-up settings replaced (``None`` keeps the preset's)."""
        return replace(
            self,
            max_model_len=self.max_model_len if max_model_len is None else max_model_len,
            max_num_seqs=self.max_num_seqs if max_num_seqs is None else max_num_seqs,
            max_num_batched_tokens=(
                self.max_num_batched_tokens
                if max_num_batched_tokens is None
                else max_num_batched_tokens
            ),
            enable_prefix_caching=(
                self.enable_prefix_caching
                if enable_prefix_caching is None
                else enable_prefix_caching
            ),
        )


def kv_cache_blocks(
    hardware: Hardware,
    model: ModelShape,
    *,
    gpu_memory_utilization: float,
    reserved_bytes: float,
    block_size: int = BLOCK_SIZE,
) -> int:
    """KV blocks vLLM allocates: the memory budget, less weights and activations, in blocks."""
    free = gpu_memory_utilization * hardware.memory_bytes - model.weight_bytes - reserved_bytes
    return int(free // (model.kv_bytes_per_token * block_size))


# Llama-3-8B (its Hugging Face config.json): 32 layers, 32 query / 8 KV heads of 128, hidden 4096,
# vocabulary 128256, 8.03 B parameters → 16.06 GB of BF16 weights, 131,072 KV bytes per token.
LLAMA_3_8B = ModelShape(
    name="llama-3-8b",
    num_params=8.03e9,
    num_layers=32,
    hidden_size=4096,
    num_attention_heads=32,
    num_kv_heads=8,
    head_dim=128,
    vocab_size=128256,
)

# nvidia-smi reports 143,771 MiB on an H200 and 81,559 MiB on an H100 SXM 80 GB.
H200 = Hardware("h200", 143_771 * 2**20, 4.8e12, 989e12)
H100 = Hardware("h100", 81_559 * 2**20, 3.35e12, 989e12)

# vLLM keeps memory outside weights and KV for activations, CUDA graphs and the sampler. On the
# H200 run 0.85 x 143,771 MiB - 16.06 GB weights - 102.5 GiB KV leaves ≈ 2.0 GB.
ACTIVATION_RESERVE_BYTES = 2.0e9

# Fitted, jointly with the frontend below, to the H200 tables of docs/h200-measurements.md
# (``python -m lab.calibration.sim_fidelity`` prints the fit cell by cell). Physically: the weights
# stream at 74% of HBM bandwidth; GEMMs run at 75% of dense BF16 peak (cuBLAS reaches 75-80% on
# Hopper); attention at 28%, lower than FlashAttention-3's dense-kernel figures because a chunk also
# attends to its cached prefix through the paged KV cache (the 7000-token rows' chunks at 2048 need
# ~17 ms for that part of a 55 ms step); 0.3 ms and 11 µs per request of host time per step; 2.3 ms
# more for a step with prefill (vLLM's piecewise CUDA graphs); 2.7 ms more for a step that starts an
# idle engine, where nothing overlaps its set-up and post-processing.
HOPPER_VLLM_025 = Efficiency(
    bandwidth_efficiency=0.74,
    mfu=0.75,
    attention_efficiency=0.28,
    step_overhead_seconds=0.3e-3,
    per_sequence_seconds=11e-6,
    mixed_step_overhead_seconds=2.3e-3,
    roofline_sharpness=4.0,
    jitter_mean_seconds=0.15e-3,
    idle_start_seconds=2.7e-3,
    new_request_hold_large_seconds=18e-3,
    new_request_hold_spread=0.4,
)

# vLLM 0.25's AsyncLLM process (the H200 tables were timed in it). 0.25 tokenizes a raw prompt on
# the event loop (vLLM moved it to a thread pool after 0.25.0: vllm-project/vllm#49608). Measured
# here with vLLM 0.32's own code and a Llama-3 tokenizer on a CPU (``python -m
# lab.calibration.frontend_costs``): ``process_inputs`` ~0.1 ms + 0.70 µs per prompt token;
# ~14 µs per output for ``process_outputs`` and the consumer's turn, a few µs per step message.
# The per-token stall is fitted at 2.9 µs, 4x the tokenization alone: the measured rows need a
# 7000-token prompt to hold the loop ~21 ms (their P99 at 8192 sits on that stall), so the
# benchmark's own per-prompt work on the loop is assumed to make up the rest; a loop-lag probe in
# the measuring process would settle it.
VLLM_025_FRONTEND = FrontendCosts(
    tokenize_seconds=0.5e-3,
    tokenize_per_token_seconds=2.9e-6,
    output_batch_seconds=0.1e-3,
    per_output_seconds=15e-6,
    ipc_seconds=0.3e-3,
)

LLAMA_3_8B_H200 = Preset(
    name="llama-3-8b@h200",
    model=LLAMA_3_8B,
    hardware=H200,
    efficiency=HOPPER_VLLM_025,
    frontend=VLLM_025_FRONTEND,
    max_model_len=8192,
    # Measured: 102.5 GiB of KV cache = 840,016 tokens at gpu_memory_utilization 0.85.
    num_kv_blocks=840_016 // BLOCK_SIZE,
    # vLLM's API-server defaults for GPUs of ≥ 70 GiB other than A100 (docs/h200-measurements.md).
    max_num_seqs=1024,
    max_num_batched_tokens=8192,
)

LLAMA_3_8B_H100 = Preset(
    name="llama-3-8b@h100",
    model=LLAMA_3_8B,
    hardware=H100,
    efficiency=HOPPER_VLLM_025,
    frontend=VLLM_025_FRONTEND,
    max_model_len=8192,
    num_kv_blocks=kv_cache_blocks(
        H100, LLAMA_3_8B, gpu_memory_utilization=0.9, reserved_bytes=ACTIVATION_RESERVE_BYTES
    ),
    max_num_seqs=1024,
    max_num_batched_tokens=8192,
)

# A 0.5 B-parameter toy on the H200: steps of about a millisecond, a KV cache small enough to
# fill in a test, no jitter and a frontend that costs nothing, so that tests can predict every
# step and every delivery.
TINY = Preset(
    name="tiny",
    model=ModelShape(
        name="tiny",
        num_params=0.5e9,
        num_layers=8,
        hidden_size=1024,
        num_attention_heads=8,
        num_kv_heads=2,
        head_dim=128,
        vocab_size=32000,
    ),
    hardware=H200,
    efficiency=replace(HOPPER_VLLM_025, jitter_mean_seconds=0.0, idle_start_seconds=0.0,
                       new_request_hold_large_seconds=0.0),
    frontend=FREE_FRONTEND,
    max_model_len=2048,
    num_kv_blocks=256,
    max_num_seqs=16,
    max_num_batched_tokens=512,
)

PRESETS: dict[str, Preset] = {p.name: p for p in (LLAMA_3_8B_H200, LLAMA_3_8B_H100, TINY)}


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        known = ", ".join(sorted(PRESETS))
        raise ValueError(f"unknown sim preset {name!r}: expected one of {known}") from None
