"""A fake ``pynvml``: simulated GPUs for ``--fake-gpus N`` demos, and the tests' NVML.

It stands where the real module stands (the sampler cannot tell them apart), so ``--fake-gpus``
exercises the whole exporter after the NVML boundary. Each GPU reads what its
:class:`~.simulated.GpuState` says: idle until ``--follow`` fills :attr:`FakeNvml.states` with
what the simulated engine runs on it. For tests it counts every call and can make any call, field
or GPM metric fail with any NVML return code, lose a GPU, deliver XID events and refuse to
initialise.

>>> nvml = FakeNvml(2, clock=lambda: 0.0)
>>> nvml.nvmlInit()
>>> nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(1))
'NVIDIA H200 (simulated)'
>>> nvml.fail("nvmlDeviceGetPowerUsage", 3, gpu=1)       # NVML_ERROR_NOT_SUPPORTED
>>> nvml.nvmlDeviceGetPowerUsage(nvml.nvmlDeviceGetHandleByIndex(1))
Traceback (most recent call last):
...
governor.exporters.gpu.fake.NVMLError_NotSupported: Not Supported
>>> nvml.calls["nvmlDeviceGetPowerUsage"]
1
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from governor.contracts.metrics import gpu as m
from governor.contracts.simdevice import fake_gpu_uuid
from governor.exporters.gpu import fields
from governor.exporters.gpu import nvml as nv
from governor.exporters.gpu import simulated as sim
from governor.exporters.gpu.miglayout import memory_share

_MESSAGES = {
    nv.ERROR_NOT_SUPPORTED: "Not Supported",
    nv.ERROR_NO_PERMISSION: "Insufficient Permissions",
    nv.ERROR_NOT_FOUND: "Not Found",
    nv.ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    nv.ERROR_TIMEOUT: "Timeout",
    nv.ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    nv.ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    nv.ERROR_GPU_IS_LOST: "GPU is lost",
    nv.ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    """Like pynvml's: ``value`` is the return code, and each code has its own subclass."""

    value: int

    def __new__(cls, value: int) -> NVMLError:
        subclass = _SUBCLASSES.get(value, cls) if cls is NVMLError else cls
        error = Exception.__new__(subclass)
        error.value = value
        return error

    def __init__(self, value: int) -> None:
        super().__init__(value)

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"NVML error {self.value}")


class NVMLError_NotSupported(NVMLError): ...
class NVMLError_NoPermission(NVMLError): ...
class NVMLError_NotFound(NVMLError): ...
class NVMLError_Timeout(NVMLError): ...
class NVMLError_FunctionNotFound(NVMLError): ...
class NVMLError_GpuIsLost(NVMLError): ...
class NVMLError_DriverNotLoaded(NVMLError): ...
class NVMLError_LibraryNotFound(NVMLError): ...


_SUBCLASSES: dict[int, type[NVMLError]] = {
    nv.ERROR_NOT_SUPPORTED: NVMLError_NotSupported,
    nv.ERROR_NO_PERMISSION: NVMLError_NoPermission,
    nv.ERROR_NOT_FOUND: NVMLError_NotFound,
    nv.ERROR_TIMEOUT: NVMLError_Timeout,
    nv.ERROR_FUNCTION_NOT_FOUND: NVMLError_FunctionNotFound,
    nv.ERROR_GPU_IS_LOST: NVMLError_GpuIsLost,
    nv.ERROR_DRIVER_NOT_LOADED: NVMLError_DriverNotLoaded,
    nv.ERROR_LIBRARY_NOT_FOUND: NVMLError_LibraryNotFound,
}

# Fields 269-271: the nanoseconds clocks were held by each of their reasons.
_SLOWDOWN_FIELDS = {spec.field_id: dict(spec.labels)[m.LABEL_REASON] for spec in fields.SLOW
                    if spec.metric is m.CLOCK_EVENT_DURATION}
# What the fake answers in nvmlDeviceGetFieldValues: field id → (value type, reading).
_FIELD_TYPES = {82: nv.VALUE_UINT, 94: nv.VALUE_UINT, 5: nv.VALUE_ULONGLONG,
                6: nv.VALUE_ULONGLONG, 83: nv.VALUE_ULONGLONG, 197: nv.VALUE_ULONGLONG,
                198: nv.VALUE_ULONGLONG, 142: nv.VALUE_UINT, 143: nv.VALUE_UINT,
                144: nv.VALUE_UINT, 145: nv.VALUE_UINT, 269: nv.VALUE_ULONGLONG,
                270: nv.VALUE_ULONGLONG, 271: nv.VALUE_ULONGLONG}
# A field the exporter reads that the fake does not simulate reads 0, like a counter that never
# moved: a reading added to the exporter shows on the fake GPUs without a change here. Fields
# nobody reads answer NOT_SUPPORTED, as a GPU that lacks them does.
_READ_FIELDS = frozenset(spec.field_id for spec in (*fields.FAST, *fields.SLOW))
_MIG_SLOTS = 7  # what nvmlDeviceGetMaxMigDeviceCount answers (an H200's compute slices)
# What an instance nothing runs on holds (chosen: nvidia-smi shows a few MiB on an empty one).
_MIG_EMPTY_USED_BYTES = 13 * 1024 * 1024
_GPM_SLOTS = 64  # metric slots in a fake c_nvmlGpmMetricsGet_t (NVML has 477; we ask for < 20)


@dataclass(frozen=True, slots=True)
class Handle:
    index: int
    mig: int | None = None  # MIG device slot, for a MIG device handle


@dataclass(slots=True)
class Record:
    """A plain attribute bag, standing in for pynvml's ctypes structures."""

    fields: dict[str, Any]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.fields[name]
        except KeyError:
            raise AttributeError(name) from None


def _record(**values: Any) -> Record:
    return Record(values)


@dataclass(slots=True)
class GpmSample:
    taken_at: float | None = None
    gpu: int = -1
    gpu_instance: int | None = None  # taken by nvmlGpmMigSampleGet for this GPU instance
    freed: bool = False


@dataclass(slots=True)
class GpmMetric:
    metricId: int = 0
    nvmlReturn: int = 0
    value: float = 0.0


@dataclass(slots=True)
class GpmMetricsGet:
    version: int = 0
    numMetrics: int = 0
    sample1: Any = None
    sample2: Any = None
    metrics: list[GpmMetric] = field(
        default_factory=lambda: [GpmMetric() for _ in range(_GPM_SLOTS)])


@dataclass(slots=True, eq=False)  # identity: two empty sets are still two sets
class EventSet:
    gpus: set[int] = field(default_factory=set)
    events: queue.Queue[Record] = field(default_factory=queue.Queue)


class FakeNvml:
    """``gpu_count`` simulated H200s whose readings follow their :attr:`states`
    (:mod:`governor.exporters.gpu.simulated`). The GPUs ``mig`` names run in MIG mode, split
    into one MIG device per profile listed (:mod:`.miglayout`); what runs on such a GPU runs on
    its first MIG device, and its utilisation rates are not supported, as on a real one."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NoPermission = NVMLError_NoPermission
    NVMLError_NotFound = NVMLError_NotFound
    NVMLError_FunctionNotFound = NVMLError_FunctionNotFound
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    c_nvmlGpmMetricsGet_t = GpmMetricsGet

    def __init__(
        self, gpu_count: int, *, clock: Callable[[], float] = time.monotonic, seed: int = 0,
        model: str = "NVIDIA H200 (simulated)", gpm: bool = True,
        mig: Mapping[int, Sequence[str]] | None = None,
        init_error: int | None = None, processes: dict[int, list[tuple[int, int]]] | None = None,
    ) -> None:
        self.gpu_count = gpu_count
        self.clock = clock
        self.seed = seed
        self.model = model
        self.gpm = gpm
        self.mig = {gpu: tuple(profiles) for gpu, profiles in (mig or {}).items()}
        self.init_error = init_error
        self.calls: Counter[str] = Counter()
        self.ecc = {i: [0, 0] for i in range(gpu_count)}  # corrected, uncorrected
        self.lost: set[int] = set()
        self._processes = processes
        self._failures: dict[tuple[str, int | None], int] = {}
        self._field_failures: dict[tuple[int, int], int] = {}
        self._gpm_failures: dict[tuple[int, int], int] = {}
        self._event_sets: list[EventSet] = []
        # Replaced whole by --follow's poller (another thread): one state per GPU.
        self.states: tuple[sim.GpuState, ...] = (sim.IDLE,) * gpu_count
        self._energy_mj = [0.0] * gpu_count
        self._pcie = [[0.0, 0.0] for _ in range(gpu_count)]
        self._slowdown_ns = [dict.fromkeys(_SLOWDOWN_FIELDS, 0.0) for _ in range(gpu_count)]
        self._integrated_at = [clock()] * gpu_count
        self._lock = threading.Lock()

    # ---- what tests and demos control ---------------------------------------------------------

    def fail(self, function: str, code: int, *, gpu: int | None = None) -> None:
        """Make ``function`` (for one GPU, or all) raise the NVML error ``code`` until healed."""
        self._failures[(function, gpu)] = code

    def heal(self, function: str, *, gpu: int | None = None) -> None:
        self._failures.pop((function, gpu), None)

    def fail_field(self, gpu: int, field_id: int, code: int) -> None:
        """Make one field of ``nvmlDeviceGetFieldValues`` answer ``nvmlReturn=code``."""
        self._field_failures[(gpu, field_id)] = code

    def fail_gpm_metric(self, gpu: int, metric_id: int, code: int) -> None:
        self._gpm_failures[(gpu, metric_id)] = code

    def lose(self, gpu: int) -> None:
        """Every call about this GPU raises NVML_ERROR_GPU_IS_LOST until :meth:`recover`."""
        self.lost.add(gpu)

    def recover(self, gpu: int) -> None:
        self.lost.discard(gpu)

    def inject_xid(self, gpu: int, xid: int) -> None:
        """Deliver a critical XID event to every event set that registered this GPU."""
        event = _record(device=Handle(gpu), eventType=nv.EVENT_XID_CRITICAL_ERROR, eventData=xid,
                        gpuInstanceId=0, computeInstanceId=0)
        for event_set in self._event_sets:
            if gpu in event_set.gpus:
                event_set.events.put(event)

    def state(self, gpu: int) -> sim.GpuState:
        return self.states[gpu]

    def uuid(self, index: int) -> str:
        """GPU ``index``'s UUID (what a simulated engine names to run on it)."""
        return fake_gpu_uuid(index, self.seed)

    # ---- plumbing -------------------------------------------------------------------------------

    def _enter(self, function: str, handle: Handle | None = None) -> None:
        with self._lock:
            self.calls[function] += 1
        gpu = handle.index if handle is not None else None
        if gpu is not None and gpu in self.lost:
            raise NVMLError(nv.ERROR_GPU_IS_LOST)
        code = self._failures.get((function, gpu), self._failures.get((function, None)))
        if code is not None:
            raise NVMLError(code)

    def _integrate(self, gpu: int) -> None:
        """Advance the energy, PCIe byte and slowdown counters to now, at the state now
        (counters only ever grow)."""
        now = self.clock()
        elapsed = max(0.0, now - self._integrated_at[gpu])
        if elapsed:
            state = self.state(gpu)
            self._energy_mj[gpu] += sim.power_watts(state) * elapsed * 1000.0
            tx, rx = sim.pcie_rates_bytes(state)
            self._pcie[gpu][0] += tx * elapsed
            self._pcie[gpu][1] += rx * elapsed
            held = self._slowdown_ns[gpu]
            for field_id, reason in _SLOWDOWN_FIELDS.items():
                if reason in state.faults.clock_reasons:
                    held[field_id] += elapsed * 1e9
            self._integrated_at[gpu] = now

    # ---- the pynvml functions the exporter calls ------------------------------------------------

    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return "580.159.04-sim"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion")
        return 13000

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return self.gpu_count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Handle:
        handle = Handle(index)
        self._enter("nvmlDeviceGetHandleByIndex", handle)
        if not 0 <= index < self.gpu_count:
            raise NVMLError(nv.ERROR_NOT_FOUND)
        return handle

    def nvmlDeviceGetIndex(self, handle: Handle) -> int:
        self._enter("nvmlDeviceGetIndex", handle)
        return handle.index

    def nvmlDeviceGetName(self, handle: Handle) -> str:
        self._enter("nvmlDeviceGetName", handle)
        if handle.mig is not None:
            return f"{self.model} MIG {self._profile(handle)}"
        return self.model

    def nvmlDeviceGetUUID(self, handle: Handle) -> str:
        self._enter("nvmlDeviceGetUUID", handle)
        gpu = fake_gpu_uuid(handle.index, self.seed)
        if handle.mig is None:
            return gpu
        return f"MIG-{uuid.UUID(int=uuid.UUID(gpu[4:]).int + handle.mig)}"

    def nvmlDeviceGetPciInfo(self, handle: Handle) -> Record:
        self._enter("nvmlDeviceGetPciInfo", handle)
        return _record(busId=f"00000000:{0x18 + 0x10 * handle.index:02X}:00.0")

    def nvmlDeviceGetUtilizationRates(self, handle: Handle) -> Record:
        self._enter("nvmlDeviceGetUtilizationRates", handle)
        if handle.index in self.mig:  # NVML defines no utilisation rates under MIG
            raise NVMLError(nv.ERROR_NOT_SUPPORTED)
        state = self.state(handle.index)
        return _record(gpu=round(100 * sim.sm_active(state)), memory=round(100 * state.dram))

    def nvmlDeviceGetMemoryInfo(self, handle: Handle, version: int | None = None) -> Record:
        self._enter("nvmlDeviceGetMemoryInfo", handle)
        if handle.mig is not None:
            return self._mig_memory(handle)
        used = sim.memory_used_bytes(self.state(handle.index))
        free = sim.MEMORY_TOTAL_BYTES - used - sim.MEMORY_RESERVED_BYTES
        if version is None:
            return _record(total=sim.MEMORY_TOTAL_BYTES, used=used, free=free)
        return _record(version=version, total=sim.MEMORY_TOTAL_BYTES, used=used, free=free,
                       reserved=sim.MEMORY_RESERVED_BYTES)

    def _profile(self, handle: Handle) -> str:
        return self.mig[handle.index][handle.mig or 0]

    def _mig_memory(self, handle: Handle) -> Record:
        """Its share of the memory, whole MiB; the GPU's engine (and co-tenant, and leaks) hold
        theirs on the first instance."""
        mib = 1024 * 1024
        total = int(sim.MEMORY_TOTAL_BYTES * memory_share(self._profile(handle))) // mib * mib
        held = sim.memory_used_bytes(self.state(handle.index)) if handle.mig == 0 else 0
        used = min(total, _MIG_EMPTY_USED_BYTES + held)
        return _record(total=total, used=used, free=total - used)

    def nvmlDeviceGetBAR1MemoryInfo(self, handle: Handle) -> Record:
        self._enter("nvmlDeviceGetBAR1MemoryInfo", handle)
        used = 42 * 1024 * 1024
        return _record(bar1Total=sim.BAR1_TOTAL_BYTES, bar1Used=used,
                       bar1Free=sim.BAR1_TOTAL_BYTES - used)

    def nvmlDeviceGetClockInfo(self, handle: Handle, clock_type: int) -> int:
        self._enter("nvmlDeviceGetClockInfo", handle)
        if clock_type == nv.CLOCK_MEM:
            return sim.MEMORY_CLOCK_MHZ
        return sim.sm_clock_mhz(self.state(handle.index))

    def nvmlDeviceGetPowerUsage(self, handle: Handle) -> int:
        self._enter("nvmlDeviceGetPowerUsage", handle)
        return round(1000 * sim.power_watts(self.state(handle.index)))

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Handle) -> int:
        self._enter("nvmlDeviceGetEnforcedPowerLimit", handle)
        return round(1000 * sim.power_limit_watts(self.state(handle.index)))

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: Handle) -> int:
        self._enter("nvmlDeviceGetPowerManagementDefaultLimit", handle)
        return round(1000 * sim.POWER_MAX_W)

    def nvmlDeviceGetTemperature(self, handle: Handle, sensor: int) -> int:
        self._enter("nvmlDeviceGetTemperature", handle)
        return round(self.state(handle.index).temperature_c)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Handle) -> int:
        self._enter("nvmlDeviceGetCurrentClocksEventReasons", handle)
        return sim.clock_event_reasons(self.state(handle.index))

    def nvmlDeviceGetFieldValues(self, handle: Handle, field_ids: list[int]) -> list[Record]:
        self._enter("nvmlDeviceGetFieldValues", handle)
        self._integrate(handle.index)
        return [self._field(handle.index, field_id) for field_id in field_ids]

    def _field(self, gpu: int, field_id: int) -> Record:
        failure = self._field_failures.get((gpu, field_id))
        value_type = _FIELD_TYPES.get(
            field_id, nv.VALUE_ULONGLONG if field_id in _READ_FIELDS else None)
        if failure is not None or value_type is None:
            code = failure if failure is not None else nv.ERROR_NOT_SUPPORTED
            return _record(fieldId=field_id, scopeId=0, timestamp=0, latencyUsec=0,
                           valueType=nv.VALUE_UINT, nvmlReturn=code, value=_union(0))
        state = self.state(gpu)
        readings = {
            82: round(state.memory_temperature_c),
            94: 0, 5: self.ecc[gpu][0], 6: self.ecc[gpu][1] + state.ecc_uncorrected,
            83: int(self._energy_mj[gpu]),
            197: int(self._pcie[gpu][0]), 198: int(self._pcie[gpu][1]),
            142: 0, 143: 0, 144: 0, 145: 0,
            **{field: int(ns) for field, ns in self._slowdown_ns[gpu].items()},
        }
        return _record(fieldId=field_id, scopeId=0, timestamp=int(self.clock() * 1e6),
                       latencyUsec=3, valueType=value_type, nvmlReturn=nv.SUCCESS,
                       value=_union(readings.get(field_id, 0)))

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Handle) -> list[Record]:
        self._enter("nvmlDeviceGetComputeRunningProcesses", handle)
        return [_record(pid=pid, usedGpuMemory=used, gpuInstanceId=0xFFFFFFFF,
                        computeInstanceId=0xFFFFFFFF)
                for pid, used, _, _ in self._running(handle.index)]

    def nvmlDeviceGetProcessUtilization(self, handle: Handle, since: int) -> list[Record]:
        """One sample per running process, stamped now (µs); NotFound when none is newer than
        ``since``, as NVML answers."""
        self._enter("nvmlDeviceGetProcessUtilization", handle)
        stamp = int(self.clock() * 1e6)
        running = self._running(handle.index)
        if not running or stamp <= since:
            raise NVMLError(nv.ERROR_NOT_FOUND)
        return [_record(pid=pid, timeStamp=stamp, smUtil=round(100 * sm),
                        memUtil=round(100 * dram), encUtil=0, decUtil=0)
                for pid, _, sm, dram in running]

    def _running(self, gpu: int) -> list[tuple[int, int, float, float]]:
        """(pid, memory, SM share, DRAM share) of the processes on ``gpu``."""
        if self._processes is not None:
            return [(pid, used, 0.0, 0.0) for pid, used in self._processes.get(gpu, [])]
        return sim.processes(self.state(gpu), gpu)

    def nvmlDeviceGetMigMode(self, handle: Handle) -> list[int]:
        self._enter("nvmlDeviceGetMigMode", handle)
        mode = 1 if handle.index in self.mig else 0
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Handle) -> int:
        self._enter("nvmlDeviceGetMaxMigDeviceCount", handle)
        return _MIG_SLOTS

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Handle, index: int) -> Handle:
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex", handle)
        if not 0 <= index < len(self.mig.get(handle.index, ())):
            raise NVMLError(nv.ERROR_NOT_FOUND)
        return Handle(handle.index, mig=index)

    def nvmlDeviceGetGpuInstanceId(self, handle: Handle) -> int:
        self._enter("nvmlDeviceGetGpuInstanceId", handle)
        return 1 + (handle.mig or 0)

    def nvmlDeviceGetComputeInstanceId(self, handle: Handle) -> int:
        self._enter("nvmlDeviceGetComputeInstanceId", handle)
        return 0

    # ---- GPM ------------------------------------------------------------------------------------

    def nvmlGpmQueryDeviceSupport(self, handle: Handle) -> Record:
        self._enter("nvmlGpmQueryDeviceSupport", handle)
        return _record(version=1, isSupportedDevice=1 if self.gpm else 0)

    def nvmlGpmSampleAlloc(self) -> GpmSample:
        self._enter("nvmlGpmSampleAlloc")
        return GpmSample()

    def nvmlGpmSampleFree(self, sample: GpmSample) -> None:
        self._enter("nvmlGpmSampleFree")
        sample.freed = True

    def nvmlGpmSampleGet(self, handle: Handle, sample: GpmSample) -> GpmSample:
        self._enter("nvmlGpmSampleGet", handle)
        sample.taken_at, sample.gpu, sample.gpu_instance = self.clock(), handle.index, None
        return sample

    def nvmlGpmMigSampleGet(
        self, handle: Handle, gpu_instance_id: int, sample: GpmSample
    ) -> GpmSample:
        self._enter("nvmlGpmMigSampleGet", handle)
        sample.taken_at, sample.gpu = self.clock(), handle.index
        sample.gpu_instance = gpu_instance_id
        return sample

    def nvmlGpmMetricsGet(self, request: GpmMetricsGet) -> GpmMetricsGet:
        self._enter("nvmlGpmMetricsGet")
        first, second = request.sample1, request.sample2
        if first.taken_at is None or second.taken_at is None or first.freed or second.freed:
            raise NVMLError(nv.ERROR_UNKNOWN)
        # Under MIG, what runs on the GPU runs in its first GPU instance (id 1); the others idle.
        state = self.state(first.gpu) if first.gpu_instance in (None, 1) else sim.IDLE
        for slot in request.metrics[: request.numMetrics]:
            slot.nvmlReturn = self._gpm_failures.get((first.gpu, slot.metricId), nv.SUCCESS)
            slot.value = (sim.gpm_percent(slot.metricId, state)
                          if slot.nvmlReturn == nv.SUCCESS else 0.0)
        return request

    # ---- XID events -----------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> EventSet:
        self._enter("nvmlEventSetCreate")
        event_set = EventSet()
        self._event_sets.append(event_set)
        return event_set

    def nvmlDeviceRegisterEvents(
        self, handle: Handle, event_types: int, event_set: EventSet
    ) -> None:
        self._enter("nvmlDeviceRegisterEvents", handle)
        event_set.gpus.add(handle.index)

    def nvmlEventSetWait_v2(self, event_set: EventSet, timeout_ms: int) -> Record:
        self._enter("nvmlEventSetWait_v2")
        try:
            return event_set.events.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise NVMLError(nv.ERROR_TIMEOUT) from None

    def nvmlEventSetFree(self, event_set: EventSet) -> None:
        self._enter("nvmlEventSetFree")
        if event_set in self._event_sets:
            self._event_sets.remove(event_set)


def _union(number: int | float) -> Record:
    """An nvmlValue_t: every member holds the number, as a C union read through any member."""
    return _record(dVal=float(number), uiVal=int(number), ulVal=int(number), ullVal=int(number),
                   sllVal=int(number), siVal=int(number), usVal=int(number))
