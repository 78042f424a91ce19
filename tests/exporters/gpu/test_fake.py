"""The fake NVML behaves as pynvml does where the exporter can tell, and fails on request."""

from __future__ import annotations

import pytest

from governor.exporters.gpu import nvml as nv
from governor.exporters.gpu.fake import (
    FakeNvml,
    NVMLError,
    NVMLError_GpuIsLost,
    NVMLError_NotSupported,
)
from tests.exporters.conftest import FakeClock, engines_on


def test_every_call_is_counted(clock: FakeClock) -> None:
    nvml = FakeNvml(2, clock=clock)
    handle = nvml.nvmlDeviceGetHandleByIndex(1)
    for _ in range(3):
        nvml.nvmlDeviceGetPowerUsage(handle)
    assert nvml.calls["nvmlDeviceGetPowerUsage"] == 3
    assert nvml.calls["nvmlDeviceGetHandleByIndex"] == 1


def test_errors_are_pynvml_shaped() -> None:
    error = NVMLError(nv.ERROR_NOT_SUPPORTED)
    assert isinstance(error, NVMLError_NotSupported)
    assert error.value == nv.ERROR_NOT_SUPPORTED
    assert str(error) == "Not Supported"
    assert str(NVMLError(4242)) == "NVML error 4242"


def test_a_call_fails_for_one_gpu_or_all(clock: FakeClock) -> None:
    nvml = FakeNvml(2, clock=clock)
    h0, h1 = nvml.nvmlDeviceGetHandleByIndex(0), nvml.nvmlDeviceGetHandleByIndex(1)
    nvml.fail("nvmlDeviceGetTemperature", nv.ERROR_NO_PERMISSION, gpu=1)
    assert nvml.nvmlDeviceGetTemperature(h0, 0) > 0
    with pytest.raises(NVMLError) as caught:
        nvml.nvmlDeviceGetTemperature(h1, 0)
    assert caught.value.value == nv.ERROR_NO_PERMISSION
    nvml.fail("nvmlDeviceGetTemperature", nv.ERROR_UNKNOWN)
    with pytest.raises(NVMLError):
        nvml.nvmlDeviceGetTemperature(h0, 0)
    nvml.heal("nvmlDeviceGetTemperature")
    nvml.heal("nvmlDeviceGetTemperature", gpu=1)
    assert nvml.nvmlDeviceGetTemperature(h1, 0) > 0


def test_a_lost_gpu_answers_gpu_is_lost_to_everything(clock: FakeClock) -> None:
    nvml = FakeNvml(2, clock=clock)
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    nvml.lose(0)
    with pytest.raises(NVMLError_GpuIsLost):
        nvml.nvmlDeviceGetUtilizationRates(handle)
    with pytest.raises(NVMLError_GpuIsLost):
        nvml.nvmlDeviceGetHandleByIndex(0)
    nvml.recover(0)
    assert nvml.nvmlDeviceGetUtilizationRates(handle).gpu >= 0


def test_field_values_carry_a_return_per_field(clock: FakeClock) -> None:
    nvml = FakeNvml(1, clock=clock)
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    nvml.fail_field(0, 94, nv.ERROR_NO_PERMISSION)
    values = nvml.nvmlDeviceGetFieldValues(handle, [82, 94, 9999])
    assert [v.nvmlReturn for v in values] == [nv.SUCCESS, nv.ERROR_NO_PERMISSION,
                                              nv.ERROR_NOT_SUPPORTED]
    assert values[0].valueType == nv.VALUE_UINT and values[0].value.uiVal > 0


def test_counters_only_grow(clock: FakeClock) -> None:
    nvml = FakeNvml(1, clock=clock)
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    readings = []
    for _ in range(5):
        clock.advance(7.0)
        energy, tx = nvml.nvmlDeviceGetFieldValues(handle, [83, 197])
        readings.append((energy.value.ullVal, tx.value.ullVal))
    assert readings == sorted(readings)
    assert readings[-1][0] > readings[0][0] > 0


def test_gpm_needs_two_live_samples(clock: FakeClock) -> None:
    nvml = FakeNvml(1, clock=clock)
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    first, second = nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()
    request = nvml.c_nvmlGpmMetricsGet_t()
    request.numMetrics, request.sample1, request.sample2 = 1, first, second
    request.metrics[0].metricId = 2
    with pytest.raises(NVMLError):
        nvml.nvmlGpmMetricsGet(request)  # no sample taken yet
    nvml.nvmlGpmSampleGet(handle, first)
    clock.advance(1.0)
    nvml.nvmlGpmSampleGet(handle, second)
    nvml.nvmlGpmMetricsGet(request)
    assert request.metrics[0].nvmlReturn == nv.SUCCESS
    assert 0 <= request.metrics[0].value <= 100
    nvml.nvmlGpmSampleFree(first)
    with pytest.raises(NVMLError):
        nvml.nvmlGpmMetricsGet(request)  # a freed sample is not read


def test_init_can_fail_like_a_machine_without_a_driver() -> None:
    nvml = FakeNvml(1, init_error=nv.ERROR_DRIVER_NOT_LOADED)
    with pytest.raises(NVMLError) as caught:
        nvml.nvmlInit()
    assert caught.value.value == nv.ERROR_DRIVER_NOT_LOADED


def test_xid_events_reach_the_sets_that_registered(clock: FakeClock) -> None:
    nvml = FakeNvml(2, clock=clock)
    event_set = nvml.nvmlEventSetCreate()
    nvml.nvmlDeviceRegisterEvents(nvml.nvmlDeviceGetHandleByIndex(1), 8, event_set)
    nvml.inject_xid(0, 31)  # not registered: never delivered
    nvml.inject_xid(1, 79)
    event = nvml.nvmlEventSetWait_v2(event_set, 10)
    assert (nvml.nvmlDeviceGetIndex(event.device), event.eventData) == (1, 79)
    with pytest.raises(NVMLError) as caught:
        nvml.nvmlEventSetWait_v2(event_set, 10)
    assert caught.value.value == nv.ERROR_TIMEOUT


def test_readings_are_deterministic_for_a_given_time() -> None:
    a, b = FakeNvml(2, clock=lambda: 500.0), FakeNvml(2, clock=lambda: 500.0)
    ha, hb = a.nvmlDeviceGetHandleByIndex(1), b.nvmlDeviceGetHandleByIndex(1)
    assert a.nvmlDeviceGetPowerUsage(ha) == b.nvmlDeviceGetPowerUsage(hb)
    assert a.nvmlDeviceGetUUID(ha) != a.nvmlDeviceGetUUID(a.nvmlDeviceGetHandleByIndex(0))


def test_an_unfollowed_gpu_is_idle_and_flat(clock: FakeClock) -> None:
    nvml = FakeNvml(2, clock=clock)
    handle = nvml.nvmlDeviceGetHandleByIndex(1)
    readings = []
    for _ in range(3):
        clock.advance(40.0)  # the old demo's sine wave had a 120 s period
        readings.append((nvml.nvmlDeviceGetUtilizationRates(handle).gpu,
                         nvml.nvmlDeviceGetPowerUsage(handle),
                         nvml.nvmlDeviceGetClockInfo(handle, nv.CLOCK_SM),
                         nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)))
    assert readings == [(0, 79_600, 345, 0x1)] * 3
    assert nvml.nvmlDeviceGetComputeRunningProcesses(handle) == []
    assert nvml.nvmlDeviceGetMemoryInfo(handle).used == 0


def test_process_utilization_answers_not_found_when_nothing_ran(clock: FakeClock) -> None:
    nvml = engines_on(FakeNvml(2, clock=clock), 0)
    with pytest.raises(NVMLError) as caught:
        nvml.nvmlDeviceGetProcessUtilization(nvml.nvmlDeviceGetHandleByIndex(1), 0)
    assert caught.value.value == nv.ERROR_NOT_FOUND
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    (sample,) = nvml.nvmlDeviceGetProcessUtilization(handle, 0)
    assert (sample.pid, sample.smUtil) == (4242, 50)
    with pytest.raises(NVMLError):  # nothing newer than what was seen
        nvml.nvmlDeviceGetProcessUtilization(handle, sample.timeStamp)


def test_every_call_the_exporter_makes_is_pynvml_s_and_the_fake_s() -> None:
    import inspect

    import pynvml

    calls = [name for name, _ in inspect.getmembers(nv.NvmlApi)
             if name.startswith(("nvml", "c_nvml"))]
    assert "nvmlDeviceGetProcessUtilization" in calls
    for name in calls:
        assert hasattr(pynvml, name), name
        assert hasattr(FakeNvml, name), name
