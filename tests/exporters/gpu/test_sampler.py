"""The sampler: what a round reads, cadences, and every failure contained where it happens."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest

from governor.contracts.metrics import gpu as m
from governor.exporters.gpu import nvml as nv
from governor.exporters.gpu import simulated as sim
from governor.exporters.gpu.fake import FakeNvml, Handle, Record
from governor.exporters.gpu.readings import Snapshot
from governor.exporters.gpu.sampler import Sampler, SamplerConfig, cuda_version
from tests.exporters.conftest import (
    ENGINE,
    WALL_EPOCH,
    FakeClock,
    engines_on,
    make_sampler,
    sample_values,
)

CID = "ab" * 32


def names(sampler: Sampler, gpu: int = 0) -> set[str]:
    return {s.name for s in sampler.latest().gpus[gpu].samples}


def test_a_round_reads_every_gpu(clock: FakeClock, tmp_path: Path) -> None:
    sampler = make_sampler(FakeNvml(3, clock=clock), clock, tmp_path)
    snapshot = sampler.tick()
    assert snapshot.nvml_up and snapshot.nvml_message == ""
    assert [g.identity.index for g in snapshot.gpus] == [0, 1, 2]
    assert all(g.up for g in snapshot.gpus)
    assert snapshot.system is not None and snapshot.system.cuda_version == "13.0"
    assert snapshot.last_success_at == WALL_EPOCH + clock()
    assert len({g.identity.uuid for g in snapshot.gpus}) == 3


def test_after_a_slow_round_every_catalogued_gpu_metric_is_there(
    clock: FakeClock, tmp_path: Path
) -> None:
    """GPU 0 runs an engine, GPU 1 is in MIG mode (whose utilisation rates NVML leaves out)."""
    nvml = engines_on(FakeNvml(2, clock=clock, mig={1: ("3g.71gb", "3g.71gb")}), 0)
    sampler = make_sampler(nvml, clock, tmp_path, xid=False, slow_interval_seconds=30.0)
    sampler.tick()
    clock.advance(30.0)
    sampler.tick()
    declared = {metric.name for metric in m.PER_GPU}
    seen = names(sampler, 0) | names(sampler, 1)
    assert declared - seen - {m.XID_ERRORS.name} == set()
    assert seen <= declared


def test_slow_readings_follow_the_slow_interval(clock: FakeClock, tmp_path: Path) -> None:
    nvml = FakeNvml(1, clock=clock)
    sampler = make_sampler(nvml, clock, tmp_path, slow_interval_seconds=10.0)
    sampler.tick()
    for _ in range(9):
        clock.advance(1.0)
        sampler.tick()
    assert nvml.calls["nvmlDeviceGetBAR1MemoryInfo"] == 1
    energy = sample_values(sampler, m.ENERGY.name)[()]
    clock.advance(1.0)
    sampler.tick()
    assert nvml.calls["nvmlDeviceGetBAR1MemoryInfo"] == 2
    assert sample_values(sampler, m.ENERGY.name)[()] > energy  # the counter moved, once
    assert dict(sampler.latest().phase_seconds)[m.PHASE_SLOW] >= 0.0


def test_gpm_ratios_appear_from_the_second_round(clock: FakeClock, tmp_path: Path) -> None:
    sampler = make_sampler(FakeNvml(1, clock=clock), clock, tmp_path)
    sampler.tick()
    assert m.SM_ACTIVE.name not in names(sampler)
    clock.advance(1.0)
    sampler.tick()
    assert {m.SM_ACTIVE.name, m.SM_OCCUPANCY.name, m.TENSOR_ACTIVE.name,
            m.DRAM_BANDWIDTH_UTILIZATION.name} <= names(sampler)


def test_no_gpm_on_older_gpus_is_said_once_and_costs_nothing(
    clock: FakeClock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    nvml = FakeNvml(2, clock=clock, gpm=False, model="NVIDIA A100-SXM4-80GB")
    sampler = make_sampler(nvml, clock, tmp_path)
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            sampler.tick()
            clock.advance(1.0)
    assert m.SM_ACTIVE.name not in names(sampler)
    assert m.UTILIZATION.name in names(sampler)
    assert nvml.calls["nvmlGpmSampleGet"] == 0
    assert sum("has no GPM" in r.getMessage() for r in caplog.records) == 2


def test_gpm_off_by_configuration(clock: FakeClock, tmp_path: Path) -> None:
    nvml = FakeNvml(1, clock=clock)
    make_sampler(nvml, clock, tmp_path, gpm=False).tick()
    assert nvml.calls["nvmlGpmQueryDeviceSupport"] == 0


def test_a_lost_gpu_reads_down_while_the_others_go_on(
    clock: FakeClock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    nvml = FakeNvml(2, clock=clock)
    sampler = make_sampler(nvml, clock, tmp_path)
    sampler.tick()
    nvml.lose(1)
    with caplog.at_level(logging.WARNING):
        for _ in range(5):
            clock.advance(1.0)
            snapshot = sampler.tick()
    assert [g.up for g in snapshot.gpus] == [True, False]
    assert snapshot.gpus[1].samples == ()  # nothing half-read is served
    assert m.UTILIZATION.name in names(sampler, 0)
    assert dict(snapshot.errors)[m.KIND_GPU_LOST] == 5
    assert sum("GPU is lost" in r.getMessage() for r in caplog.records) == 1
    nvml.recover(1)
    clock.advance(1.0)
    snapshot = sampler.tick()
    assert [g.up for g in snapshot.gpus] == [True, True]


def test_a_gpu_lost_at_start_is_picked_up_when_it_answers(clock: FakeClock, tmp_path: Path) -> None:
    nvml = FakeNvml(2, clock=clock)
    nvml.lose(0)
    sampler = make_sampler(nvml, clock, tmp_path, slow_interval_seconds=5.0)
    snapshot = sampler.tick()
    assert [g.up for g in snapshot.gpus] == [False, True]
    assert snapshot.gpus[0].identity.uuid == ""
    nvml.recover(0)
    clock.advance(5.0)
    snapshot = sampler.tick()
    assert snapshot.gpus[0].up and snapshot.gpus[0].identity.uuid.startswith("GPU-")


def test_an_unsupported_reading_is_asked_once(clock: FakeClock, tmp_path: Path) -> None:
    nvml = FakeNvml(1, clock=clock)
    nvml.fail("nvmlDeviceGetPowerUsage", nv.ERROR_NOT_SUPPORTED)
    sampler = make_sampler(nvml, clock, tmp_path)
    for _ in range(10):
        sampler.tick()
        clock.advance(1.0)
    assert nvml.calls["nvmlDeviceGetPowerUsage"] == 1
    assert dict(sampler.latest().errors)[m.KIND_NOT_SUPPORTED] == 1
    assert m.POWER.name not in names(sampler) and m.TEMPERATURE.name in names(sampler)


def test_no_nvml_package_is_a_clear_state_not_a_crash(clock: FakeClock, tmp_path: Path) -> None:
    unavailable = nv.NvmlUnavailable("the nvidia-ml-py package is not installed",
                                     m.KIND_LIBRARY_NOT_FOUND)
    sampler = Sampler(None, SamplerConfig(), unavailable=unavailable, monotonic=clock)
    snapshot = sampler.tick()
    assert not snapshot.nvml_up and snapshot.gpus == ()
    assert "nvidia-ml-py" in snapshot.nvml_message
    assert dict(snapshot.errors)[m.KIND_LIBRARY_NOT_FOUND] == 1
    sampler.close()


def test_no_driver_is_retried_and_logged_once(
    clock: FakeClock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    nvml = FakeNvml(1, clock=clock, init_error=nv.ERROR_DRIVER_NOT_LOADED)
    sampler = make_sampler(nvml, clock, tmp_path, nvml_retry_seconds=30.0)
    with caplog.at_level(logging.ERROR):
        for _ in range(29):
            snapshot = sampler.tick()
            clock.advance(1.0)
    assert nvml.calls["nvmlInit"] == 1
    assert not snapshot.nvml_up and "driver is not loaded" in snapshot.nvml_message
    assert len(caplog.records) == 1
    nvml.init_error = None  # the driver got loaded
    clock.advance(1.0)
    snapshot = sampler.tick()
    assert nvml.calls["nvmlInit"] == 2
    assert snapshot.nvml_up and snapshot.gpus[0].up


def test_a_bug_on_one_gpu_does_not_hide_the_others(clock: FakeClock, tmp_path: Path) -> None:
    class Broken(FakeNvml):
        def nvmlDeviceGetComputeRunningProcesses(self, handle: Handle) -> list[Record]:
            if handle.index == 0:
                raise ZeroDivisionError("a bug, not an NVML error")
            return super().nvmlDeviceGetComputeRunningProcesses(handle)

    sampler = make_sampler(engines_on(Broken(2, clock=clock), 0, 1), clock, tmp_path)
    snapshot = sampler.tick()
    assert all(g.up for g in snapshot.gpus)
    assert m.PROCESS_MEMORY_USED.name in names(sampler, 1)
    assert m.UTILIZATION.name in names(sampler, 0)  # read before the bug
    assert dict(snapshot.errors)[m.KIND_SAMPLER] == 1


def test_processes_carry_their_container(clock: FakeClock, tmp_path: Path) -> None:
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "cgroup").write_text(f"0::/system.slice/docker-{CID}.scope\n")
    nvml = FakeNvml(1, clock=clock, processes={0: [(4242, 1000), (77, 5)]})
    sampler = make_sampler(nvml, clock, tmp_path)
    sampler.tick()
    assert sample_values(sampler, m.PROCESS_MEMORY_USED.name) == {
        ((m.LABEL_PID, "77"), (m.LABEL_CONTAINER, "")): 5.0,
        ((m.LABEL_PID, "4242"), (m.LABEL_CONTAINER, CID)): 1000.0,
    }


def test_each_gpu_counts_its_processes_from_the_same_call(
    clock: FakeClock, tmp_path: Path
) -> None:
    nvml = FakeNvml(2, clock=clock, processes={0: [(4242, 1000), (77, 5), (78, 5)]})
    sampler = make_sampler(nvml, clock, tmp_path)
    sampler.tick()
    assert sample_values(sampler, m.PROCESS_COUNT.name, 0) == {(): 3.0}
    assert sample_values(sampler, m.PROCESS_COUNT.name, 1) == {(): 0.0}
    assert nvml.calls["nvmlDeviceGetComputeRunningProcesses"] == 2  # no second call for it


def test_mig_devices_are_listed_with_their_memory_and_activity(
    clock: FakeClock, tmp_path: Path
) -> None:
    """What the GPU runs shows on its first GPU instance; each instance has its profile's share
    of the memory; the parent's utilisation rates are not supported (asked once)."""
    nvml = engines_on(FakeNvml(2, clock=clock, mig={1: ("3g.71gb", "1g.18gb", "1g.18gb")}), 1)
    sampler = make_sampler(nvml, clock, tmp_path)
    sampler.tick()
    clock.advance(1.0)
    sampler.tick()
    assert sample_values(sampler, m.MIG_MODE.name, 0) == {(): 0.0}
    assert sample_values(sampler, m.MIG_MODE.name, 1) == {(): 1.0}
    info = sample_values(sampler, m.MIG_INFO.name, 1)
    profiles = {dict(labels)[m.LABEL_GPU_INSTANCE]: dict(labels)[m.LABEL_MIG_PROFILE]
                for labels in info}
    assert profiles == {"1": "NVIDIA H200 (simulated) MIG 3g.71gb",
                        "2": "NVIDIA H200 (simulated) MIG 1g.18gb",
                        "3": "NVIDIA H200 (simulated) MIG 1g.18gb"}
    assert all(dict(labels)[m.LABEL_MIG_UUID].startswith("MIG-") for labels in info)
    total = {dict(k)[m.LABEL_GPU_INSTANCE]: v
             for k, v in sample_values(sampler, m.MIG_MEMORY_TOTAL.name, 1).items()}
    assert total["2"] == total["3"] == pytest.approx(total["1"] / 4, abs=1024 * 1024)
    assert total["1"] == pytest.approx(sim.MEMORY_TOTAL_BYTES / 2, rel=1e-5)
    used = {dict(k)[m.LABEL_GPU_INSTANCE]: v
            for k, v in sample_values(sampler, m.MIG_MEMORY_USED.name, 1).items()}
    assert used["1"] > 10 * used["2"] and used["2"] == used["3"] > 0
    active = sample_values(sampler, m.MIG_SM_ACTIVE.name, 1)
    assert active[((m.LABEL_GPU_INSTANCE, "1"),)] == pytest.approx(sim.sm_active(ENGINE))
    assert active[((m.LABEL_GPU_INSTANCE, "2"),)] == active[((m.LABEL_GPU_INSTANCE, "3"),)] == 0
    assert sample_values(sampler, m.MIG_SM_ACTIVE.name, 0) == {}
    assert sample_values(sampler, m.UTILIZATION.name, 1) == {}
    assert sample_values(sampler, m.UTILIZATION.name, 0) != {}
    assert nvml.calls["nvmlDeviceGetUtilizationRates"] == 3  # GPU 0 twice, GPU 1 once


def test_xid_events_are_counted_by_gpu_and_code(clock: FakeClock, tmp_path: Path) -> None:
    nvml = FakeNvml(2, clock=clock)
    sampler = make_sampler(nvml, clock, tmp_path, xid=True)
    try:
        sampler.tick()
        nvml.inject_xid(1, 79)
        nvml.inject_xid(1, 79)
        nvml.inject_xid(1, 48)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            sampler.tick()
            if sum(sample_values(sampler, m.XID_ERRORS.name, 1).values()) == 3:
                break
            time.sleep(0.01)
        assert sample_values(sampler, m.XID_ERRORS.name, 1) == {
            ((m.LABEL_XID, "48"),): 1.0, ((m.LABEL_XID, "79"),): 2.0}
        assert sample_values(sampler, m.XID_ERRORS.name, 0) == {}
        nvml.lose(1)  # XID 79 is "fallen off the bus": its count must outlive the GPU
        nvml.inject_xid(1, 79)  # and one from the lost GPU still lands on it
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            sampler.tick()
            if sum(sample_values(sampler, m.XID_ERRORS.name, 1).values()) == 4:
                break
            time.sleep(0.01)
        assert not sampler.latest().gpus[1].up
        assert sample_values(sampler, m.XID_ERRORS.name, 1)[((m.LABEL_XID, "79"),)] == 3.0
    finally:
        sampler.close()
    assert nvml.calls["nvmlEventSetFree"] == 1


def test_xid_events_not_supported_leave_sampling_alone(clock: FakeClock, tmp_path: Path) -> None:
    nvml = FakeNvml(1, clock=clock)
    nvml.fail("nvmlDeviceRegisterEvents", nv.ERROR_NOT_SUPPORTED)
    sampler = make_sampler(nvml, clock, tmp_path, xid=True)
    snapshot = sampler.tick()
    assert snapshot.gpus[0].up
    assert dict(snapshot.errors)[m.KIND_NOT_SUPPORTED] == 1
    sampler.close()
    assert nvml.calls["nvmlEventSetFree"] == 1


def test_close_frees_gpm_and_shuts_nvml_down(clock: FakeClock, tmp_path: Path) -> None:
    nvml = FakeNvml(2, clock=clock)
    sampler = make_sampler(nvml, clock, tmp_path)
    sampler.tick()
    sampler.close()
    assert nvml.calls["nvmlGpmSampleFree"] == nvml.calls["nvmlGpmSampleAlloc"] == 6
    assert nvml.calls["nvmlShutdown"] == 1


def test_run_ticks_on_its_interval_and_stops(tmp_path: Path) -> None:
    nvml = FakeNvml(1)
    sampler = Sampler(nvml, SamplerConfig(interval_seconds=0.1, xid=False, source="fake"))
    stop, seen = threading.Event(), list[Snapshot]()
    thread = threading.Thread(target=sampler.run, args=(stop, seen.append))
    thread.start()
    time.sleep(0.55)
    stop.set()
    thread.join(5)
    sampler.close()
    assert not thread.is_alive()
    assert 3 <= len(seen) <= 8
    assert [s.sequence for s in seen] == list(range(1, len(seen) + 1))


def test_a_failing_round_is_counted_and_sampling_goes_on(tmp_path: Path) -> None:
    sampler = Sampler(FakeNvml(1), SamplerConfig(interval_seconds=0.1, xid=False))
    calls = []

    def explode(snapshot: object) -> None:
        calls.append(snapshot)
        raise RuntimeError("a callback bug")

    stop = threading.Event()
    thread = threading.Thread(target=sampler.run, args=(stop, explode))
    thread.start()
    time.sleep(0.35)
    stop.set()
    thread.join(5)
    sampler.close()
    assert len(calls) >= 2
    assert dict(sampler.latest().errors)[m.KIND_SAMPLER] >= 1


@pytest.mark.parametrize(("encoded", "text"), [(13000, "13.0"), (12040, "12.4"), (11080, "11.8")])
def test_cuda_version(encoded: int, text: str) -> None:
    assert cuda_version(encoded) == text


def test_gpm_that_stops_answering_is_not_served_from_memory(
    clock: FakeClock, tmp_path: Path
) -> None:
    """NVIDIA/DCGM#214: GPM can start answering NO_PERMISSION after a while."""
    nvml = FakeNvml(1, clock=clock)
    sampler = make_sampler(nvml, clock, tmp_path, slow_interval_seconds=10.0)
    for _ in range(11):
        sampler.tick()
        clock.advance(1.0)
    assert {m.SM_ACTIVE.name, m.TENSOR_PIPE_ACTIVE.name} <= names(sampler)
    nvml.fail("nvmlGpmSampleGet", nv.ERROR_NO_PERMISSION)
    for _ in range(10):
        sampler.tick()
        clock.advance(1.0)
    assert m.SM_ACTIVE.name not in names(sampler)
    assert m.TENSOR_PIPE_ACTIVE.name not in names(sampler)  # gone with the next slow round
    assert dict(sampler.latest().errors)[m.KIND_NO_PERMISSION] == 10
    nvml.heal("nvmlGpmSampleGet")
    for _ in range(2):
        sampler.tick()
        clock.advance(1.0)
    assert m.SM_ACTIVE.name in names(sampler)


def test_a_gpu_where_nothing_ran_has_no_process_shares_and_no_error(
    clock: FakeClock, tmp_path: Path,
) -> None:
    nvml = engines_on(FakeNvml(2, clock=clock), 0)
    sampler = make_sampler(nvml, clock, tmp_path)
    for _ in range(3):
        clock.advance(1.0)
        snapshot = sampler.tick()
    assert sample_values(sampler, m.PROCESS_SM_UTILIZATION.name, 1) == {}
    assert set(sample_values(sampler, m.PROCESS_SM_UTILIZATION.name, 0).values()) == {0.5}
    assert dict(snapshot.errors)[m.KIND_NOT_FOUND] == 0
    assert nvml.calls["nvmlDeviceGetProcessUtilization"] == 6
