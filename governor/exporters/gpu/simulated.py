"""What a simulated GPU reads at time ``t``: smooth, plausible, deterministic H200-like numbers.

Each GPU cycles between a compute-bound phase (tensor pipes busy, DRAM quiet) and a memory-bound
one (the reverse) on a five-minute period, under a load that rises and falls every two minutes,
shifted per GPU so a dashboard shows them apart. Pure functions of (gpu, t): tests that pin the
clock get the same numbers every time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GIB = 1024**3
MEMORY_TOTAL_BYTES = 143_771 * 1024 * 1024  # what an H200 reports
MEMORY_RESERVED_BYTES = 551 * 1024 * 1024
POWER_IDLE_W = 75.0
POWER_MAX_W = 700.0
SM_CLOCK_IDLE_MHZ = 345
SM_CLOCK_MAX_MHZ = 1980
MEMORY_CLOCK_MHZ = 3201
BAR1_TOTAL_BYTES = 256 * GIB


@dataclass(frozen=True, slots=True)
class Activity:
    load: float  # 0-1, how busy the GPU is
    tensor: float  # 0-1, tensor-pipe share of the time
    dram: float  # 0-1, DRAM bandwidth utilisation


def activity(gpu: int, t: float) -> Activity:
    # Rounded so that golden files do not depend on the last bit of the platform's sin().
    load = round(0.55 + 0.4 * math.sin(2 * math.pi * t / 120.0 + 0.9 * gpu), 6)
    compute_share = round(0.5 + 0.5 * math.sin(2 * math.pi * t / 300.0 + 1.7 * gpu), 6)
    return Activity(
        load=load,
        tensor=round(load * compute_share * 0.95, 6),
        dram=round(0.05 + load * (1.0 - compute_share) * 0.85, 6),
    )


def power_watts(a: Activity) -> float:
    return POWER_IDLE_W + (POWER_MAX_W - POWER_IDLE_W) * 0.9 * a.load


def sm_clock_mhz(a: Activity) -> int:
    span = SM_CLOCK_MAX_MHZ - SM_CLOCK_IDLE_MHZ
    return round(SM_CLOCK_IDLE_MHZ + span * min(1.0, 1.5 * a.load))


def temperature_celsius(a: Activity) -> int:
    return round(30 + 45 * a.load)


def memory_used_bytes(gpu: int) -> int:
    """A serving engine preallocates most of the memory and keeps it: constant per GPU."""
    return int(MEMORY_TOTAL_BYTES * (0.80 + 0.03 * (gpu % 4)))


def pcie_rates_bytes(a: Activity) -> tuple[float, float]:
    """(transmit, receive) bytes per second: tokens out, prompts in."""
    return 40e6 * a.load, 180e6 * a.load


def gpm_percent(metric_id: int, a: Activity) -> float:
    """The value NVML's GPM would give for metric ``metric_id`` (percent or MiB/s)."""
    tx, rx = pcie_rates_bytes(a)
    values = {
        1: 100 * min(1.0, 1.1 * a.load),  # GRAPHICS_UTIL
        2: 100 * a.load,  # SM_UTIL
        3: 100 * a.load * 0.3,  # SM_OCCUPANCY: decode kernels run few warps per SM
        4: 100 * a.load * 0.08,  # INTEGER_UTIL
        5: 100 * a.tensor,  # ANY_TENSOR_UTIL
        6: 0.0,
        7: 100 * a.tensor,  # HMMA: bf16/fp16 matrix work is all of it
        8: 0.0,
        9: 0.0,
        10: 100 * a.dram,
        11: 0.0,
        12: 100 * a.load * 0.12,
        13: 100 * a.load * 0.04,
        20: tx / (1024 * 1024),
        21: rx / (1024 * 1024),
        60: 0.0,  # a lone GPU has no NVLink traffic
        61: 0.0,
    }
    return values.get(metric_id, 0.0)
