"""The NVML boundary: the calls the exporter makes, the constants it needs, how errors are named.

The sampler is handed an object with this interface: the ``pynvml`` module of ``nvidia-ml-py``
in production, :class:`governor.exporters.gpu.fake.FakeNvml` in tests and demos. Everything after
this boundary is the same code for both. Constants are NVML's ABI values, written here once (a test
checks them against ``pynvml``) so that a fake needs to provide functions only.
"""

from __future__ import annotations

from typing import Any, Final, Protocol

from governor.contracts.metrics import gpu as m
from governor.contracts.package import install_hint

# nvmlReturn_t values (nvml.h).
SUCCESS: Final = 0
ERROR_NOT_SUPPORTED: Final = 3
ERROR_NO_PERMISSION: Final = 4
ERROR_NOT_FOUND: Final = 6
ERROR_DRIVER_NOT_LOADED: Final = 9
ERROR_TIMEOUT: Final = 10
ERROR_LIBRARY_NOT_FOUND: Final = 12
ERROR_FUNCTION_NOT_FOUND: Final = 13
ERROR_GPU_IS_LOST: Final = 15
ERROR_ARGUMENT_VERSION_MISMATCH: Final = 25
ERROR_UNKNOWN: Final = 999

TEMPERATURE_GPU: Final = 0
CLOCK_GRAPHICS: Final = 0
CLOCK_SM: Final = 1
CLOCK_MEM: Final = 2
CLOCK_VIDEO: Final = 3
MEMORY_V2: Final = 0x02000028  # nvmlMemory_v2: versioned struct with the reserved field
EVENT_XID_CRITICAL_ERROR: Final = 0x8
DEVICE_MIG_ENABLE: Final = 1
GPM_METRICS_GET_VERSION: Final = 1

# nvmlValueType_t, for nvmlDeviceGetFieldValues.
VALUE_DOUBLE: Final = 0
VALUE_UINT: Final = 1
VALUE_ULONG: Final = 2
VALUE_ULONGLONG: Final = 3
VALUE_SLONGLONG: Final = 4
VALUE_SINT: Final = 5
VALUE_USHORT: Final = 6

# Codes that will not change while the process runs: the reading is dropped for that GPU after
# the first answer, so an unsupported field costs one call and one counted error, not one a tick.
PERMANENT_CODES: Final = frozenset({ERROR_NOT_SUPPORTED, ERROR_FUNCTION_NOT_FOUND})

_KIND_BY_CODE: Final = {
    ERROR_NOT_SUPPORTED: m.KIND_NOT_SUPPORTED,
    ERROR_FUNCTION_NOT_FOUND: m.KIND_FUNCTION_NOT_FOUND,
    ERROR_NOT_FOUND: m.KIND_NOT_FOUND,
    ERROR_NO_PERMISSION: m.KIND_NO_PERMISSION,
    ERROR_GPU_IS_LOST: m.KIND_GPU_LOST,
    ERROR_DRIVER_NOT_LOADED: m.KIND_DRIVER_NOT_LOADED,
    ERROR_LIBRARY_NOT_FOUND: m.KIND_LIBRARY_NOT_FOUND,
    ERROR_TIMEOUT: m.KIND_TIMEOUT,
}


def error_kind(code: int | None) -> str:
    """The ``kind`` label for an NVML return code."""
    return _KIND_BY_CODE.get(code, m.KIND_NVML_OTHER) if code is not None else m.KIND_NVML_OTHER


def error_code(exc: BaseException) -> int | None:
    """The return code an ``NVMLError`` carries (pynvml's and the fake's both use ``value``)."""
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


class NvmlApi(Protocol):
    """The subset of ``pynvml`` the exporter calls. Handles and results are NVML's own objects."""

    @property
    def NVMLError(self) -> type[Exception]: ...

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> Any: ...
    def nvmlSystemGetCudaDriverVersion(self) -> int: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetIndex(self, handle: Any) -> int: ...
    def nvmlDeviceGetName(self, handle: Any) -> Any: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> Any: ...
    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any: ...
    def nvmlDeviceGetBAR1MemoryInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetClockInfo(self, handle: Any, clock_type: int) -> int: ...
    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int: ...
    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int: ...
    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: Any) -> int: ...
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int: ...
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int: ...
    def nvmlDeviceGetFieldValues(self, handle: Any, field_ids: list[int]) -> Any: ...
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> Any: ...
    def nvmlDeviceGetProcessUtilization(self, handle: Any, timeStamp: int) -> Any: ...
    def nvmlDeviceGetMigMode(self, handle: Any) -> Any: ...
    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int: ...
    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> Any: ...
    def nvmlDeviceGetGpuInstanceId(self, handle: Any) -> int: ...
    def nvmlDeviceGetComputeInstanceId(self, handle: Any) -> int: ...
    def nvmlGpmQueryDeviceSupport(self, handle: Any) -> Any: ...
    def nvmlGpmSampleAlloc(self) -> Any: ...
    def nvmlGpmSampleFree(self, sample: Any) -> None: ...
    def nvmlGpmSampleGet(self, handle: Any, sample: Any) -> Any: ...
    def nvmlGpmMigSampleGet(self, handle: Any, gpu_instance_id: int, sample: Any) -> Any: ...
    def nvmlGpmMetricsGet(self, metrics_get: Any) -> Any: ...
    def c_nvmlGpmMetricsGet_t(self) -> Any: ...
    def nvmlEventSetCreate(self) -> Any: ...
    def nvmlDeviceRegisterEvents(self, handle: Any, event_types: int, event_set: Any) -> None: ...
    def nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int) -> Any: ...
    def nvmlEventSetFree(self, event_set: Any) -> None: ...


class NvmlUnavailable(Exception):
    """NVML cannot be used at all; the message says why in words a user can act on."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def import_pynvml() -> NvmlApi:
    """The real NVML bindings, or :class:`NvmlUnavailable` when ``nvidia-ml-py`` is missing."""
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlUnavailable(
            f"the nvidia-ml-py package is not installed ({install_hint('gpu')}); "
            "use --fake-gpus N for simulated GPUs",
            m.KIND_LIBRARY_NOT_FOUND,
        ) from exc
    api: NvmlApi = pynvml
    return api


def init_failure_message(exc: BaseException) -> NvmlUnavailable:
    """Turn an ``nvmlInit`` failure into the sentence the log and ``/health`` show."""
    code = error_code(exc)
    kind = error_kind(code)
    if code == ERROR_LIBRARY_NOT_FOUND:
        text = "no NVIDIA driver on this machine: libnvidia-ml.so.1 was not found"
    elif code == ERROR_DRIVER_NOT_LOADED:
        text = "the NVIDIA driver is not loaded (is there an NVIDIA GPU, and is the module loaded?)"
    elif code == ERROR_NO_PERMISSION:
        text = "no permission to open the NVIDIA devices (/dev/nvidia*)"
    else:
        text = f"NVML failed to initialise: {exc}"
    return NvmlUnavailable(text, kind)


def text(value: Any) -> str:
    """NVML strings arrive as ``str`` from pynvml and sometimes as ``bytes`` from raw structs."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)
