"""The GPU exporter's ``gpu_*`` series: the exporter's own health, each GPU's identity and readings.

Base units, ratios in 0-1. Every per-GPU series carries :data:`BASE_LABELS` (``gpu`` index,
``uuid``, ``model``) first. Besides what prometheus_client needs, each declaration documents where
its value comes from (the NVML call or field), its dcgm-exporter counterpart and how often it is
read; docs/exporter.md's table is printed from these (``python -m governor.exporters.gpu.catalog``).
:data:`PER_GPU` is in exposition order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from governor.contracts.declaration import Kind, Metric

# ---- label names ---------------------------------------------------------------------------------
LABEL_GPU: Final = "gpu"
LABEL_UUID: Final = "uuid"
LABEL_MODEL: Final = "model"
LABEL_REASON: Final = "reason"
LABEL_XID: Final = "xid"
LABEL_KIND: Final = "kind"
LABEL_CLOCK: Final = "clock"  # sm | memory | graphics | video
LABEL_PIPE: Final = "pipe"  # hmma | imma | dfma | dmma (tensor) ; fp16 | fp32 | fp64 (non-tensor)
LABEL_PID: Final = "pid"
LABEL_CONTAINER: Final = "container"  # container id from the process's cgroup, "" when none
LABEL_PHASE: Final = "phase"  # sampler phase, see PHASE_*
LABEL_DRIVER_VERSION: Final = "driver_version"
LABEL_CUDA_VERSION: Final = "cuda_version"
LABEL_PCI_BUS_ID: Final = "pci_bus_id"
LABEL_MIG_UUID: Final = "mig_uuid"
LABEL_MIG_PROFILE: Final = "mig_profile"
LABEL_GPU_INSTANCE: Final = "gpu_instance"
LABEL_COMPUTE_INSTANCE: Final = "compute_instance"
LABEL_SOURCE: Final = "source"  # nvml | fake
LABEL_VERSION: Final = "version"

BASE_LABELS: Final = (LABEL_GPU, LABEL_UUID, LABEL_MODEL)

# Values of ``reason`` (NVML clock-event reason bits).
REASON_GPU_IDLE: Final = "gpu_idle"
REASON_APPLICATIONS_CLOCKS: Final = "applications_clocks"
REASON_SW_POWER_CAP: Final = "sw_power_cap"
REASON_HW_SLOWDOWN: Final = "hw_slowdown"
REASON_SYNC_BOOST: Final = "sync_boost"
REASON_SW_THERMAL: Final = "sw_thermal"
REASON_HW_THERMAL: Final = "hw_thermal"
REASON_HW_POWER_BRAKE: Final = "hw_power_brake"
THERMAL_REASONS: Final = (REASON_SW_THERMAL, REASON_HW_THERMAL)
POWER_REASONS: Final = (REASON_SW_POWER_CAP, REASON_HW_POWER_BRAKE)

# Values of ``kind`` on the error counter. Every kind is exposed from the start (at 0) so that
# rate() and increase() see the first error.
KIND_NOT_SUPPORTED: Final = "not_supported"  # counted once per (GPU, reading); then not asked
KIND_FUNCTION_NOT_FOUND: Final = "function_not_found"  # driver too old for a call; counted once
KIND_NOT_FOUND: Final = "not_found"
KIND_NO_PERMISSION: Final = "no_permission"
KIND_GPU_LOST: Final = "gpu_lost"
KIND_DRIVER_NOT_LOADED: Final = "driver_not_loaded"
KIND_LIBRARY_NOT_FOUND: Final = "library_not_found"
KIND_TIMEOUT: Final = "timeout"
KIND_NVML_OTHER: Final = "nvml_other"  # any other NVML return code
KIND_SAMPLER: Final = "sampler"  # an unexpected exception inside a sampling round
ERROR_KINDS: Final = (
    KIND_NOT_SUPPORTED, KIND_FUNCTION_NOT_FOUND, KIND_NOT_FOUND, KIND_NO_PERMISSION,
    KIND_GPU_LOST, KIND_DRIVER_NOT_LOADED, KIND_LIBRARY_NOT_FOUND, KIND_TIMEOUT, KIND_NVML_OTHER,
    KIND_SAMPLER,
)

# Values of ``phase`` on the phase-duration gauge (wall time of the last round, all GPUs).
PHASE_CLASSIC: Final = "classic"  # one call per reading: utilisation, memory, clocks, power, …
PHASE_FIELDS: Final = "fields"  # nvmlDeviceGetFieldValues batches
PHASE_PROCESSES: Final = "processes"
PHASE_GPM: Final = "gpm"
PHASE_MIG: Final = "mig"
PHASE_SLOW: Final = "slow"  # energy, PCIe counters, remapped rows, BAR1, power limit
PHASES: Final = (PHASE_CLASSIC, PHASE_FIELDS, PHASE_PROCESSES, PHASE_GPM, PHASE_MIG, PHASE_SLOW)

# How often a value is read: every sampling round, every slow round, or as NVML reports it.
FAST: Final = "interval"
SLOW: Final = "slow"
EVENT: Final = "event"


@dataclass(frozen=True, slots=True)
class GpuMetric(Metric):
    """A ``gpu_*`` metric and where it comes from, for docs/exporter.md's table."""

    nvml: str = ""  # the NVML call or field the value is read from; "" for the exporter's own
    dcgm: str = ""  # the dcgm-exporter field (DCGM_FI_…) with the same meaning, "" for none
    cadence: str = FAST

    @property
    def extra_labels(self) -> tuple[str, ...]:
        """The labels beyond :data:`BASE_LABELS`, in order."""
        return tuple(label for label in self.labels if label not in BASE_LABELS)


def _per_gpu(name: str, kind: Kind, help: str, unit: str, nvml: str, dcgm: str = "",
             labels: tuple[str, ...] = (), cadence: str = FAST) -> GpuMetric:
    """A per-GPU metric: the base labels first, then its own."""
    return GpuMetric(name, kind, help, unit, (*BASE_LABELS, *labels), nvml=nvml, dcgm=dcgm,
                     cadence=cadence)


_REASON, _PIPE = (LABEL_REASON,), (LABEL_PIPE,)
_MIG = (LABEL_GPU_INSTANCE, LABEL_COMPUTE_INSTANCE)

# ---- health of the exporter itself, and each GPU's identity -----------------------------------
INFO: Final = _per_gpu(
    "gpu", "info", "Identity: driver_version, cuda_version, pci_bus_id.", "",
    "nvmlDeviceGetName/UUID/PciInfo, nvmlSystemGetDriverVersion/CudaDriverVersion",
    "DRIVER_VERSION", (LABEL_DRIVER_VERSION, LABEL_CUDA_VERSION, LABEL_PCI_BUS_ID))
# 1 while the GPU answers, 0 once lost; absent when there is no NVML at all.
UP: Final = _per_gpu(
    "gpu_up", "gauge",
    "1 while the GPU answers NVML, 0 once it is lost or its readings are stale.", "",
    "every call (NVML_ERROR_GPU_IS_LOST)")
EXPORTER_NVML_UP: Final = GpuMetric(
    "gpu_exporter_nvml_up", "gauge", "1 when NVML initialised; 0 without a usable NVIDIA driver.",
    nvml="nvmlInit()")
EXPORTER_COLLECT_DURATION: Final = GpuMetric(
    "gpu_exporter_collect_duration_seconds", "gauge",
    "Wall time of the last sampling round, all GPUs.", "seconds")
EXPORTER_PHASE_DURATION: Final = GpuMetric(
    "gpu_exporter_collect_phase_duration_seconds", "gauge",
    "Wall time of each phase of the last round.", "seconds", (LABEL_PHASE,))
EXPORTER_CPU: Final = GpuMetric(
    "gpu_exporter_collect_cpu_seconds", "counter", "CPU time of the sampler thread.", "seconds")
EXPORTER_COLLECTIONS: Final = GpuMetric(
    "gpu_exporter_collections", "counter", "Sampling rounds completed.", "rounds")
EXPORTER_ERRORS: Final = GpuMetric(
    "gpu_exporter_errors", "counter", "NVML and sampler errors by kind.", "errors", (LABEL_KIND,))
EXPORTER_LAST_SUCCESS: Final = GpuMetric(
    "gpu_exporter_last_success_timestamp_seconds", "gauge",
    "When a round last read at least one GPU (Unix time).", "seconds")
EXPORTER_SNAPSHOT_AGE: Final = GpuMetric(
    "gpu_exporter_snapshot_age_seconds", "gauge", "Age of the readings being served.", "seconds")
EXPORTER_BUILD_INFO: Final = GpuMetric(
    "gpu_exporter_build", "info", "Exporter version and source (nvml or fake).", "",
    (LABEL_VERSION, LABEL_SOURCE))

# The families the collector writes itself, in docs/exporter.md's order.
HEALTH: Final = (INFO, UP, EXPORTER_NVML_UP, EXPORTER_COLLECT_DURATION, EXPORTER_PHASE_DURATION,
                 EXPORTER_CPU, EXPORTER_COLLECTIONS, EXPORTER_ERRORS, EXPORTER_LAST_SUCCESS,
                 EXPORTER_SNAPSHOT_AGE, EXPORTER_BUILD_INFO)

# ---- activity ------------------------------------------------------------------------------------
UTILIZATION: Final = _per_gpu(
    "gpu_utilization_ratio", "gauge", "Fraction of the last sample period with a kernel running.",
    "ratio", "nvmlDeviceGetUtilizationRates().gpu", "DEV_GPU_UTIL")
MEMORY_UTILIZATION: Final = _per_gpu(
    "gpu_memory_controller_utilization_ratio", "gauge",
    "Fraction of the last sample period the memory controller was busy.", "ratio",
    "nvmlDeviceGetUtilizationRates().memory", "DEV_MEM_COPY_UTIL")
GRAPHICS_ENGINE_ACTIVE: Final = _per_gpu(
    "gpu_graphics_engine_active_ratio", "gauge",
    "Fraction of time the graphics/compute engine was active.", "ratio",
    "GPM GRAPHICS_UTIL (1)", "PROF_GR_ENGINE_ACTIVE", cadence=SLOW)
SM_ACTIVE: Final = _per_gpu(
    "gpu_sm_active_ratio", "gauge", "Fraction of SMs busy, averaged over the interval.", "ratio",
    "GPM SM_UTIL (2)", "PROF_SM_ACTIVE")
SM_OCCUPANCY: Final = _per_gpu(
    "gpu_sm_occupancy_ratio", "gauge", "Resident warps as a fraction of the SMs' maximum.",
    "ratio", "GPM SM_OCCUPANCY (3)", "PROF_SM_OCCUPANCY")
TENSOR_ACTIVE: Final = _per_gpu(
    "gpu_tensor_active_ratio", "gauge", "Fraction of time any tensor pipe was active.", "ratio",
    "GPM ANY_TENSOR_UTIL (5)", "PROF_PIPE_TENSOR_ACTIVE")
TENSOR_PIPE_ACTIVE: Final = _per_gpu(
    "gpu_tensor_pipe_active_ratio", "gauge",
    "Fraction of time one tensor pipe (hmma, imma, dfma, dmma) was active.", "ratio",
    "GPM HMMA/IMMA/DFMA/DMMA_TENSOR_UTIL (7, 9, 6, 8)", "PROF_PIPE_TENSOR_HMMA/IMMA/DFMA_ACTIVE",
    _PIPE, SLOW)
FP_PIPE_ACTIVE: Final = _per_gpu(
    "gpu_fp_pipe_active_ratio", "gauge",
    "Fraction of time non-tensor FP16, FP32 or FP64 math was active.", "ratio",
    "GPM FP16/FP32/FP64_UTIL (13, 12, 11)", "PROF_PIPE_FP16/FP32/FP64_ACTIVE", _PIPE, SLOW)
DRAM_BANDWIDTH_UTILIZATION: Final = _per_gpu(
    "gpu_dram_bandwidth_utilization_ratio", "gauge",
    "DRAM bandwidth used as a fraction of the maximum.", "ratio",
    "GPM DRAM_BW_UTIL (10)", "PROF_DRAM_ACTIVE")

# ---- interconnect --------------------------------------------------------------------------------
PCIE_TRANSMIT_RATE: Final = _per_gpu(
    "gpu_pcie_transmit_bytes_per_second", "gauge", "PCIe bytes per second sent by the GPU.",
    "bytes_per_second", "GPM PCIE_TX_PER_SEC (20)", "PROF_PCIE_TX_BYTES")
PCIE_RECEIVE_RATE: Final = _per_gpu(
    "gpu_pcie_receive_bytes_per_second", "gauge", "PCIe bytes per second received by the GPU.",
    "bytes_per_second", "GPM PCIE_RX_PER_SEC (21)", "PROF_PCIE_RX_BYTES")
NVLINK_TRANSMIT_RATE: Final = _per_gpu(
    "gpu_nvlink_transmit_bytes_per_second", "gauge", "NVLink bytes per second sent, all links.",
    "bytes_per_second", "GPM NVLINK_TOTAL_TX_PER_SEC (61)", "PROF_NVLINK_TX_BYTES", cadence=SLOW)
NVLINK_RECEIVE_RATE: Final = _per_gpu(
    "gpu_nvlink_receive_bytes_per_second", "gauge",
    "NVLink bytes per second received, all links.", "bytes_per_second",
    "GPM NVLINK_TOTAL_RX_PER_SEC (60)", "PROF_NVLINK_RX_BYTES", cadence=SLOW)
PCIE_TRANSMITTED: Final = _per_gpu(
    "gpu_pcie_transmitted_bytes", "counter", "PCIe bytes sent by the GPU.", "bytes",
    "field 197 PCIE_COUNT_TX_BYTES", cadence=SLOW)
PCIE_RECEIVED: Final = _per_gpu(
    "gpu_pcie_received_bytes", "counter", "PCIe bytes received by the GPU.", "bytes",
    "field 198 PCIE_COUNT_RX_BYTES", cadence=SLOW)
PCIE_REPLAYS: Final = _per_gpu(
    "gpu_pcie_replays", "counter", "PCIe link replays (retransmissions).", "replays",
    "field 94 PCIE_REPLAY_COUNTER", "DEV_PCIE_REPLAY_COUNTER", cadence=SLOW)

# ---- memory --------------------------------------------------------------------------------------
MEMORY_TOTAL: Final = _per_gpu(
    "gpu_memory_total_bytes", "gauge", "Frame buffer size.", "bytes",
    "nvmlDeviceGetMemoryInfo_v2().total", "DEV_FB_TOTAL")
MEMORY_USED: Final = _per_gpu(
    "gpu_memory_used_bytes", "gauge", "Frame buffer in use.", "bytes",
    "nvmlDeviceGetMemoryInfo_v2().used", "DEV_FB_USED")
MEMORY_FREE: Final = _per_gpu(
    "gpu_memory_free_bytes", "gauge", "Frame buffer free.", "bytes",
    "nvmlDeviceGetMemoryInfo_v2().free", "DEV_FB_FREE")
MEMORY_RESERVED: Final = _per_gpu(
    "gpu_memory_reserved_bytes", "gauge", "Frame buffer reserved by the driver.", "bytes",
    "nvmlDeviceGetMemoryInfo_v2().reserved", "DEV_FB_RESERVED")
BAR1_TOTAL: Final = _per_gpu(
    "gpu_bar1_memory_total_bytes", "gauge", "BAR1 aperture size.", "bytes",
    "nvmlDeviceGetBAR1MemoryInfo()", "DEV_BAR1_TOTAL", cadence=SLOW)
BAR1_USED: Final = _per_gpu(
    "gpu_bar1_memory_used_bytes", "gauge", "BAR1 aperture in use.", "bytes",
    "nvmlDeviceGetBAR1MemoryInfo()", "DEV_BAR1_USED", cadence=SLOW)
PROCESS_MEMORY_USED: Final = _per_gpu(
    "gpu_process_memory_used_bytes", "gauge", "GPU memory used by a process (host pid).", "bytes",
    "nvmlDeviceGetComputeRunningProcesses()", "", (LABEL_PID, LABEL_CONTAINER))
# Counted from the same call as the memory per process, pids with unknown memory included.
PROCESS_COUNT: Final = _per_gpu(
    "gpu_compute_processes", "gauge",
    "Compute processes (CUDA contexts) running on the GPU.", "processes",
    "nvmlDeviceGetComputeRunningProcesses()")
PROCESS_SM_UTILIZATION: Final = _per_gpu(
    "gpu_process_sm_utilization_ratio", "gauge",
    "Share of the SMs' time a process's kernels ran, in NVML's last sample of it (absent for a "
    "process that ran none since the last round).", "ratio",
    "nvmlDeviceGetProcessUtilization().smUtil", "", (LABEL_PID, LABEL_CONTAINER))

# ---- clocks, power and heat ----------------------------------------------------------------------
CLOCK: Final = _per_gpu(
    "gpu_clock_hz", "gauge", "Current clock frequency (sm, memory, graphics).", "hz",
    "nvmlDeviceGetClockInfo()", "DEV_SM_CLOCK, DEV_MEM_CLOCK", (LABEL_CLOCK,),
    "interval (sm), slow (memory, graphics)")
POWER: Final = _per_gpu(
    "gpu_power_watts", "gauge", "Power draw.", "watts", "nvmlDeviceGetPowerUsage()",
    "DEV_POWER_USAGE")
POWER_LIMIT: Final = _per_gpu(
    "gpu_power_limit_watts", "gauge", "Enforced power limit.", "watts",
    "nvmlDeviceGetEnforcedPowerLimit()", "DEV_ENFORCED_POWER_LIMIT", cadence=SLOW)
# The board's own limit: the enforced one is below it only where an operator, the node's power
# manager or the facility lowered it. A power cap at the default limit is the work alone.
POWER_DEFAULT_LIMIT: Final = _per_gpu(
    "gpu_power_default_limit_watts", "gauge", "Default power limit: the board's own, before "
    "any lowering.", "watts", "nvmlDeviceGetPowerManagementDefaultLimit()",
    "DEV_POWER_MGMT_LIMIT_DEF", cadence=SLOW)
ENERGY: Final = _per_gpu(
    "gpu_energy_joules", "counter", "Energy consumed since the driver loaded.", "joules",
    "field 83 TOTAL_ENERGY_CONSUMPTION", "DEV_TOTAL_ENERGY_CONSUMPTION", cadence=SLOW)
TEMPERATURE: Final = _per_gpu(
    "gpu_temperature_celsius", "gauge", "GPU core temperature.", "celsius",
    "nvmlDeviceGetTemperature(GPU)", "DEV_GPU_TEMP")
MEMORY_TEMPERATURE: Final = _per_gpu(
    "gpu_memory_temperature_celsius", "gauge", "HBM temperature.", "celsius",
    "field 82 MEMORY_TEMP", "DEV_MEMORY_TEMP")
CLOCK_EVENT_ACTIVE: Final = _per_gpu(
    "gpu_clock_event_active", "gauge",
    "1 while this clock-event (throttle) reason holds clocks down.", "",
    "nvmlDeviceGetCurrentClocksEventReasons()", "DEV_CLOCK_THROTTLE_REASONS (bitmask)", _REASON)
CLOCK_EVENT_DURATION: Final = _per_gpu(
    "gpu_clock_event_duration_seconds", "counter", "Time clocks were held down by this reason.",
    "seconds", "fields 269-271 CLOCKS_EVENT_REASON_*_SLOWDOWN", "DEV_THERMAL_VIOLATION",
    _REASON, SLOW)

# ---- errors --------------------------------------------------------------------------------------
XID_ERRORS: Final = _per_gpu(
    "gpu_xid_errors", "counter", "Critical XID errors by code.", "errors",
    "nvmlEventSetWait_v2 (XidCriticalError events)", "DEV_XID_ERRORS (last code, gauge)",
    (LABEL_XID,), EVENT)
ECC_CORRECTED_ERRORS: Final = _per_gpu(
    "gpu_ecc_corrected_errors", "counter", "Corrected ECC errors over the GPU's lifetime.",
    "errors", "field 5 ECC_SBE_AGG_TOTAL", "DEV_ECC_SBE_AGG_TOTAL")
ECC_UNCORRECTED_ERRORS: Final = _per_gpu(
    "gpu_ecc_uncorrected_errors", "counter", "Uncorrected ECC errors over the GPU's lifetime.",
    "errors", "field 6 ECC_DBE_AGG_TOTAL", "DEV_ECC_DBE_AGG_TOTAL")
REMAPPED_ROWS_CORRECTABLE: Final = _per_gpu(
    "gpu_remapped_rows_correctable", "counter", "Rows remapped after correctable errors.", "rows",
    "field 142 REMAPPED_COR", "DEV_CORRECTABLE_REMAPPED_ROWS", cadence=SLOW)
REMAPPED_ROWS_UNCORRECTABLE: Final = _per_gpu(
    "gpu_remapped_rows_uncorrectable", "counter", "Rows remapped after uncorrectable errors.",
    "rows", "field 143 REMAPPED_UNC", "DEV_UNCORRECTABLE_REMAPPED_ROWS", cadence=SLOW)
REMAPPED_ROWS_PENDING: Final = _per_gpu(
    "gpu_remapped_rows_pending", "gauge", "1 when a row remap waits for a GPU reset.", "",
    "field 144 REMAPPED_PENDING", "DEV_ROW_REMAP_PENDING", cadence=SLOW)
REMAPPED_ROWS_FAILURE: Final = _per_gpu(
    "gpu_remapped_rows_failure", "gauge", "1 when a row remap has failed.", "",
    "field 145 REMAPPED_FAILURE", "DEV_ROW_REMAP_FAILURE", cadence=SLOW)

# ---- MIG (only while MIG mode is on) -------------------------------------------------------------
MIG_MODE: Final = _per_gpu(
    "gpu_mig_mode_enabled", "gauge", "1 while MIG mode is on.", "", "nvmlDeviceGetMigMode()",
    cadence=SLOW)
MIG_INFO: Final = _per_gpu(
    "gpu_mig_device", "info", "A MIG device: its uuid, profile and instance ids.", "",
    "nvmlDeviceGetMigDeviceHandleByIndex()", "GPU_I_PROFILE, GPU_I_ID labels",
    (LABEL_MIG_UUID, LABEL_MIG_PROFILE, *_MIG), SLOW)
MIG_MEMORY_TOTAL: Final = _per_gpu(
    "gpu_mig_memory_total_bytes", "gauge", "Memory of a MIG device.", "bytes",
    "nvmlDeviceGetMemoryInfo(MIG handle)", "DEV_FB_TOTAL (per GPU_I_ID)", _MIG)
MIG_MEMORY_USED: Final = _per_gpu(
    "gpu_mig_memory_used_bytes", "gauge", "Memory in use on a MIG device.", "bytes",
    "nvmlDeviceGetMemoryInfo(MIG handle)", "DEV_FB_USED (per GPU_I_ID)", _MIG)
MIG_SM_ACTIVE: Final = _per_gpu(
    "gpu_mig_sm_active_ratio", "gauge", "SM activity of a GPU instance.", "ratio",
    "nvmlGpmMigSampleGet + SM_UTIL", "PROF_SM_ACTIVE (per GPU_I_ID)", (LABEL_GPU_INSTANCE,))
MIG_TENSOR_ACTIVE: Final = _per_gpu(
    "gpu_mig_tensor_active_ratio", "gauge", "Tensor activity of a GPU instance.", "ratio",
    "nvmlGpmMigSampleGet + ANY_TENSOR_UTIL", "PROF_PIPE_TENSOR_ACTIVE (per GPU_I_ID)",
    (LABEL_GPU_INSTANCE,))
MIG_DRAM_BANDWIDTH_UTILIZATION: Final = _per_gpu(
    "gpu_mig_dram_bandwidth_utilization_ratio", "gauge",
    "DRAM bandwidth utilisation of a GPU instance.", "ratio",
    "nvmlGpmMigSampleGet + DRAM_BW_UTIL", "PROF_DRAM_ACTIVE (per GPU_I_ID)",
    (LABEL_GPU_INSTANCE,))

# Every per-GPU reading, in exposition order (the collector renders them in this order).
PER_GPU: Final = (
    UTILIZATION, MEMORY_UTILIZATION, GRAPHICS_ENGINE_ACTIVE, SM_ACTIVE, SM_OCCUPANCY,
    TENSOR_ACTIVE, TENSOR_PIPE_ACTIVE, FP_PIPE_ACTIVE, DRAM_BANDWIDTH_UTILIZATION,
    PCIE_TRANSMIT_RATE, PCIE_RECEIVE_RATE, NVLINK_TRANSMIT_RATE, NVLINK_RECEIVE_RATE,
    PCIE_TRANSMITTED, PCIE_RECEIVED, PCIE_REPLAYS, MEMORY_TOTAL, MEMORY_USED, MEMORY_FREE,
    MEMORY_RESERVED, BAR1_TOTAL, BAR1_USED, PROCESS_MEMORY_USED, PROCESS_COUNT,
    PROCESS_SM_UTILIZATION, CLOCK,
    POWER, POWER_LIMIT, POWER_DEFAULT_LIMIT, ENERGY, TEMPERATURE, MEMORY_TEMPERATURE,
    CLOCK_EVENT_ACTIVE,
    CLOCK_EVENT_DURATION, XID_ERRORS, ECC_CORRECTED_ERRORS, ECC_UNCORRECTED_ERRORS,
    REMAPPED_ROWS_CORRECTABLE, REMAPPED_ROWS_UNCORRECTABLE, REMAPPED_ROWS_PENDING,
    REMAPPED_ROWS_FAILURE, MIG_MODE, MIG_INFO, MIG_MEMORY_TOTAL, MIG_MEMORY_USED, MIG_SM_ACTIVE,
    MIG_TENSOR_ACTIVE, MIG_DRAM_BANDWIDTH_UTILIZATION,
)
