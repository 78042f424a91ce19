"""Classic NVML readings, one call each: the call and the pure function that shapes its answer.

Fast readings run every interval; slow ones (BAR1 at 0.5 ms on an H200, the power limit that
rarely changes, the memory and graphics clocks) at the slow cadence.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from governor.contracts.metrics import gpu as m
from governor.exporters.gpu import nvml as nv
from governor.exporters.gpu.calls import CallGuard
from governor.exporters.gpu.readings import Sample

MHZ: float = 1e6
MILLI: float = 1e-3

# NVML clock-event reason bits (nvmlClocksEventReason*) → the ``reason`` label.
REASON_BITS: tuple[tuple[int, str], ...] = (
    (0x1, m.REASON_GPU_IDLE),
    (0x2, m.REASON_APPLICATIONS_CLOCKS),
    (0x4, m.REASON_SW_POWER_CAP),
    (0x8, m.REASON_HW_SLOWDOWN),
    (0x10, m.REASON_SYNC_BOOST),
    (0x20, m.REASON_SW_THERMAL),
    (0x40, m.REASON_HW_THERMAL),
    (0x80, m.REASON_HW_POWER_BRAKE),
)


def ratio(percent: float) -> float:
    """NVML percentages → the 0-1 ratio Prometheus conventions ask for, clamped against jitter."""
    return min(max(percent / 100.0, 0.0), 1.0)


def shape_utilization(util: Any) -> list[Sample]:
    return [
        Sample(m.UTILIZATION.name, ratio(util.gpu)),
        Sample(m.MEMORY_UTILIZATION.name, ratio(util.memory)),
    ]


def shape_memory(memory: Any) -> list[Sample]:
    samples = [
        Sample(m.MEMORY_TOTAL.name, float(memory.total)),
        Sample(m.MEMORY_USED.name, float(memory.used)),
        Sample(m.MEMORY_FREE.name, float(memory.free)),
    ]
    reserved = getattr(memory, "reserved", None)  # only nvmlMemory_v2 has it
    if reserved is not None:
        samples.append(Sample(m.MEMORY_RESERVED.name, float(reserved)))
    return samples


def shape_bar1(bar1: Any) -> list[Sample]:
    return [Sample(m.BAR1_TOTAL.name, float(bar1.bar1Total)),
            Sample(m.BAR1_USED.name, float(bar1.bar1Used))]


def shape_clock(clock: str, mhz: int) -> list[Sample]:
    return [Sample(m.CLOCK.name, mhz * MHZ, ((m.LABEL_CLOCK, clock),))]


def shape_clock_events(mask: int) -> list[Sample]:
    """One 0/1 series per reason, so an alert can name the reason and absence means no data."""
    return [
        Sample(m.CLOCK_EVENT_ACTIVE.name, 1.0 if mask & bit else 0.0, ((m.LABEL_REASON, reason),))
        for bit, reason in REASON_BITS
    ]


def shape_power(milliwatts: int) -> list[Sample]:
    return [Sample(m.POWER.name, milliwatts * MILLI)]


def shape_power_limit(milliwatts: int) -> list[Sample]:
    return [Sample(m.POWER_LIMIT.name, milliwatts * MILLI)]


def shape_power_default_limit(milliwatts: int) -> list[Sample]:
    return [Sample(m.POWER_DEFAULT_LIMIT.name, milliwatts * MILLI)]


def shape_temperature(celsius: int) -> list[Sample]:
    return [Sample(m.TEMPERATURE.name, float(celsius))]


def memory_info(nvml: nv.NvmlApi, handle: Any) -> Any:
    """Memory v2 (with ``reserved``); drivers older than r510 only know v1."""
    try:
        return nvml.nvmlDeviceGetMemoryInfo(handle, version=nv.MEMORY_V2)
    except nvml.NVMLError as exc:
        if nv.error_code(exc) not in (nv.ERROR_FUNCTION_NOT_FOUND,
                                      nv.ERROR_ARGUMENT_VERSION_MISMATCH):
            raise
        return nvml.nvmlDeviceGetMemoryInfo(handle)


@dataclass(frozen=True, slots=True)
class Reading:
    """``name`` keys the reading's errors; ``read`` asks NVML; ``shape`` is pure."""

    name: str
    read: Callable[[nv.NvmlApi, Any], Any]
    shape: Callable[[Any], list[Sample]]


FAST: tuple[Reading, ...] = (
    Reading("utilization", lambda n, h: n.nvmlDeviceGetUtilizationRates(h), shape_utilization),
    Reading("memory", memory_info, shape_memory),
    Reading("temperature", lambda n, h: n.nvmlDeviceGetTemperature(h, nv.TEMPERATURE_GPU),
            shape_temperature),
    Reading("clock_sm", lambda n, h: n.nvmlDeviceGetClockInfo(h, nv.CLOCK_SM),
            partial(shape_clock, "sm")),
    Reading("power", lambda n, h: n.nvmlDeviceGetPowerUsage(h), shape_power),
    Reading("clock_events", lambda n, h: n.nvmlDeviceGetCurrentClocksEventReasons(h),
            shape_clock_events),
)

# The memory clock moves only with the performance state and the graphics clock follows the SM
# clock on data-centre GPUs: neither needs a call a second.
SLOW: tuple[Reading, ...] = (
    Reading("clock_memory", lambda n, h: n.nvmlDeviceGetClockInfo(h, nv.CLOCK_MEM),
            partial(shape_clock, "memory")),
    Reading("clock_graphics", lambda n, h: n.nvmlDeviceGetClockInfo(h, nv.CLOCK_GRAPHICS),
            partial(shape_clock, "graphics")),
    Reading("bar1", lambda n, h: n.nvmlDeviceGetBAR1MemoryInfo(h), shape_bar1),
    Reading("power_limit", lambda n, h: n.nvmlDeviceGetEnforcedPowerLimit(h), shape_power_limit),
    Reading("power_default_limit", lambda n, h: n.nvmlDeviceGetPowerManagementDefaultLimit(h),
            shape_power_default_limit),
)


def read_all(
    nvml: nv.NvmlApi, handle: Any, guard: CallGuard, readings: Sequence[Reading]
) -> list[Sample]:
    """Every reading that answers; the others are counted by ``guard`` (GpuLost propagates)."""
    samples: list[Sample] = []
    for reading in readings:
        raw = guard(reading.name, partial(reading.read, nvml, handle))
        if raw is not None:
            samples.extend(reading.shape(raw))
    return samples
