"""Pure shaping of NVML answers: units, ratios, reasons, field values."""

from __future__ import annotations

from types import SimpleNamespace as Answer

import pytest

from governor.contracts.metrics import gpu as m
from governor.exporters.gpu import classic, fields
from governor.exporters.gpu import nvml as nv
from governor.exporters.gpu.calls import CallGuard, GpuLost
from governor.exporters.gpu.errors import ErrorLedger
from governor.exporters.gpu.fake import FakeNvml, Handle, Record
from governor.exporters.gpu.readings import Sample


def test_percentages_become_ratios_clamped_to_0_1() -> None:
    assert classic.ratio(37) == pytest.approx(0.37)
    assert classic.ratio(100.4) == 1.0
    assert classic.ratio(-1) == 0.0


def test_utilization_and_memory_shapes() -> None:
    assert classic.shape_utilization(Answer(gpu=80, memory=25)) == [
        Sample(m.UTILIZATION.name, 0.8), Sample(m.MEMORY_UTILIZATION.name, 0.25)]
    v2 = classic.shape_memory(Answer(total=10, used=6, free=3, reserved=1))
    assert {s.name: s.value for s in v2} == {m.MEMORY_TOTAL.name: 10, m.MEMORY_USED.name: 6,
                                             m.MEMORY_FREE.name: 3, m.MEMORY_RESERVED.name: 1}
    v1 = classic.shape_memory(Answer(total=10, used=6, free=4))
    assert m.MEMORY_RESERVED.name not in {s.name for s in v1}


def test_units_are_base_units() -> None:
    assert classic.shape_clock("sm", 1980) == [
        Sample(m.CLOCK.name, 1.98e9, ((m.LABEL_CLOCK, "sm"),))]
    (power,) = classic.shape_power(690_523)
    assert power.name == m.POWER.name
    assert power.value == pytest.approx(690.523)
    assert classic.shape_power_limit(700_000) == [Sample(m.POWER_LIMIT.name, 700.0)]
    energy = next(s for s in fields.SLOW if s.field_id == 83)
    assert energy.sample(9_467_982).value == pytest.approx(9467.982)  # mJ → J
    slowdown = next(s for s in fields.SLOW if s.field_id == 270)
    assert slowdown.sample(2_500_000_000).value == pytest.approx(2.5)  # ns → s


def test_every_reason_has_a_series_and_only_set_bits_are_1() -> None:
    samples = classic.shape_clock_events(0x4 | 0x40)
    active = {dict(s.labels)[m.LABEL_REASON]: s.value for s in samples}
    assert len(active) == 8
    assert {r for r, v in active.items() if v == 1.0} == {m.REASON_SW_POWER_CAP,
                                                          m.REASON_HW_THERMAL}


@pytest.mark.parametrize(
    ("value_type", "member", "number"),
    [
        (nv.VALUE_DOUBLE, "dVal", 1.5), (nv.VALUE_UINT, "uiVal", 7),
        (nv.VALUE_ULONG, "ulVal", 8), (nv.VALUE_ULONGLONG, "ullVal", 2**40),
        (nv.VALUE_SLONGLONG, "sllVal", -3), (nv.VALUE_SINT, "siVal", -4),
        (nv.VALUE_USHORT, "usVal", 9),
    ],
)
def test_a_field_value_is_read_through_its_type(
    value_type: int, member: str, number: float
) -> None:
    union = Answer(**dict.fromkeys(("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal",
                                    "usVal"), 0))
    setattr(union, member, number)
    assert fields.decode(value_type, union) == number


def test_an_unknown_value_type_is_not_a_number() -> None:
    assert fields.decode(42, Answer()) is None


def _guard(nvml: FakeNvml, ledger: ErrorLedger) -> CallGuard:
    return CallGuard(nvml, ledger, 0)


def test_a_field_that_is_not_supported_is_counted_once_then_never_asked() -> None:
    nvml, ledger = FakeNvml(1), ErrorLedger()
    guard, handle = _guard(nvml, ledger), nvml.nvmlDeviceGetHandleByIndex(0)
    nvml.fail_field(0, 82, nv.ERROR_NOT_SUPPORTED)
    first = fields.read_fields(nvml, handle, guard, fields.FAST, call_name="fast")
    second = fields.read_fields(nvml, handle, guard, fields.FAST, call_name="fast")
    assert m.MEMORY_TEMPERATURE.name not in {s.name for s in first + second}
    assert {s.name for s in second} == {m.ECC_CORRECTED_ERRORS.name, m.ECC_UNCORRECTED_ERRORS.name}
    assert dict(ledger.counts())[m.KIND_NOT_SUPPORTED] == 1


def test_a_field_without_permission_is_counted_every_time_and_retried() -> None:
    nvml, ledger = FakeNvml(1), ErrorLedger()
    guard, handle = _guard(nvml, ledger), nvml.nvmlDeviceGetHandleByIndex(0)
    nvml.fail_field(0, 5, nv.ERROR_NO_PERMISSION)
    for _ in range(3):
        fields.read_fields(nvml, handle, guard, fields.FAST, call_name="fast")
    assert dict(ledger.counts())[m.KIND_NO_PERMISSION] == 3
    nvml.fail_field(0, 5, nv.SUCCESS)
    read = fields.read_fields(nvml, handle, guard, fields.FAST, call_name="fast")
    assert m.ECC_CORRECTED_ERRORS.name in {s.name for s in read}


def test_a_field_reporting_a_lost_gpu_abandons_the_gpu() -> None:
    nvml, ledger = FakeNvml(1), ErrorLedger()
    guard, handle = _guard(nvml, ledger), nvml.nvmlDeviceGetHandleByIndex(0)
    nvml.fail_field(0, 5, nv.ERROR_GPU_IS_LOST)
    with pytest.raises(GpuLost):
        fields.read_fields(nvml, handle, guard, fields.FAST, call_name="fast")
    assert dict(ledger.counts())[m.KIND_GPU_LOST] == 1


def test_a_driver_without_field_values_costs_one_call() -> None:
    nvml, ledger = FakeNvml(1), ErrorLedger()
    guard, handle = _guard(nvml, ledger), nvml.nvmlDeviceGetHandleByIndex(0)
    nvml.fail("nvmlDeviceGetFieldValues", nv.ERROR_FUNCTION_NOT_FOUND)
    for _ in range(5):
        assert fields.read_fields(nvml, handle, guard, fields.FAST, call_name="fast") == []
    assert nvml.calls["nvmlDeviceGetFieldValues"] == 1
    assert dict(ledger.counts())[m.KIND_FUNCTION_NOT_FOUND] == 1


def test_memory_falls_back_to_v1_on_an_old_driver() -> None:
    class OldDriver(FakeNvml):
        def nvmlDeviceGetMemoryInfo(self, handle: Handle, version: int | None = None) -> Record:
            if version is not None:
                raise self.NVMLError(nv.ERROR_FUNCTION_NOT_FOUND)
            return super().nvmlDeviceGetMemoryInfo(handle)

    nvml = OldDriver(1)
    shaped = classic.shape_memory(classic.memory_info(nvml, nvml.nvmlDeviceGetHandleByIndex(0)))
    assert {s.name for s in shaped} == {m.MEMORY_TOTAL.name, m.MEMORY_USED.name, m.MEMORY_FREE.name}


def test_classic_readings_skip_what_fails_and_keep_the_rest() -> None:
    nvml, ledger = FakeNvml(1), ErrorLedger()
    guard, handle = _guard(nvml, ledger), nvml.nvmlDeviceGetHandleByIndex(0)
    nvml.fail("nvmlDeviceGetPowerUsage", nv.ERROR_NOT_SUPPORTED)
    nvml.fail("nvmlDeviceGetTemperature", nv.ERROR_UNKNOWN)
    names = {s.name for s in classic.read_all(nvml, handle, guard, classic.FAST)}
    assert m.POWER.name not in names and m.TEMPERATURE.name not in names
    shaped = {m.UTILIZATION, m.MEMORY_USED, m.CLOCK, m.CLOCK_EVENT_ACTIVE}
    assert {metric.name for metric in shaped} <= names
    classic.read_all(nvml, handle, guard, classic.FAST)
    assert nvml.calls["nvmlDeviceGetPowerUsage"] == 1  # not supported: asked once
    assert nvml.calls["nvmlDeviceGetTemperature"] == 2  # unknown error: asked again
    assert dict(ledger.counts())[m.KIND_NVML_OTHER] == 2
