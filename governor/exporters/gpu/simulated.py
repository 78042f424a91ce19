"""What a simulated H200 reads, given what runs on it: pure functions of a :class:`GpuState`.

A fake GPU is idle and flat until something runs on it: ``governor exporter --fake-gpus N
--follow URL`` reads the simulated engine's device report (:mod:`.follow`) and fills the state of
the GPU the engine runs on; the others stay :data:`IDLE`. The state holds the shares of the last
interval (the engine's kernels, tensor pipes and DRAM), the faults a drill set, the memory the
engine holds and the temperatures; every NVML reading follows from it here.

The constants are an H200 SXM's, read on a real one (``tests/data/gpu_h200_*.prom``: idle, a
matrix multiply, a memory copy). The power model is fitted to those three: idle 79.6 W; a copy
(SM 0.99, DRAM 0.89, no tensor work) 485 W; a matrix multiply (SM 0.96, tensor 0.93, DRAM 0.17)
at its 700 W limit. A load never throttles a fake GPU by itself (the simulated engine's steps
would not slow down with it): clock-event reasons come from the drill's faults, and only they
hold the SM clock below its boost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from governor.contracts.metrics import gpu as m
from governor.contracts.simdevice import STRAY_PROCESS_MEMORY_BYTES, Faults
from governor.exporters.gpu.classic import REASON_BITS

GIB: Final = 1024**3
MEMORY_TOTAL_BYTES: Final = 143_771 * 1024 * 1024  # what an H200 reports
MEMORY_RESERVED_BYTES: Final = 644_939_776  # the driver's, as an idle H200 reports it
BAR1_TOTAL_BYTES: Final = 256 * GIB
POWER_IDLE_W: Final = 79.6
POWER_MAX_W: Final = 700.0
POWER_CAPPED_SHARE: Final = 0.6  # an injected power cap: the limit lowered to 420 W
# Dynamic power per unit of activity, fitted to the copy and the multiply (see above).
POWER_PER_SM: Final = 0.45
POWER_PER_TENSOR: Final = 0.60
POWER_PER_DRAM: Final = 0.25
SM_CLOCK_IDLE_MHZ: Final = 345
SM_CLOCK_MAX_MHZ: Final = 1980
MEMORY_CLOCK_MHZ: Final = 3201
# °C: idle, and the rise per watt above idle (61 °C at 690 W in the multiply, 48 °C at 485 W in
# the copy); HBM: idle, and its rise with DRAM and tensor activity.
TEMPERATURE_IDLE_C: Final = 37.0
TEMPERATURE_PER_WATT: Final = 0.035
MEMORY_TEMPERATURE_IDLE_C: Final = 39.0
MEMORY_TEMPERATURE_PER_DRAM: Final = 20.0
MEMORY_TEMPERATURE_PER_TENSOR: Final = 8.0
# A GPU held down by heat is at least this hot (chosen: where Hopper's slowdown begins).
THERMAL_SLOWDOWN_C: Final = 88.0
# Below this share of SM time the GPU reads idle (the gpu_idle reason, the idle clock).
IDLE_BELOW: Final = 0.005
# PCIe as an idle H200 shows it (B/s), what a scheduled token adds (its ids in, its logits'
# sampled token out), and each link's capacity per direction: PCIe Gen5 x16, and the H200 SXM's
# 18 NVLink 4 links (900 GB/s both ways).
PCIE_IDLE_TX: Final = 364e3
PCIE_IDLE_RX: Final = 112e3
PCIE_TX_PER_TOKEN: Final = 64.0
PCIE_RX_PER_TOKEN: Final = 256.0
PCIE_CAPACITY: Final = 64e9
NVLINK_CAPACITY: Final = 450e9
# The host pids the fake gives the engine and a co-tenant on GPU i: these plus i.
ENGINE_PID: Final = 4242
COTENANT_PID: Final = 5353
# Stray (leaked) contexts on GPU i: this plus 16 i plus their number.
STRAY_PID: Final = 6000
_HEALTHY = Faults()
_BIT = {reason: bit for bit, reason in REASON_BITS}  # NVML's clock-event reason bits


@dataclass(frozen=True, slots=True)
class GpuState:
    """One GPU now: what ran on it over the last interval, and what is wrong with it."""

    busy: float = 0.0  # share of the interval the engine's kernels ran
    tensor: float = 0.0  # share the tensor pipes worked
    dram: float = 0.0  # share DRAM streamed
    tokens_per_second: float = 0.0  # tokens the engine scheduled
    faults: Faults = _HEALTHY
    engine_memory_bytes: int = 0  # 0: no engine holds memory here
    temperature_c: float = TEMPERATURE_IDLE_C
    memory_temperature_c: float = MEMORY_TEMPERATURE_IDLE_C
    ecc_uncorrected: int = 0  # lifetime, as NVML counts them


IDLE: Final = GpuState()


def sm_active(state: GpuState) -> float:
    """The engine's kernels plus the co-tenant's share of the SM time."""
    return min(1.0, state.busy + state.faults.cotenant_sm_ratio)


def is_idle(state: GpuState) -> bool:
    return sm_active(state) < IDLE_BELOW


def power_limit_watts(state: GpuState) -> float:
    """The enforced limit: the board's own, or a lower one where a power cap is injected (an
    operator or the node's power manager lowered it, which is what holds its clocks down)."""
    if m.REASON_SW_POWER_CAP in state.faults.clock_reasons:
        return POWER_CAPPED_SHARE * POWER_MAX_W
    return POWER_MAX_W


def power_watts(state: GpuState) -> float:
    """Idle power plus what the activity draws at the clock in force; a GPU held at its power
    cap draws its limit while it works."""
    if is_idle(state):
        return POWER_IDLE_W
    activity = min(1.0, POWER_PER_SM * sm_active(state) + POWER_PER_TENSOR * state.tensor
                   + POWER_PER_DRAM * state.dram)
    watts = POWER_IDLE_W + (POWER_MAX_W - POWER_IDLE_W) * activity * state.faults.clock_ratio
    if m.REASON_SW_POWER_CAP in state.faults.clock_reasons:
        watts = 0.98 * power_limit_watts(state)
    return watts


def temperature_target_c(state: GpuState) -> float:
    """Where the core temperature settles at this power (:mod:`.follow` makes it lag)."""
    target = TEMPERATURE_IDLE_C + TEMPERATURE_PER_WATT * (power_watts(state) - POWER_IDLE_W)
    if set(m.THERMAL_REASONS) & set(state.faults.clock_reasons):
        target = max(target, THERMAL_SLOWDOWN_C)
    return target


def memory_temperature_target_c(state: GpuState) -> float:
    return (MEMORY_TEMPERATURE_IDLE_C + MEMORY_TEMPERATURE_PER_DRAM * state.dram
            + MEMORY_TEMPERATURE_PER_TENSOR * state.tensor)


def sm_clock_mhz(state: GpuState) -> int:
    """Boost while working, idle clock otherwise, never above the share a fault leaves."""
    held = SM_CLOCK_MAX_MHZ * state.faults.clock_ratio
    return round(min(SM_CLOCK_IDLE_MHZ if is_idle(state) else SM_CLOCK_MAX_MHZ, held))


def clock_event_reasons(state: GpuState) -> int:
    """NVML's bitmask: the faults' reasons, and gpu_idle when nothing runs."""
    mask = sum(_BIT[reason] for reason in state.faults.clock_reasons)
    return mask | (_BIT[m.REASON_GPU_IDLE] if is_idle(state) else 0)


def stray_memory_bytes(state: GpuState) -> int:
    return state.faults.stray_processes * STRAY_PROCESS_MEMORY_BYTES


def memory_used_bytes(state: GpuState) -> int:
    return min(state.engine_memory_bytes + state.faults.cotenant_memory_bytes
               + stray_memory_bytes(state), MEMORY_TOTAL_BYTES - MEMORY_RESERVED_BYTES)


def has_cotenant(state: GpuState) -> bool:
    return state.faults.cotenant_sm_ratio > 0 or state.faults.cotenant_memory_bytes > 0


def processes(state: GpuState, gpu: int) -> list[tuple[int, int, float, float]]:
    """``(pid, memory bytes, SM share, DRAM share)`` of each process on the GPU."""
    out = []
    if state.engine_memory_bytes:
        out.append((ENGINE_PID + gpu, state.engine_memory_bytes, state.busy, state.dram))
    if has_cotenant(state):
        out.append((COTENANT_PID + gpu, state.faults.cotenant_memory_bytes,
                    state.faults.cotenant_sm_ratio, 0.0))
    out += [(STRAY_PID + 16 * gpu + k, STRAY_PROCESS_MEMORY_BYTES, 0.0, 0.0)
            for k in range(state.faults.stray_processes)]
    return out


def pcie_rates_bytes(state: GpuState) -> tuple[float, float]:
    """(transmit, receive) bytes per second: the engine's tokens and others' traffic."""
    others = state.faults.link_ratio * PCIE_CAPACITY
    tokens = state.tokens_per_second
    return (PCIE_IDLE_TX + PCIE_TX_PER_TOKEN * tokens + others,
            PCIE_IDLE_RX + PCIE_RX_PER_TOKEN * tokens + others)


def nvlink_rate_bytes(state: GpuState) -> float:
    """Bytes per second each way: a one-GPU engine sends nothing, others' traffic does."""
    return state.faults.link_ratio * NVLINK_CAPACITY


def gpm_percent(metric_id: int, state: GpuState) -> float:
    """The value NVML's GPM would give for metric ``metric_id`` (percent or MiB/s)."""
    sm = sm_active(state)
    tx, rx = pcie_rates_bytes(state)
    nvlink = nvlink_rate_bytes(state) / (1024 * 1024)
    values = {
        1: 100 * min(1.0, 1.02 * sm),  # GRAPHICS_UTIL: the engine was active at least this
        2: 100 * sm,  # SM_UTIL
        3: 100 * sm * 0.15,  # SM_OCCUPANCY: a multiply read 0.14 at SM 0.96
        4: 100 * sm * 0.08,  # INTEGER_UTIL
        5: 100 * state.tensor,  # ANY_TENSOR_UTIL
        7: 100 * state.tensor,  # HMMA: bf16 matrix work is all of it
        10: 100 * state.dram,  # DRAM_BW_UTIL
        12: 100 * sm * 0.12,  # FP32
        13: 100 * sm * 0.04,  # FP16 outside the tensor pipes
        20: tx / (1024 * 1024),
        21: rx / (1024 * 1024),
        60: nvlink,  # NVLINK_TOTAL_RX_PER_SEC
        61: nvlink,  # NVLINK_TOTAL_TX_PER_SEC
    }
    return values.get(metric_id, 0.0)
