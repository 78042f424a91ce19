"""Batched reads with ``nvmlDeviceGetFieldValues``: one driver call for several counters.

The call returns SUCCESS when *any* value was populated, so every element's ``nvmlReturn`` is
checked. Costs of one field read alone, once a second, on an H200
(lab/gpu/exporter_h200.py): energy 3.3 ms, HW-thermal and power-brake slowdown 0.98 and
0.66 ms, PCIe replays 0.24 ms, PCIe byte counters 0.17 ms each: those sit in the slow batch. The
fast batch (memory temperature, ECC totals) costs 12 us.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from governor.contracts.metrics import gpu as m
from governor.exporters.gpu import nvml as nv
from governor.exporters.gpu.calls import CallGuard, GpuLost
from governor.exporters.gpu.readings import Labels, Sample

NANO: float = 1e-9


@dataclass(frozen=True, slots=True)
class FieldSpec:
    field_id: int
    metric: m.GpuMetric
    scale: float = 1.0
    labels: Labels = ()

    @property
    def name(self) -> str:
        """The key under which this field's errors are counted and disabled."""
        return f"field_{self.field_id}"

    def sample(self, value: float) -> Sample:
        return Sample(self.metric.name, value * self.scale, self.labels)


FAST: tuple[FieldSpec, ...] = (
    FieldSpec(82, m.MEMORY_TEMPERATURE),  # NVML_FI_DEV_MEMORY_TEMP, °C
    FieldSpec(5, m.ECC_CORRECTED_ERRORS),  # NVML_FI_DEV_ECC_SBE_AGG_TOTAL (lifetime)
    FieldSpec(6, m.ECC_UNCORRECTED_ERRORS),  # NVML_FI_DEV_ECC_DBE_AGG_TOTAL (lifetime)
)

SLOW: tuple[FieldSpec, ...] = (
    FieldSpec(83, m.ENERGY, 1e-3),  # NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, mJ
    FieldSpec(94, m.PCIE_REPLAYS),  # NVML_FI_DEV_PCIE_REPLAY_COUNTER
    FieldSpec(197, m.PCIE_TRANSMITTED),  # NVML_FI_DEV_PCIE_COUNT_TX_BYTES
    FieldSpec(198, m.PCIE_RECEIVED),  # NVML_FI_DEV_PCIE_COUNT_RX_BYTES
    FieldSpec(142, m.REMAPPED_ROWS_CORRECTABLE),  # NVML_FI_DEV_REMAPPED_COR
    FieldSpec(143, m.REMAPPED_ROWS_UNCORRECTABLE),  # NVML_FI_DEV_REMAPPED_UNC
    FieldSpec(144, m.REMAPPED_ROWS_PENDING),  # NVML_FI_DEV_REMAPPED_PENDING, 0/1
    FieldSpec(145, m.REMAPPED_ROWS_FAILURE),  # NVML_FI_DEV_REMAPPED_FAILURE, 0/1
    # NVML_FI_DEV_CLOCKS_EVENT_REASON_*_SLOWDOWN: time spent in each reason, ns.
    FieldSpec(269, m.CLOCK_EVENT_DURATION, NANO, ((m.LABEL_REASON, m.REASON_SW_THERMAL),)),
    FieldSpec(270, m.CLOCK_EVENT_DURATION, NANO, ((m.LABEL_REASON, m.REASON_HW_THERMAL),)),
    FieldSpec(271, m.CLOCK_EVENT_DURATION, NANO, ((m.LABEL_REASON, m.REASON_HW_POWER_BRAKE),)),
)

_UNION_MEMBER: dict[int, str] = {
    nv.VALUE_DOUBLE: "dVal",
    nv.VALUE_UINT: "uiVal",
    nv.VALUE_ULONG: "ulVal",
    nv.VALUE_ULONGLONG: "ullVal",
    nv.VALUE_SLONGLONG: "sllVal",
    nv.VALUE_SINT: "siVal",
    nv.VALUE_USHORT: "usVal",
}


def decode(value_type: int, value: Any) -> float | None:
    """The number in an ``nvmlValue_t`` union, read through the member ``value_type`` names."""
    member = _UNION_MEMBER.get(value_type)
    if member is None:
        return None
    return float(getattr(value, member))


def read_fields(
    nvml: nv.NvmlApi, handle: Any, guard: CallGuard, specs: Sequence[FieldSpec],
    *, call_name: str,
) -> list[Sample]:
    """One ``nvmlDeviceGetFieldValues`` for the specs still enabled; failing fields are counted."""
    active = [spec for spec in specs if spec.name not in guard.disabled]
    if not active:
        return []
    ids = [spec.field_id for spec in active]
    values = guard(call_name, _call(nvml, handle, ids))
    if values is None:
        return []
    samples: list[Sample] = []
    for spec, value in zip(active, values, strict=False):
        if value.nvmlReturn == nv.ERROR_GPU_IS_LOST:
            guard.failed(spec.name, value.nvmlReturn, "GPU is lost")
            raise GpuLost(spec.name)
        if value.nvmlReturn != nv.SUCCESS:
            guard.failed(spec.name, value.nvmlReturn, f"nvmlReturn {value.nvmlReturn}")
            continue
        number = decode(value.valueType, value.value)
        if number is None:
            guard.failed(spec.name, None, f"unknown value type {value.valueType}")
            continue
        samples.append(spec.sample(number))
    return samples


def _call(nvml: nv.NvmlApi, handle: Any, ids: list[int]) -> Callable[[], Any]:
    return lambda: nvml.nvmlDeviceGetFieldValues(handle, ids)
