"""The simulated engine's device reports, turned into what its fake GPU shows. No I/O here.

The engine counts, cumulatively, the seconds its GPU was busy, its tensor pipes worked and its
DRAM streamed (:class:`~governor.contracts.simdevice.DeviceReport`). Two reports an interval
apart give the shares of that interval; the faults, the memory held, the ECC errors and the XIDs
come with each report. :class:`DeviceFollower` keeps one :class:`~.simulated.GpuState` per fake
GPU, matched by UUID, and is fed by the poller (:mod:`.poller`) on the exporter's own clock::

    >>> from governor.contracts.simdevice import DeviceReport, fake_gpu_uuid
    >>> follower = DeviceFollower([fake_gpu_uuid(0), fake_gpu_uuid(1)], interval_seconds=1.0)
    >>> def report(busy: float) -> DeviceReport:
    ...     return DeviceReport(fake_gpu_uuid(0), busy, 0.1 * busy, 0.8 * busy, 0.0, 10, 100,
    ...                         2**30, 2**34)
    >>> _ = follower.observe(report(1.0), now=10.0)
    >>> _ = follower.observe(report(1.6), now=11.0)
    >>> states = follower.settle(now=11.0)
    >>> round(states[0].busy, 2), round(states[0].dram, 2), states[1].busy
    (0.6, 0.48, 0.0)

A GPU whose engine stops answering goes idle after :data:`STALE_INTERVALS` intervals, rather
than showing its last rates for ever. An engine that restarts (its counters go down) starts a
new baseline; the GPU's own lifetime counters (ECC) keep growing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final

from governor.contracts.simdevice import DeviceReport
from governor.exporters.gpu import simulated as sim

STALE_INTERVALS: Final = 3
# Seconds for the core and HBM temperatures to cover 63% of a step in power (a GPU's heat sink
# takes tens of seconds to settle).
TEMPERATURE_SECONDS: Final = 30.0


@dataclass(frozen=True, slots=True)
class XidEvent:
    gpu: int
    xid: int


@dataclass(slots=True)
class _Followed:
    """The last report of one GPU's engine, when it came, and what was derived from it."""

    report: DeviceReport
    at: float
    ecc: int  # the GPU's lifetime count, across engine restarts


class DeviceFollower:
    """Device reports in, one state per fake GPU out. Used from one thread (the poller's)."""

    def __init__(self, uuids: Sequence[str], *, interval_seconds: float) -> None:
        self._index = {uuid: i for i, uuid in enumerate(uuids)}
        self._stale_seconds = STALE_INTERVALS * interval_seconds
        self._states = [sim.IDLE] * len(uuids)
        self._followed: dict[int, _Followed] = {}
        self._settled_at: float | None = None

    def gpu_of(self, uuid: str) -> int | None:
        """The fake GPU with this UUID, None when there is none."""
        return self._index.get(uuid)

    def observe(self, report: DeviceReport, now: float) -> list[XidEvent]:
        """Take one report received at ``now``; the XIDs it raised since the last one (none
        from the first: those were raised before anyone listened). ``KeyError`` when no fake
        GPU has the report's UUID."""
        gpu = self._index[report.gpu_uuid]
        last = self._followed.get(gpu)
        if last is None:
            self._followed[gpu] = _Followed(report, now, report.ecc_uncorrected_total)
            self._states[gpu] = _shown(self._states[gpu], report, None, 0.0,
                                       report.ecc_uncorrected_total)
            return []
        seconds = now - last.at
        if seconds <= 0:
            return []
        restarted = report.steps < last.report.steps or \
            report.busy_seconds < last.report.busy_seconds
        before = _zero(report) if restarted else last.report
        ecc = last.ecc + max(0, report.ecc_uncorrected_total - before.ecc_uncorrected_total)
        self._followed[gpu] = _Followed(report, now, ecc)
        self._states[gpu] = _shown(self._states[gpu], report, before, seconds, ecc)
        return [XidEvent(gpu, xid) for xid, count in sorted(report.xid_events.items())
                for _ in range(max(0, count - before.xid_events.get(xid, 0)))]

    def settle(self, now: float) -> tuple[sim.GpuState, ...]:
        """Every GPU's state at ``now``: an engine unheard of for too long is gone, and the
        temperatures move towards where the power puts them."""
        elapsed = 0.0 if self._settled_at is None else max(0.0, now - self._settled_at)
        self._settled_at = now
        for gpu, followed in list(self._followed.items()):
            if now - followed.at > self._stale_seconds:
                del self._followed[gpu]
                self._states[gpu] = replace(sim.IDLE, ecc_uncorrected=followed.ecc,
                                            temperature_c=self._states[gpu].temperature_c,
                                            memory_temperature_c=(
                                                self._states[gpu].memory_temperature_c))
        self._states = [_warmed(state, elapsed) for state in self._states]
        return tuple(self._states)


def _zero(report: DeviceReport) -> DeviceReport:
    """The counters of an engine that has just started (what a restarted one counts from)."""
    return DeviceReport(report.gpu_uuid, 0.0, 0.0, 0.0, 0.0, 0, 0, 0, 0)


def _share(now: float, before: float, seconds: float) -> float:
    return min(1.0, max(0.0, (now - before) / seconds)) if seconds else 0.0


def _shown(state: sim.GpuState, report: DeviceReport, before: DeviceReport | None,
           seconds: float, ecc: int) -> sim.GpuState:
    """The GPU as ``report`` shows it, its shares taken against ``before``."""
    if before is None:
        busy = tensor = dram = tokens = 0.0
    else:
        busy = _share(report.busy_seconds, before.busy_seconds, seconds)
        tensor = _share(report.compute_seconds, before.compute_seconds, seconds)
        dram = _share(report.memory_seconds, before.memory_seconds, seconds)
        tokens = max(0, report.tokens - before.tokens) / seconds
    return replace(state, busy=busy, tensor=tensor, dram=dram, tokens_per_second=tokens,
                   faults=report.faults, engine_memory_bytes=report.memory_used_bytes,
                   ecc_uncorrected=ecc)


def _warmed(state: sim.GpuState, seconds: float) -> sim.GpuState:
    """The temperatures ``seconds`` later, on their way to their targets (first order)."""
    if not seconds:
        return state
    keep = math.exp(-seconds / TEMPERATURE_SECONDS)
    core, hbm = sim.temperature_target_c(state), sim.memory_temperature_target_c(state)
    return replace(state,
                   temperature_c=core + (state.temperature_c - core) * keep,
                   memory_temperature_c=hbm + (state.memory_temperature_c - hbm) * keep)
