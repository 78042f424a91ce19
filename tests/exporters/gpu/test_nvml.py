"""The NVML boundary: constants equal pynvml's, codes are named, init failures told plainly."""

from __future__ import annotations

import pynvml
import pytest

from governor.contracts.metrics import gpu as m
from governor.exporters.gpu import nvml as nv
from governor.exporters.gpu.fake import NVMLError


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        ("SUCCESS", "NVML_SUCCESS"),
        ("ERROR_NOT_SUPPORTED", "NVML_ERROR_NOT_SUPPORTED"),
        ("ERROR_NO_PERMISSION", "NVML_ERROR_NO_PERMISSION"),
        ("ERROR_NOT_FOUND", "NVML_ERROR_NOT_FOUND"),
        ("ERROR_DRIVER_NOT_LOADED", "NVML_ERROR_DRIVER_NOT_LOADED"),
        ("ERROR_TIMEOUT", "NVML_ERROR_TIMEOUT"),
        ("ERROR_LIBRARY_NOT_FOUND", "NVML_ERROR_LIBRARY_NOT_FOUND"),
        ("ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_FUNCTION_NOT_FOUND"),
        ("ERROR_GPU_IS_LOST", "NVML_ERROR_GPU_IS_LOST"),
        ("ERROR_ARGUMENT_VERSION_MISMATCH", "NVML_ERROR_ARGUMENT_VERSION_MISMATCH"),
        ("ERROR_UNKNOWN", "NVML_ERROR_UNKNOWN"),
        ("TEMPERATURE_GPU", "NVML_TEMPERATURE_GPU"),
        ("CLOCK_GRAPHICS", "NVML_CLOCK_GRAPHICS"),
        ("CLOCK_SM", "NVML_CLOCK_SM"),
        ("CLOCK_MEM", "NVML_CLOCK_MEM"),
        ("CLOCK_VIDEO", "NVML_CLOCK_VIDEO"),
        ("MEMORY_V2", "nvmlMemory_v2"),
        ("EVENT_XID_CRITICAL_ERROR", "nvmlEventTypeXidCriticalError"),
        ("DEVICE_MIG_ENABLE", "NVML_DEVICE_MIG_ENABLE"),
        ("GPM_METRICS_GET_VERSION", "NVML_GPM_METRICS_GET_VERSION"),
        ("VALUE_DOUBLE", "NVML_VALUE_TYPE_DOUBLE"),
        ("VALUE_UINT", "NVML_VALUE_TYPE_UNSIGNED_INT"),
        ("VALUE_ULONG", "NVML_VALUE_TYPE_UNSIGNED_LONG"),
        ("VALUE_ULONGLONG", "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG"),
        ("VALUE_SLONGLONG", "NVML_VALUE_TYPE_SIGNED_LONG_LONG"),
        ("VALUE_SINT", "NVML_VALUE_TYPE_SIGNED_INT"),
        ("VALUE_USHORT", "NVML_VALUE_TYPE_UNSIGNED_SHORT"),
    ],
)
def test_our_constants_are_pynvml_s(ours: str, theirs: str) -> None:
    assert getattr(nv, ours) == getattr(pynvml, theirs)


def test_the_clock_event_bits_are_pynvml_s() -> None:
    from governor.exporters.gpu.classic import REASON_BITS

    names = {
        m.REASON_GPU_IDLE: "nvmlClocksEventReasonGpuIdle",
        m.REASON_APPLICATIONS_CLOCKS: "nvmlClocksEventReasonApplicationsClocksSetting",
        m.REASON_SW_POWER_CAP: "nvmlClocksEventReasonSwPowerCap",
        m.REASON_HW_SLOWDOWN: "nvmlClocksEventReasonHwSlowdown",
        m.REASON_SYNC_BOOST: "nvmlClocksEventReasonSyncBoost",
        m.REASON_SW_THERMAL: "nvmlClocksEventReasonSwThermalSlowdown",
        m.REASON_HW_THERMAL: "nvmlClocksEventReasonHwThermalSlowdown",
        m.REASON_HW_POWER_BRAKE: "nvmlClocksEventReasonHwPowerBrakeSlowdown",
    }
    assert {reason: bit for bit, reason in REASON_BITS} == {
        reason: getattr(pynvml, name) for reason, name in names.items()}


def test_the_field_and_gpm_ids_are_pynvml_s() -> None:
    from governor.exporters.gpu import fields, gpm

    field_names = {82: "NVML_FI_DEV_MEMORY_TEMP", 5: "NVML_FI_DEV_ECC_SBE_AGG_TOTAL",
                   6: "NVML_FI_DEV_ECC_DBE_AGG_TOTAL", 83: "NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                   94: "NVML_FI_DEV_PCIE_REPLAY_COUNTER", 197: "NVML_FI_DEV_PCIE_COUNT_TX_BYTES",
                   198: "NVML_FI_DEV_PCIE_COUNT_RX_BYTES", 142: "NVML_FI_DEV_REMAPPED_COR",
                   143: "NVML_FI_DEV_REMAPPED_UNC", 144: "NVML_FI_DEV_REMAPPED_PENDING",
                   145: "NVML_FI_DEV_REMAPPED_FAILURE",
                   269: "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN",
                   270: "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN",
                   271: "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN"}
    assert {s.field_id for s in (*fields.FAST, *fields.SLOW)} == set(field_names)
    for field_id, name in field_names.items():
        assert getattr(pynvml, name) == field_id
    gpm_names = {2: "SM_UTIL", 3: "SM_OCCUPANCY", 5: "ANY_TENSOR_UTIL", 10: "DRAM_BW_UTIL",
                 20: "PCIE_TX_PER_SEC", 21: "PCIE_RX_PER_SEC", 1: "GRAPHICS_UTIL",
                 6: "DFMA_TENSOR_UTIL", 7: "HMMA_TENSOR_UTIL", 8: "DMMA_TENSOR_UTIL",
                 9: "IMMA_TENSOR_UTIL", 11: "FP64_UTIL", 12: "FP32_UTIL", 13: "FP16_UTIL",
                 60: "NVLINK_TOTAL_RX_PER_SEC", 61: "NVLINK_TOTAL_TX_PER_SEC"}
    assert {g.metric_id for g in (*gpm.FAST, *gpm.SLOW)} == set(gpm_names)
    for metric_id, name in gpm_names.items():
        assert getattr(pynvml, f"NVML_GPM_METRIC_{name}") == metric_id


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (3, m.KIND_NOT_SUPPORTED), (13, m.KIND_FUNCTION_NOT_FOUND), (6, m.KIND_NOT_FOUND),
        (4, m.KIND_NO_PERMISSION), (15, m.KIND_GPU_LOST), (9, m.KIND_DRIVER_NOT_LOADED),
        (12, m.KIND_LIBRARY_NOT_FOUND), (10, m.KIND_TIMEOUT), (999, m.KIND_NVML_OTHER),
        (12345, m.KIND_NVML_OTHER), (None, m.KIND_NVML_OTHER),
    ],
)
def test_every_return_code_has_a_kind(code: int | None, kind: str) -> None:
    assert nv.error_kind(code) == kind
    assert kind in m.ERROR_KINDS


def test_error_code_reads_pynvml_errors_and_ours_alike() -> None:
    assert nv.error_code(pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)) == 15
    assert nv.error_code(NVMLError(15)) == 15
    assert nv.error_code(ValueError("no value")) is None


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (12, "no NVIDIA driver on this machine"),
        (9, "driver is not loaded"),
        (4, "no permission"),
        (999, "NVML failed to initialise"),
    ],
)
def test_an_init_failure_reads_as_a_sentence(code: int, words: str) -> None:
    failure = nv.init_failure_message(NVMLError(code))
    assert words in str(failure)
    assert failure.kind == nv.error_kind(code)


def test_the_real_pynvml_on_a_machine_without_a_gpu_fails_cleanly() -> None:
    """This test machine has no NVIDIA driver: nvmlInit must raise NVMLError, nothing worse."""
    api = nv.import_pynvml()
    try:
        api.nvmlInit()
    except api.NVMLError as exc:
        assert nv.init_failure_message(exc).kind in m.ERROR_KINDS
    else:  # a GPU machine after all
        api.nvmlShutdown()


def test_strings_come_out_as_text() -> None:
    assert nv.text(b"NVIDIA H200") == "NVIDIA H200"
    assert nv.text(b"\xffbad") == "\ufffdbad"
    assert nv.text("GPU-1") == "GPU-1"
