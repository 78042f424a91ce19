"""Every per-GPU metric: its type, help text, extra labels, NVML source and DCGM counterpart.

The collector takes type and help from here; the README's metric table is printed from here
(``python -m governor.exporters.gpu.catalog``), so the documentation cannot drift from the code.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Literal

from governor.exporters.gpu import metric_names as m

Kind = Literal["gauge", "counter", "info"]
FAST, SLOW, EVENT = "interval", "slow", "event"


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str  # as in metric_names: counters without _total
    kind: Kind
    help: str
    nvml: str
    dcgm: str = ""  # the dcgm-exporter field (DCGM_FI_…) with the same meaning, "" for none
    labels: tuple[str, ...] = ()  # beyond gpu, uuid, model
    cadence: str = FAST


def _s(*specs: MetricSpec) -> dict[str, MetricSpec]:
    return {spec.name: spec for spec in specs}


_REASON, _PIPE = (m.LABEL_REASON,), (m.LABEL_PIPE,)
_MIG = (m.LABEL_GPU_INSTANCE, m.LABEL_COMPUTE_INSTANCE)

PER_GPU: dict[str, MetricSpec] = _s(
    MetricSpec(m.UTILIZATION, "gauge", "Fraction of the last sample period with a kernel running.",
               "nvmlDeviceGetUtilizationRates().gpu", "DEV_GPU_UTIL"),
    MetricSpec(m.MEMORY_UTILIZATION, "gauge",
               "Fraction of the last sample period the memory controller was busy.",
               "nvmlDeviceGetUtilizationRates().memory", "DEV_MEM_COPY_UTIL"),
    MetricSpec(m.GRAPHICS_ENGINE_ACTIVE, "gauge",
               "Fraction of time the graphics/compute engine was active.",
               "GPM GRAPHICS_UTIL (1)", "PROF_GR_ENGINE_ACTIVE", cadence=SLOW),
    MetricSpec(m.SM_ACTIVE, "gauge", "Fraction of SMs busy, averaged over the interval.",
               "GPM SM_UTIL (2)", "PROF_SM_ACTIVE"),
    MetricSpec(m.SM_OCCUPANCY, "gauge", "Resident warps as a fraction of the SMs' maximum.",
               "GPM SM_OCCUPANCY (3)", "PROF_SM_OCCUPANCY"),
    MetricSpec(m.TENSOR_ACTIVE, "gauge", "Fraction of time any tensor pipe was active.",
               "GPM ANY_TENSOR_UTIL (5)", "PROF_PIPE_TENSOR_ACTIVE"),
    MetricSpec(m.TENSOR_PIPE_ACTIVE, "gauge",
               "Fraction of time one tensor pipe (hmma, imma, dfma, dmma) was active.",
               "GPM HMMA/IMMA/DFMA/DMMA_TENSOR_UTIL (7, 9, 6, 8)",
               "PROF_PIPE_TENSOR_HMMA/IMMA/DFMA_ACTIVE", _PIPE, SLOW),
    MetricSpec(m.FP_PIPE_ACTIVE, "gauge",
               "Fraction of time non-tensor FP16, FP32 or FP64 math was active.",
               "GPM FP16/FP32/FP64_UTIL (13, 12, 11)", "PROF_PIPE_FP16/FP32/FP64_ACTIVE",
               _PIPE, SLOW),
    MetricSpec(m.DRAM_BANDWIDTH_UTILIZATION, "gauge",
               "DRAM bandwidth used as a fraction of the maximum.",
               "GPM DRAM_BW_UTIL (10)", "PROF_DRAM_ACTIVE"),
    MetricSpec(m.PCIE_TRANSMIT_RATE, "gauge", "PCIe bytes per second sent by the GPU.",
               "GPM PCIE_TX_PER_SEC (20)", "PROF_PCIE_TX_BYTES"),
    MetricSpec(m.PCIE_RECEIVE_RATE, "gauge", "PCIe bytes per second received by the GPU.",
               "GPM PCIE_RX_PER_SEC (21)", "PROF_PCIE_RX_BYTES"),
    MetricSpec(m.NVLINK_TRANSMIT_RATE, "gauge", "NVLink bytes per second sent, all links.",
               "GPM NVLINK_TOTAL_TX_PER_SEC (61)", "PROF_NVLINK_TX_BYTES", cadence=SLOW),
    MetricSpec(m.NVLINK_RECEIVE_RATE, "gauge", "NVLink bytes per second received, all links.",
               "GPM NVLINK_TOTAL_RX_PER_SEC (60)", "PROF_NVLINK_RX_BYTES", cadence=SLOW),
    MetricSpec(m.PCIE_TRANSMITTED, "counter", "PCIe bytes sent by the GPU.",
               "field 197 PCIE_COUNT_TX_BYTES", cadence=SLOW),
    MetricSpec(m.PCIE_RECEIVED, "counter", "PCIe bytes received by the GPU.",
               "field 198 PCIE_COUNT_RX_BYTES", cadence=SLOW),
    MetricSpec(m.PCIE_REPLAYS, "counter", "PCIe link replays (retransmissions).",
               "field 94 PCIE_REPLAY_COUNTER", "DEV_PCIE_REPLAY_COUNTER", cadence=SLOW),
    MetricSpec(m.MEMORY_TOTAL, "gauge", "Frame buffer size.", "nvmlDeviceGetMemoryInfo_v2().total",
               "DEV_FB_TOTAL"),
    MetricSpec(m.MEMORY_USED, "gauge", "Frame buffer in use.", "nvmlDeviceGetMemoryInfo_v2().used",
               "DEV_FB_USED"),
    MetricSpec(m.MEMORY_FREE, "gauge", "Frame buffer free.", "nvmlDeviceGetMemoryInfo_v2().free",
               "DEV_FB_FREE"),
    MetricSpec(m.MEMORY_RESERVED, "gauge", "Frame buffer reserved by the driver.",
               "nvmlDeviceGetMemoryInfo_v2().reserved", "DEV_FB_RESERVED"),
    MetricSpec(m.BAR1_TOTAL, "gauge", "BAR1 aperture size.", "nvmlDeviceGetBAR1MemoryInfo()",
               "DEV_BAR1_TOTAL", cadence=SLOW),
    MetricSpec(m.BAR1_USED, "gauge", "BAR1 aperture in use.", "nvmlDeviceGetBAR1MemoryInfo()",
               "DEV_BAR1_USED", cadence=SLOW),
    MetricSpec(m.PROCESS_MEMORY_USED, "gauge", "GPU memory used by a process (host pid).",
               "nvmlDeviceGetComputeRunningProcesses()", "", (m.LABEL_PID, m.LABEL_CONTAINER)),
    MetricSpec(m.CLOCK, "gauge", "Current clock frequency (sm, memory, graphics).",
               "nvmlDeviceGetClockInfo()", "DEV_SM_CLOCK, DEV_MEM_CLOCK", (m.LABEL_CLOCK,),
               "interval (sm), slow (memory, graphics)"),
    MetricSpec(m.POWER, "gauge", "Power draw.", "nvmlDeviceGetPowerUsage()", "DEV_POWER_USAGE"),
    MetricSpec(m.POWER_LIMIT, "gauge", "Enforced power limit.", "nvmlDeviceGetEnforcedPowerLimit()",
               "DEV_ENFORCED_POWER_LIMIT", cadence=SLOW),
    MetricSpec(m.ENERGY, "counter", "Energy consumed since the driver loaded.",
               "field 83 TOTAL_ENERGY_CONSUMPTION", "DEV_TOTAL_ENERGY_CONSUMPTION", cadence=SLOW),
    MetricSpec(m.TEMPERATURE, "gauge", "GPU core temperature.", "nvmlDeviceGetTemperature(GPU)",
               "DEV_GPU_TEMP"),
    MetricSpec(m.MEMORY_TEMPERATURE, "gauge", "HBM temperature.", "field 82 MEMORY_TEMP",
               "DEV_MEMORY_TEMP"),
    MetricSpec(m.CLOCK_EVENT_ACTIVE, "gauge",
               "1 while this clock-event (throttle) reason holds clocks down.",
               "nvmlDeviceGetCurrentClocksEventReasons()", "DEV_CLOCK_THROTTLE_REASONS (bitmask)",
               _REASON),
    MetricSpec(m.CLOCK_EVENT_DURATION, "counter", "Time clocks were held down by this reason.",
               "fields 269-271 CLOCKS_EVENT_REASON_*_SLOWDOWN", "DEV_THERMAL_VIOLATION",
               _REASON, SLOW),
    MetricSpec(m.XID_ERRORS, "counter", "Critical XID errors by code.",
               "nvmlEventSetWait_v2 (XidCriticalError events)", "DEV_XID_ERRORS (last code, gauge)",
               (m.LABEL_XID,), EVENT),
    MetricSpec(m.ECC_CORRECTED_ERRORS, "counter", "Corrected ECC errors over the GPU's lifetime.",
               "field 5 ECC_SBE_AGG_TOTAL", "DEV_ECC_SBE_AGG_TOTAL"),
    MetricSpec(m.ECC_UNCORRECTED_ERRORS, "counter",
               "Uncorrected ECC errors over the GPU's lifetime.",
               "field 6 ECC_DBE_AGG_TOTAL", "DEV_ECC_DBE_AGG_TOTAL"),
    MetricSpec(m.REMAPPED_ROWS_CORRECTABLE, "counter", "Rows remapped after correctable errors.",
               "field 142 REMAPPED_COR", "DEV_CORRECTABLE_REMAPPED_ROWS", cadence=SLOW),
    MetricSpec(m.REMAPPED_ROWS_UNCORRECTABLE, "counter",
               "Rows remapped after uncorrectable errors.",
               "field 143 REMAPPED_UNC", "DEV_UNCORRECTABLE_REMAPPED_ROWS", cadence=SLOW),
    MetricSpec(m.REMAPPED_ROWS_PENDING, "gauge", "1 when a row remap waits for a GPU reset.",
               "field 144 REMAPPED_PENDING", "DEV_ROW_REMAP_PENDING", cadence=SLOW),
    MetricSpec(m.REMAPPED_ROWS_FAILURE, "gauge", "1 when a row remap has failed.",
               "field 145 REMAPPED_FAILURE", "DEV_ROW_REMAP_FAILURE", cadence=SLOW),
    MetricSpec(m.MIG_MODE, "gauge", "1 while MIG mode is on.", "nvmlDeviceGetMigMode()",
               cadence=SLOW),
    MetricSpec(m.MIG_INFO, "info", "A MIG device: its uuid, profile and instance ids.",
               "nvmlDeviceGetMigDeviceHandleByIndex()", "GPU_I_PROFILE, GPU_I_ID labels",
               (m.LABEL_MIG_UUID, m.LABEL_MIG_PROFILE, *_MIG), SLOW),
    MetricSpec(m.MIG_MEMORY_TOTAL, "gauge", "Memory of a MIG device.",
               "nvmlDeviceGetMemoryInfo(MIG handle)", "DEV_FB_TOTAL (per GPU_I_ID)", _MIG),
    MetricSpec(m.MIG_MEMORY_USED, "gauge", "Memory in use on a MIG device.",
               "nvmlDeviceGetMemoryInfo(MIG handle)", "DEV_FB_USED (per GPU_I_ID)", _MIG),
    MetricSpec(m.MIG_SM_ACTIVE, "gauge", "SM activity of a GPU instance.",
               "nvmlGpmMigSampleGet + SM_UTIL", "PROF_SM_ACTIVE (per GPU_I_ID)",
               (m.LABEL_GPU_INSTANCE,)),
    MetricSpec(m.MIG_TENSOR_ACTIVE, "gauge", "Tensor activity of a GPU instance.",
               "nvmlGpmMigSampleGet + ANY_TENSOR_UTIL", "PROF_PIPE_TENSOR_ACTIVE (per GPU_I_ID)",
               (m.LABEL_GPU_INSTANCE,)),
    MetricSpec(m.MIG_DRAM_BANDWIDTH_UTILIZATION, "gauge",
               "DRAM bandwidth utilisation of a GPU instance.",
               "nvmlGpmMigSampleGet + DRAM_BW_UTIL", "PROF_DRAM_ACTIVE (per GPU_I_ID)",
               (m.LABEL_GPU_INSTANCE,)),
)

# Families the collector writes itself (identity and health); listed for the README table.
OWN: dict[str, MetricSpec] = _s(
    MetricSpec(m.INFO, "info", "Identity: driver_version, cuda_version, pci_bus_id.",
               "nvmlDeviceGetName/UUID/PciInfo, nvmlSystemGetDriverVersion/CudaDriverVersion",
               "DRIVER_VERSION",
               (m.LABEL_DRIVER_VERSION, m.LABEL_CUDA_VERSION, m.LABEL_PCI_BUS_ID)),
    MetricSpec(m.UP, "gauge",
               "1 while the GPU answers NVML, 0 once it is lost or its readings are stale.",
               "every call (NVML_ERROR_GPU_IS_LOST)"),
    MetricSpec(m.EXPORTER_NVML_UP, "gauge",
               "1 when NVML initialised; 0 without a usable NVIDIA driver.",
               "nvmlInit()"),
    MetricSpec(m.EXPORTER_COLLECT_DURATION, "gauge",
               "Wall time of the last sampling round, all GPUs.",
               "—"),
    MetricSpec(m.EXPORTER_PHASE_DURATION, "gauge", "Wall time of each phase of the last round.",
               "—",
               labels=(m.LABEL_PHASE,)),
    MetricSpec(m.EXPORTER_CPU, "counter", "CPU time of the sampler thread.", "—"),
    MetricSpec(m.EXPORTER_COLLECTIONS, "counter", "Sampling rounds completed.", "—"),
    MetricSpec(m.EXPORTER_ERRORS, "counter", "NVML and sampler errors by kind.", "—",
               labels=(m.LABEL_KIND,)),
    MetricSpec(m.EXPORTER_LAST_SUCCESS, "gauge",
               "When a round last read at least one GPU (Unix time).",
               "—"),
    MetricSpec(m.EXPORTER_SNAPSHOT_AGE, "gauge", "Age of the readings being served.", "—"),
    MetricSpec(m.EXPORTER_BUILD_INFO, "info", "Exporter version and source (nvml or fake).", "—",
               labels=(m.LABEL_VERSION, m.LABEL_SOURCE)),
)


def markdown_table() -> str:
    """The README's metric table (``python -m governor.exporters.gpu.catalog``)."""
    rows = ["| metric | type | labels | NVML source | dcgm-exporter (`DCGM_FI_…`) | cadence |",
            "| --- | --- | --- | --- | --- | --- |"]
    for spec in (*OWN.values(), *PER_GPU.values()):
        exposed = f"{spec.name}_total" if spec.kind == "counter" else spec.name
        dcgm = spec.dcgm or "—"
        rows.append(f"| `{exposed}` | {spec.kind} | {', '.join(spec.labels) or '—'} | {spec.nvml} "
                    f"| {dcgm} | {spec.cadence} |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.stdout.write(markdown_table() + "\n")
