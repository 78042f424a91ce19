"""The sampler: reads NVML every interval into an immutable :class:`Snapshot`.

It runs in its own thread (:meth:`Sampler.run`); a scrape only reads :meth:`Sampler.latest`.
Every failure is contained where it happens: a field that is not supported is dropped for that
GPU, a lost GPU reads ``up=False`` while the others go on, a missing driver leaves a snapshot that
says so and is retried every ``nvml_retry_seconds``, never a crash loop.

>>> from governor.exporters.gpu.fake import FakeNvml
>>> sampler = Sampler(FakeNvml(2), SamplerConfig(source="fake"))
>>> snapshot = sampler.tick()
>>> snapshot.nvml_up, snapshot.gpu_count, all(g.up for g in snapshot.gpus)
(True, 2, True)
>>> sampler.close()
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from governor.contracts.metrics import gpu as m
from governor.exporters.gpu import classic, fields, gpm, mig
from governor.exporters.gpu import nvml as nv
from governor.exporters.gpu.calls import CallGuard, GpuLost
from governor.exporters.gpu.errors import ErrorLedger
from governor.exporters.gpu.processes import (
    ContainerResolver,
    newest_stamp,
    read_cgroup,
    read_utilization,
    shape_process_count,
    shape_processes,
    shape_utilization,
)
from governor.exporters.gpu.readings import GpuIdentity, GpuReading, Sample, Snapshot, SystemInfo
from governor.exporters.gpu.xid import XidWatcher

log = logging.getLogger("governor.exporters.gpu.sampler")


@dataclass(frozen=True, slots=True)
class SamplerConfig:
    interval_seconds: float = 1.0
    slow_interval_seconds: float = 60.0
    gpm: bool = True
    xid: bool = True
    processes: bool = True
    nvml_retry_seconds: float = 30.0
    source: str = "nvml"  # label value of gpu_exporter_build_info: "nvml" or "fake"


@dataclass
class _Gpu:
    """The sampler's private, mutable state for one GPU (only the sampler thread touches it)."""

    identity: GpuIdentity
    handle: Any
    guard: CallGuard
    up: bool = True
    rotator: gpm.GpmRotator | None = None
    gpm_capable: bool = False  # GPM answers on this GPU (Hopper+), whether or not MIG is on
    slow: tuple[Sample, ...] = ()  # last slow round's classic and field readings
    gpm_slow: tuple[Sample, ...] = ()  # last slow round's extended GPM ratios
    mig_static: tuple[Sample, ...] = ()  # MIG mode and device identities, re-read when slow
    mig_devices: tuple[mig.MigDevice, ...] = ()
    mig_rotators: dict[int, gpm.GpmRotator] = field(default_factory=dict)
    utilization_seen: int = 0  # the newest per-process utilisation sample read (µs)


def cuda_version(encoded: int) -> str:
    """NVML encodes CUDA 12.4 as 12040."""
    return f"{encoded // 1000}.{encoded % 1000 // 10}"


class Sampler:
    def __init__(
        self, nvml: nv.NvmlApi | None, config: SamplerConfig = SamplerConfig(), *,
        unavailable: nv.NvmlUnavailable | None = None,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        thread_cpu: Callable[[], float] = time.thread_time,
        proc_root: Path = Path("/proc"),
        ledger: ErrorLedger | None = None,
    ) -> None:
        self._nvml = nvml
        self._config = config
        self._wall = wall
        self._monotonic = monotonic
        self._thread_cpu = thread_cpu
        self._ledger = ledger or ErrorLedger()
        self._containers = ContainerResolver(partial(read_cgroup, proc_root))
        self._gpus: list[_Gpu] = []
        self._system: SystemInfo | None = None
        self._xid: XidWatcher | None = None
        self._initialised = False
        self._next_init = monotonic()
        self._next_slow = monotonic()
        self._cpu_total = 0.0
        self._collections = 0
        self._last_success: float | None = None
        self._message = "starting: no sampling round yet"
        if nvml is None:
            reason = unavailable or nv.NvmlUnavailable(
                "NVML is not available", m.KIND_LIBRARY_NOT_FOUND)
            self._message = str(reason)
            self._ledger.record(reason.kind, "nvml", self._message, level=logging.ERROR)
        self._latest = self._snapshot((), 0.0, dict.fromkeys(m.PHASES, 0.0))

    # ---- the scrape side -------------------------------------------------------------------------

    def latest(self) -> Snapshot:
        """The newest snapshot; a plain attribute read, safe from any thread."""
        return self._latest

    # ---- the sampler thread ----------------------------------------------------------------------

    def run(
        self, stop: threading.Event, on_snapshot: Callable[[Snapshot], None] | None = None
    ) -> None:
        """Tick every interval until ``stop`` is set; an overrun skips the deadlines it missed.

        ``on_snapshot`` runs in this thread after each round (the server renders ahead there).
        """
        interval = self._config.interval_seconds
        deadline = self._monotonic()
        while not stop.is_set():
            try:
                snapshot = self.tick()
                if on_snapshot is not None:
                    on_snapshot(snapshot)
            except Exception:  # a bug in one round must not end sampling for good
                self._ledger.record(m.KIND_SAMPLER, "sampling round", traceback.format_exc())
            deadline += interval
            now = self._monotonic()
            if deadline < now:
                deadline = now + interval - (now - deadline) % interval
            stop.wait(deadline - now)

    def tick(self) -> Snapshot:
        """One sampling round over every GPU; publishes and returns the new snapshot."""
        start = self._monotonic()
        cpu_start = self._thread_cpu()
        if not self._initialised:
            self._try_init(start)
        slow_due = self._initialised and start >= self._next_slow
        phases = dict.fromkeys(m.PHASES, 0.0)
        pids: set[int] = set()
        readings = tuple(self._read_gpu(gpu, slow_due, phases, pids) for gpu in self._gpus)
        if slow_due:
            self._next_slow = start + self._config.slow_interval_seconds
        self._containers.retain(pids)
        self._cpu_total += self._thread_cpu() - cpu_start
        self._collections += 1
        if any(reading.up for reading in readings):
            self._last_success = self._wall()
        self._latest = self._snapshot(readings, self._monotonic() - start, phases)
        return self._latest

    def close(self) -> None:
        """Stop the XID watcher, free GPM buffers, shut NVML down. Call after the thread ended."""
        if self._xid is not None:
            self._xid.stop()
            self._xid = None
        for gpu in self._gpus:
            for rotator in [gpu.rotator, *gpu.mig_rotators.values()]:
                if rotator is not None:
                    rotator.close()
        self._gpus = []
        if self._initialised and self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError as exc:
                log.debug("nvmlShutdown: %s", exc)
            self._initialised = False

    # ---- start-up --------------------------------------------------------------------------------

    def _try_init(self, now: float) -> None:
        nvml = self._nvml
        if nvml is None or now < self._next_init:
            return
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            failure = nv.init_failure_message(exc)
            self._message = f"{failure}; retrying every {self._config.nvml_retry_seconds:g} s"
            self._ledger.record(failure.kind, "nvml init", self._message, level=logging.ERROR)
            self._next_init = now + self._config.nvml_retry_seconds
            return
        self._initialised = True
        self._message = ""
        self._system = self._read_system(nvml)
        self._gpus = self._discover(nvml)
        log.info("NVML ready: driver %s, CUDA %s, %d GPU(s): %s",
                 self._system.driver_version, self._system.cuda_version, len(self._gpus),
                 ", ".join(f"{g.identity.index}={g.identity.model}" for g in self._gpus) or "none")
        if self._config.xid and self._gpus:
            handles = [(g.identity.index, g.handle) for g in self._gpus if g.handle is not None]
            self._xid = XidWatcher(nvml, handles, self._ledger)
            if not self._xid.start():
                self._xid = None

    def _read_system(self, nvml: nv.NvmlApi) -> SystemInfo:
        guard = CallGuard(nvml, self._ledger, -1)
        driver = guard("driver_version", nvml.nvmlSystemGetDriverVersion)
        cuda = guard("cuda_version", nvml.nvmlSystemGetCudaDriverVersion)
        return SystemInfo(nv.text(driver) if driver is not None else "",
                          cuda_version(int(cuda)) if cuda is not None else "")

    def _discover(self, nvml: nv.NvmlApi) -> list[_Gpu]:
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as exc:
            self._ledger.record(nv.error_kind(nv.error_code(exc)), "nvmlDeviceGetCount", str(exc))
            return []
        gpus = []
        for index in range(count):
            identity = GpuIdentity(index, "", "unknown", "")
            gpu = _Gpu(identity, None, CallGuard(nvml, self._ledger, index))
            self._attach(nvml, gpu)
            gpus.append(gpu)
        return gpus

    def _attach(self, nvml: nv.NvmlApi, gpu: _Gpu) -> None:
        """Get the handle and identity of a GPU; a GPU lost at start is retried when slow."""
        try:
            self._identify(nvml, gpu)
        except Exception:  # one GPU's surprise must not leave the others unsampled
            gpu.handle, gpu.up = None, False
            where = f"gpu {gpu.identity.index} attach"
            self._ledger.record(m.KIND_SAMPLER, where, traceback.format_exc())

    def _identify(self, nvml: nv.NvmlApi, gpu: _Gpu) -> None:
        index, guard = gpu.identity.index, gpu.guard
        try:
            handle = guard("handle", partial(nvml.nvmlDeviceGetHandleByIndex, index))
            if handle is None:
                gpu.up = False
                return
            uuid = guard("uuid", partial(nvml.nvmlDeviceGetUUID, handle))
            name = guard("name", partial(nvml.nvmlDeviceGetName, handle))
            pci = guard("pci_info", partial(nvml.nvmlDeviceGetPciInfo, handle))
        except GpuLost:
            gpu.up = False
            return
        gpu.handle = handle
        gpu.identity = GpuIdentity(
            index, nv.text(uuid) if uuid is not None else "",
            nv.text(name) if name is not None else "unknown",
            nv.text(pci.busId) if pci is not None else "",
        )
        if self._config.gpm:
            gpu.rotator = self._new_gpm(nvml, gpu)

    def _new_gpm(self, nvml: nv.NvmlApi, gpu: _Gpu) -> gpm.GpmRotator | None:
        try:
            able = gpu.guard("gpm_support", partial(gpm.supported, nvml, gpu.handle))
            if not able:
                if able is not None:
                    log.info("gpu %d (%s) has no GPM (Hopper and newer): SM, tensor and DRAM "
                             "ratios are not exported for it",
                             gpu.identity.index, gpu.identity.model)
                return None
            gpu.gpm_capable = True
            take = partial(nvml.nvmlGpmSampleGet, gpu.handle)
            return gpu.guard("gpm_alloc", partial(gpm.GpmRotator, nvml, take, gpm.FAST, gpm.SLOW))
        except GpuLost:
            gpu.up = False
            return None

    # ---- one GPU, one round ----------------------------------------------------------------------

    def _read_gpu(
        self, gpu: _Gpu, slow_due: bool, phases: dict[str, float], pids: set[int]
    ) -> GpuReading:
        nvml = self._nvml
        if gpu.handle is None and slow_due and nvml is not None:
            self._attach(nvml, gpu)
        if gpu.handle is None or nvml is None:
            return GpuReading(gpu.identity, False, tuple(self._xid_samples(gpu)))
        samples: list[Sample] = []
        try:
            self._read_into(nvml, gpu, slow_due, phases, pids, samples)
            up = True
        except GpuLost:
            up = False
            samples = []  # what was read before the loss is not served as a live reading
            gpu.slow = gpu.gpm_slow = gpu.mig_static = ()
            if gpu.rotator is not None:
                gpu.rotator.reset()
        except Exception:  # a bug while shaping one GPU must not hide the others
            up = True
            self._ledger.record(m.KIND_SAMPLER, f"gpu {gpu.identity.index}", traceback.format_exc())
        if up and not gpu.up:
            log.info("gpu %d answers again", gpu.identity.index)
            gpu.guard.recovered()
        gpu.up = up
        return GpuReading(gpu.identity, up, (*samples, *self._xid_samples(gpu)))

    def _read_into(
        self, nvml: nv.NvmlApi, gpu: _Gpu, slow_due: bool, phases: dict[str, float],
        pids: set[int], samples: list[Sample],
    ) -> None:
        handle, guard = gpu.handle, gpu.guard
        with self._phase(phases, m.PHASE_CLASSIC):
            samples += classic.read_all(nvml, handle, guard, classic.FAST)
        with self._phase(phases, m.PHASE_FIELDS):
            samples += fields.read_fields(nvml, handle, guard, fields.FAST, call_name="fields_fast")
        if self._config.processes:
            with self._phase(phases, m.PHASE_PROCESSES):
                list_processes = partial(nvml.nvmlDeviceGetComputeRunningProcesses, handle)
                running = guard("processes", list_processes)
                if running is not None:
                    pids.update(int(p.pid) for p in running)
                    samples += shape_processes(running, self._containers)
                    samples += shape_process_count(running)
                samples += self._process_utilization(nvml, gpu)
        if gpu.rotator is not None:
            with self._phase(phases, m.PHASE_GPM):
                samples += self._gpm(gpu, slow_due)
        with self._phase(phases, m.PHASE_MIG):
            samples += self._mig(nvml, gpu, slow_due)
        if slow_due:
            with self._phase(phases, m.PHASE_SLOW):
                gpu.slow = (
                    *classic.read_all(nvml, handle, guard, classic.SLOW),
                    *fields.read_fields(nvml, handle, guard, fields.SLOW, call_name="fields_slow"),
                )
        samples += gpu.slow
        samples += gpu.gpm_slow

    def _process_utilization(self, nvml: nv.NvmlApi, gpu: _Gpu) -> list[Sample]:
        since = gpu.utilization_seen
        found = gpu.guard("process_utilization",
                          partial(read_utilization, nvml, gpu.handle, since))
        if not found:
            return []
        gpu.utilization_seen = newest_stamp(found, since)
        return shape_utilization(found, self._containers)

    def _gpm(self, gpu: _Gpu, slow_due: bool) -> list[Sample]:
        rotator = gpu.rotator
        assert rotator is not None
        result = gpu.guard("gpm", partial(rotator.tick, slow_due))
        if "gpm" in gpu.guard.disabled:
            rotator.close()
            gpu.rotator = None
        if result is None:
            if slow_due:  # the breakdowns of the last slow round would now be served too old
                gpu.gpm_slow = ()
            return []
        self._gpm_failures(gpu, rotator, result, "gpm")
        if result.slow is not None:
            gpu.gpm_slow = result.slow
        return list(result.fast)

    @staticmethod
    def _gpm_failures(
        gpu: _Gpu, rotator: gpm.GpmRotator, result: gpm.GpmResult, where: str
    ) -> None:
        """Count the metrics that did not answer; stop asking for those that never will."""
        for metric_id, code in result.failed:
            name = f"{where}_{metric_id}"
            gpu.guard.failed(name, code, f"GPM metric {metric_id}: nvmlReturn {code}")
            if code in nv.PERMANENT_CODES:
                rotator.drop(metric_id)

    def _mig(self, nvml: nv.NvmlApi, gpu: _Gpu, slow_due: bool) -> list[Sample]:
        if slow_due:
            self._refresh_mig(nvml, gpu)
        samples = list(gpu.mig_static)
        samples += mig.memory_samples(nvml, gpu.mig_devices, gpu.guard)
        for gi, rotator in gpu.mig_rotators.items():
            result = gpu.guard(f"mig_gpm_{gi}", partial(rotator.tick, False))
            if result is not None:
                self._gpm_failures(gpu, rotator, result, f"mig_gpm_{gi}")
                samples += result.fast
        return samples

    def _refresh_mig(self, nvml: nv.NvmlApi, gpu: _Gpu) -> None:
        enabled = mig.mig_enabled(nvml, gpu.handle, gpu.guard)
        devices = mig.discover(nvml, gpu.handle, gpu.guard) if enabled else ()
        gpu.mig_devices = devices
        gpu.mig_static = () if enabled is None else (
            Sample(m.MIG_MODE.name, 1.0 if enabled else 0.0), *mig.info_samples(devices))
        wanted = {d.gpu_instance for d in devices} if gpu.gpm_capable else set()
        for gi in set(gpu.mig_rotators) - wanted:
            gpu.mig_rotators.pop(gi).close()
        for gi in sorted(wanted - set(gpu.mig_rotators)):
            rotator = gpu.guard(f"mig_gpm_alloc_{gi}", partial(
                gpm.GpmRotator, nvml, partial(nvml.nvmlGpmMigSampleGet, gpu.handle, gi), gpm.MIG,
                labels=((m.LABEL_GPU_INSTANCE, str(gi)),)))
            if rotator is not None:
                gpu.mig_rotators[gi] = rotator

    def _xid_samples(self, gpu: _Gpu) -> list[Sample]:
        return self._xid.samples(gpu.identity.index) if self._xid is not None else []

    @contextmanager
    def _phase(self, phases: dict[str, float], phase: str) -> Iterator[None]:
        start = self._monotonic()
        try:
            yield
        finally:
            phases[phase] += self._monotonic() - start

    # ---- publishing ------------------------------------------------------------------------------

    def _snapshot(
        self, readings: tuple[GpuReading, ...], seconds: float, phases: dict[str, float]
    ) -> Snapshot:
        return Snapshot(
            sequence=self._collections,
            taken_at=self._wall(),
            taken_monotonic=self._monotonic(),
            source=self._config.source,
            nvml_up=self._initialised,
            nvml_message=self._message,
            system=self._system,
            gpus=readings,
            errors=self._ledger.counts(),
            collect_seconds=seconds,
            phase_seconds=tuple(phases.items()),
            cpu_seconds_total=self._cpu_total,
            collections_total=self._collections,
            last_success_at=self._last_success,
        )
