"""Hopper GPM profiling ratios, by rotating samples on the sampler's own clock.

A GPM metric is a rate between two ``nvmlGpmSampleGet`` samples (NVML asks for >100 ms apart).
Each round takes one sample and computes the fast metrics against the previous round's sample;
at the slow cadence it also computes the extended metrics against the sample of the previous slow
round, so those are averages over the slow interval. Three sample buffers suffice: the previous
one, the previous slow one (possibly the same) and the one being filled. Nothing sleeps.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from governor.contracts.metrics import gpu as m
from governor.exporters.gpu import nvml as nv
from governor.exporters.gpu.readings import Labels, Sample

MIB: float = 1024.0 * 1024.0


@dataclass(frozen=True, slots=True)
class GpmMetric:
    metric_id: int  # NVML_GPM_METRIC_*
    metric: m.GpuMetric
    scale: float = 0.01  # percent → ratio unless said otherwise
    labels: Labels = ()

    @property
    def is_ratio(self) -> bool:
        return self.metric.unit == "ratio"

    def sample(self, value: float, extra: Labels = ()) -> Sample:
        scaled = value * self.scale
        if self.is_ratio:
            scaled = min(max(scaled, 0.0), 1.0)  # GPM can read 100.2 %; the contract is 0-1
        return Sample(self.metric.name, scaled, self.labels + extra)


def _pipe(name: str) -> Labels:
    return ((m.LABEL_PIPE, name),)


# Every round: the six a serving dashboard needs second by second (0.3 ms a round on an H200).
FAST: tuple[GpmMetric, ...] = (
    GpmMetric(2, m.SM_ACTIVE),  # SM_UTIL
    GpmMetric(3, m.SM_OCCUPANCY),
    GpmMetric(5, m.TENSOR_ACTIVE),  # ANY_TENSOR_UTIL
    GpmMetric(10, m.DRAM_BANDWIDTH_UTILIZATION),
    GpmMetric(20, m.PCIE_TRANSMIT_RATE, MIB),  # MiB/s
    GpmMetric(21, m.PCIE_RECEIVE_RATE, MIB),
)

# At the slow cadence, averaged over the slow interval: the breakdowns. On an H200 these ten cost
# 2.3 ms a call, 1.45 ms of it GRAPHICS_UTIL alone (each of the others about 1.3 us).
SLOW: tuple[GpmMetric, ...] = (
    GpmMetric(1, m.GRAPHICS_ENGINE_ACTIVE),  # GRAPHICS_UTIL
    GpmMetric(6, m.TENSOR_PIPE_ACTIVE, labels=_pipe("dfma")),
    GpmMetric(7, m.TENSOR_PIPE_ACTIVE, labels=_pipe("hmma")),
    GpmMetric(8, m.TENSOR_PIPE_ACTIVE, labels=_pipe("dmma")),
    GpmMetric(9, m.TENSOR_PIPE_ACTIVE, labels=_pipe("imma")),
    GpmMetric(11, m.FP_PIPE_ACTIVE, labels=_pipe("fp64")),
    GpmMetric(12, m.FP_PIPE_ACTIVE, labels=_pipe("fp32")),
    GpmMetric(13, m.FP_PIPE_ACTIVE, labels=_pipe("fp16")),
    GpmMetric(60, m.NVLINK_RECEIVE_RATE, MIB),  # NVLINK_TOTAL_RX_PER_SEC
    GpmMetric(61, m.NVLINK_TRANSMIT_RATE, MIB),
)

# Under MIG, per GPU instance: the three a per-tenant board needs.
MIG: tuple[GpmMetric, ...] = (
    GpmMetric(2, m.MIG_SM_ACTIVE),
    GpmMetric(5, m.MIG_TENSOR_ACTIVE),
    GpmMetric(10, m.MIG_DRAM_BANDWIDTH_UTILIZATION),
)


def supported(nvml: nv.NvmlApi, handle: Any) -> bool:
    """Whether the device does GPM (Hopper and newer); raises NVMLError like any call."""
    return bool(nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)


@dataclass(frozen=True, slots=True)
class GpmResult:
    fast: tuple[Sample, ...]
    slow: tuple[Sample, ...] | None  # None when this was not a slow round
    failed: tuple[tuple[int, int], ...]  # (metric id, nvmlReturn) of metrics that did not answer


class GpmRotator:
    """Owns three GPM sample buffers of one GPU (or one GPU instance) and the metrics asked."""

    def __init__(
        self, nvml: nv.NvmlApi, take_sample: Callable[[Any], Any],
        fast: Sequence[GpmMetric], slow: Sequence[GpmMetric] = (), labels: Labels = (),
    ) -> None:
        self._nvml = nvml
        self._take = take_sample
        self._fast = list(fast)
        self._slow = list(slow)
        self._labels = labels
        self._buffers: list[Any] = []
        try:
            for _ in range(3):
                self._buffers.append(nvml.nvmlGpmSampleAlloc())
        except Exception:
            self.close()
            raise
        self._prev: int | None = None
        self._slow_prev: int | None = None
        # One request structure (about 20 kB with NVML's 477 metric slots), reused every call.
        self._request = nvml.c_nvmlGpmMetricsGet_t()

    def drop(self, metric_id: int) -> None:
        """Stop asking for a metric the device does not support."""
        self._fast = [g for g in self._fast if g.metric_id != metric_id]
        self._slow = [g for g in self._slow if g.metric_id != metric_id]

    def reset(self) -> None:
        """Forget the samples taken so far (after a GPU loss they span the outage)."""
        self._prev = self._slow_prev = None

    def tick(self, slow_due: bool) -> GpmResult:
        """Take a sample; NVMLError from the sample propagates and leaves the rotation as it was."""
        current = next(i for i in range(3) if i not in (self._prev, self._slow_prev))
        self._take(self._buffers[current])
        failed: list[tuple[int, int]] = []
        fast: tuple[Sample, ...] = ()
        if self._prev is not None:
            fast = self._metrics(self._prev, current, self._fast, failed)
        slow: tuple[Sample, ...] | None = None
        if slow_due:
            slow = ()
            if self._slow_prev is not None:
                slow = self._metrics(self._slow_prev, current, self._slow, failed)
            self._slow_prev = current
        self._prev = current
        return GpmResult(fast, slow, tuple(failed))

    def _metrics(
        self, first: int, second: int, wanted: Sequence[GpmMetric], failed: list[tuple[int, int]]
    ) -> tuple[Sample, ...]:
        if not wanted:
            return ()
        request = self._request
        request.version = nv.GPM_METRICS_GET_VERSION
        request.numMetrics = len(wanted)
        request.sample1 = self._buffers[first]
        request.sample2 = self._buffers[second]
        for i, gpm in enumerate(wanted):
            request.metrics[i].metricId = gpm.metric_id
        self._nvml.nvmlGpmMetricsGet(request)
        samples = []
        for i, gpm in enumerate(wanted):
            answer = request.metrics[i]
            if answer.nvmlReturn == nv.SUCCESS:
                samples.append(gpm.sample(answer.value, self._labels))
            else:
                failed.append((gpm.metric_id, int(answer.nvmlReturn)))
        return tuple(samples)

    def close(self) -> None:
        for buffer in self._buffers:
            # Freeing at shutdown: nothing useful can be done with an error.
            with contextlib.suppress(self._nvml.NVMLError):
                self._nvml.nvmlGpmSampleFree(buffer)
        self._buffers = []
