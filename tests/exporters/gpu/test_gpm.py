"""GPM rotation: rates between two samples, three buffers, slow metrics over the slow interval."""

from __future__ import annotations

from functools import partial

import pytest

from governor.contracts.metrics import gpu as m
from governor.exporters.gpu import gpm
from governor.exporters.gpu import nvml as nv
from governor.exporters.gpu import simulated as sim
from governor.exporters.gpu.fake import FakeNvml, NVMLError
from tests.exporters.conftest import ENGINE, FakeClock, engines_on


def rotator(nvml: FakeNvml, **kwargs: object) -> gpm.GpmRotator:
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    return gpm.GpmRotator(nvml, partial(nvml.nvmlGpmSampleGet, handle), gpm.FAST, gpm.SLOW,
                          **kwargs)  # type: ignore[arg-type]


def test_the_first_tick_only_seeds(clock: FakeClock) -> None:
    result = rotator(FakeNvml(1, clock=clock)).tick(False)
    assert result.fast == () and result.slow is None


def test_fast_metrics_are_rates_over_the_last_interval(clock: FakeClock) -> None:
    nvml = engines_on(FakeNvml(1, clock=clock), 0)
    rot = rotator(nvml)
    rot.tick(False)
    clock.advance(1.0)
    result = rot.tick(False)
    values = {s.name: s.value for s in result.fast}
    assert values[m.SM_ACTIVE.name] == pytest.approx(ENGINE.busy)
    assert values[m.TENSOR_ACTIVE.name] == pytest.approx(ENGINE.tensor)
    assert values[m.DRAM_BANDWIDTH_UTILIZATION.name] == pytest.approx(ENGINE.dram)
    assert values[m.PCIE_RECEIVE_RATE.name] == pytest.approx(sim.pcie_rates_bytes(ENGINE)[1])
    assert all(0.0 <= v <= 1.0 for n, v in values.items() if n.endswith("_ratio"))


def test_slow_metrics_span_the_slow_interval(clock: FakeClock) -> None:
    nvml = engines_on(FakeNvml(1, clock=clock), 0)
    rot = rotator(nvml)
    assert rot.tick(True).slow == ()  # seeds the slow window too
    for _ in range(29):
        clock.advance(1.0)
        assert rot.tick(False).slow is None
    clock.advance(1.0)
    result = rot.tick(True)
    assert result.slow is not None
    hmma = next(s for s in result.slow if s.labels == ((m.LABEL_PIPE, "hmma"),))
    assert hmma.value == pytest.approx(ENGINE.tensor)
    assert {s.name for s in result.slow} >= {m.TENSOR_PIPE_ACTIVE.name, m.FP_PIPE_ACTIVE.name,
                                             m.NVLINK_RECEIVE_RATE.name}


def test_three_buffers_are_never_overwritten_while_in_use(clock: FakeClock) -> None:
    nvml = FakeNvml(1, clock=clock)
    rot = rotator(nvml)
    for i in range(50):
        clock.advance(1.0)
        result = rot.tick(i % 7 == 0)
        if i:
            assert len(result.fast) == len(gpm.FAST)
    assert nvml.calls["nvmlGpmSampleAlloc"] == 3


def test_a_failed_sample_leaves_the_rotation_intact(clock: FakeClock) -> None:
    nvml = FakeNvml(1, clock=clock)
    rot = rotator(nvml)
    rot.tick(False)
    clock.advance(1.0)
    nvml.fail("nvmlGpmSampleGet", nv.ERROR_NO_PERMISSION)
    with pytest.raises(NVMLError):
        rot.tick(False)
    nvml.heal("nvmlGpmSampleGet")
    clock.advance(1.0)
    assert len(rot.tick(False).fast) == len(gpm.FAST)


def test_a_metric_that_fails_is_reported_and_can_be_dropped(clock: FakeClock) -> None:
    nvml = FakeNvml(1, clock=clock)
    nvml.fail_gpm_metric(0, 3, nv.ERROR_NOT_SUPPORTED)
    rot = rotator(nvml)
    rot.tick(False)
    clock.advance(1.0)
    result = rot.tick(False)
    assert result.failed == ((3, nv.ERROR_NOT_SUPPORTED),)
    assert m.SM_OCCUPANCY.name not in {s.name for s in result.fast}
    rot.drop(3)
    clock.advance(1.0)
    assert rot.tick(False).failed == ()


def test_reset_starts_over_after_an_outage(clock: FakeClock) -> None:
    rot = rotator(FakeNvml(1, clock=clock))
    rot.tick(False)
    rot.reset()
    clock.advance(1.0)
    assert rot.tick(False).fast == ()


def test_close_frees_every_buffer(clock: FakeClock) -> None:
    nvml = FakeNvml(1, clock=clock)
    rot = rotator(nvml)
    rot.close()
    assert nvml.calls["nvmlGpmSampleFree"] == 3


def test_extra_labels_follow_every_sample(clock: FakeClock) -> None:
    nvml = FakeNvml(1, clock=clock)
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    rot = gpm.GpmRotator(nvml, partial(nvml.nvmlGpmMigSampleGet, handle, 1), gpm.MIG,
                         labels=((m.LABEL_GPU_INSTANCE, "1"),))
    rot.tick(False)
    clock.advance(1.0)
    assert all(s.labels == ((m.LABEL_GPU_INSTANCE, "1"),) for s in rot.tick(False).fast)


def test_percent_over_100_is_clamped_and_rates_are_not() -> None:
    sm = gpm.GpmMetric(2, m.SM_ACTIVE)
    pcie = gpm.GpmMetric(20, m.PCIE_TRANSMIT_RATE, gpm.MIB)
    assert sm.sample(100.3).value == 1.0
    assert pcie.sample(2.0).value == 2 * 1024 * 1024
