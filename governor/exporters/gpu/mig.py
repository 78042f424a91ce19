"""MIG devices of a GPU whose MIG mode is on: identity, memory and per-instance GPM ratios.

The topology (which GPU and compute instances exist) is re-read at the slow cadence; memory is
read every round. Utilisation rates are not defined per MIG device in NVML, which is why the
per-instance activity comes from GPM (``nvmlGpmMigSampleGet`` on the parent GPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from governor.contracts.metrics import gpu as m
from governor.exporters.gpu import nvml as nv
from governor.exporters.gpu.calls import CallGuard
from governor.exporters.gpu.readings import Labels, Sample


@dataclass(frozen=True, slots=True)
class MigDevice:
    handle: Any
    uuid: str
    profile: str  # the MIG device's name, e.g. "NVIDIA H200 MIG 1g.18gb"
    gpu_instance: int
    compute_instance: int

    @property
    def labels(self) -> Labels:
        return (
            (m.LABEL_GPU_INSTANCE, str(self.gpu_instance)),
            (m.LABEL_COMPUTE_INSTANCE, str(self.compute_instance)),
        )


def mig_enabled(nvml: nv.NvmlApi, handle: Any, guard: CallGuard) -> bool | None:
    """True/False for the current MIG mode; None when the GPU has no MIG (asked once)."""
    modes = guard("mig_mode", lambda: nvml.nvmlDeviceGetMigMode(handle))
    if modes is None:
        return None
    return int(modes[0]) == nv.DEVICE_MIG_ENABLE


def discover(nvml: nv.NvmlApi, handle: Any, guard: CallGuard) -> tuple[MigDevice, ...]:
    """The MIG devices that exist now; empty slots answer NOT_FOUND and are skipped quietly."""
    count = guard("mig_count", lambda: nvml.nvmlDeviceGetMaxMigDeviceCount(handle))
    devices = []
    for index in range(count or 0):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
        except nvml.NVMLError as exc:
            if nv.error_code(exc) != nv.ERROR_NOT_FOUND:
                guard.failed("mig_handle", nv.error_code(exc), str(exc))
            continue
        device = _describe(nvml, mig, guard)
        if device is not None:
            devices.append(device)
    return tuple(devices)


def _describe(nvml: nv.NvmlApi, mig: Any, guard: CallGuard) -> MigDevice | None:
    uuid = guard("mig_uuid", partial(nvml.nvmlDeviceGetUUID, mig))
    name = guard("mig_name", partial(nvml.nvmlDeviceGetName, mig))
    gi = guard("mig_gpu_instance", partial(nvml.nvmlDeviceGetGpuInstanceId, mig))
    ci = guard("mig_compute_instance", partial(nvml.nvmlDeviceGetComputeInstanceId, mig))
    if uuid is None or gi is None or ci is None:
        return None
    return MigDevice(mig, nv.text(uuid), nv.text(name or ""), int(gi), int(ci))


def info_samples(devices: tuple[MigDevice, ...]) -> list[Sample]:
    return [
        Sample(
            m.MIG_INFO.name, 1.0,
            ((m.LABEL_MIG_UUID, d.uuid), (m.LABEL_MIG_PROFILE, d.profile), *d.labels),
        )
        for d in devices
    ]


def memory_samples(
    nvml: nv.NvmlApi, devices: tuple[MigDevice, ...], guard: CallGuard
) -> list[Sample]:
    samples = []
    for device in devices:
        memory = guard("mig_memory", partial(nvml.nvmlDeviceGetMemoryInfo, device.handle))
        if memory is not None:
            samples.append(Sample(m.MIG_MEMORY_TOTAL.name, float(memory.total), device.labels))
            samples.append(Sample(m.MIG_MEMORY_USED.name, float(memory.used), device.labels))
    return samples
