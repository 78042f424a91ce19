"""--follow: device reports become what the engine's fake GPU shows, on the exporter's clock."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import pytest

from governor.contracts.metrics import gpu as m
from governor.contracts.simdevice import (
    STRAY_PROCESS_MEMORY_BYTES,
    DeviceReport,
    Faults,
    fake_gpu_uuid,
)
from governor.exporters.gpu import simulated as sim
from governor.exporters.gpu.fake import FakeNvml
from governor.exporters.gpu.follow import STALE_INTERVALS, DeviceFollower
from governor.exporters.gpu.poller import MAX_REPORT_BYTES, DevicePoller, ReportError
from governor.exporters.gpu.sampler import Sampler
from tests.exporters.conftest import FakeClock, make_sampler, sample_values

GPU0 = fake_gpu_uuid(0)
GIB = 2**30
HEALTHY = Faults()
THERMAL = Faults(clock_ratio=0.5, clock_reasons=("hw_thermal", "sw_power_cap"))


def report(busy: float = 0.0, *, compute: float | None = None, memory: float | None = None,
           steps: int = 0, tokens: int = 0, faults: Faults = HEALTHY,
           xids: dict[int, int] | None = None, ecc: int = 0, uuid: str = GPU0) -> DeviceReport:
    return DeviceReport(uuid, busy, 0.25 * busy if compute is None else compute,
                        0.5 * busy if memory is None else memory, 0.0, steps, tokens,
                        100 * GIB, 140 * GIB, faults, xids or {}, ecc)


class Engine:
    """A followed service whose report a test writes; it fails when ``down``."""

    def __init__(self) -> None:
        self.report = report()
        self.down = False
        self.asked: list[tuple[str, float]] = []

    def __call__(self, url: str, timeout: float) -> bytes:
        self.asked.append((url, timeout))
        if self.down:
            raise ReportError("connection refused")
        return json.dumps(self.report.as_dict()).encode()


@pytest.fixture
def engine() -> Engine:
    return Engine()


def follow(clock: FakeClock, engine: Engine, tmp_path: Path, gpus: int = 2
           ) -> tuple[DevicePoller, FakeNvml, Sampler]:
    nvml = FakeNvml(gpus, clock=clock)
    poller = DevicePoller(["http://inference:8000/"], nvml, interval_seconds=1.0, fetch=engine,
                          monotonic=clock)
    return poller, nvml, make_sampler(nvml, clock, tmp_path)


def step(clock: FakeClock, poller: DevicePoller, sampler: Sampler, engine: Engine,
         new: DeviceReport) -> None:
    """One interval later, the engine reports ``new``; the poller then the sampler run."""
    clock.advance(1.0)
    engine.report = new
    poller.poll()
    sampler.tick()


def value(sampler: Sampler, metric: m.GpuMetric, gpu: int = 0, **labels: str) -> float:
    values = sample_values(sampler, metric.name, gpu)
    return values[tuple(sorted(labels.items()))] if labels else values[()]


def test_it_asks_the_service_s_device_path_with_a_short_timeout(
    clock: FakeClock, engine: Engine, tmp_path: Path,
) -> None:
    poller, _, _ = follow(clock, engine, tmp_path)
    poller.poll()
    assert engine.asked == [("http://inference:8000/sim/device", 1.0)]


def test_rates_are_the_counters_deltas_over_the_interval(
    clock: FakeClock, engine: Engine, tmp_path: Path,
) -> None:
    poller, _, sampler = follow(clock, engine, tmp_path)
    step(clock, poller, sampler, engine, report(10.0, steps=100, tokens=1000))
    step(clock, poller, sampler, engine, report(10.7, compute=2.5 + 0.2, memory=5.0 + 0.6,
                                                steps=200, tokens=5000))
    assert value(sampler, m.SM_ACTIVE) == pytest.approx(0.7)
    assert value(sampler, m.TENSOR_ACTIVE) == pytest.approx(0.2)
    assert value(sampler, m.DRAM_BANDWIDTH_UTILIZATION) == pytest.approx(0.6)
    tx = value(sampler, m.PCIE_TRANSMIT_RATE)
    assert tx == pytest.approx(sim.PCIE_IDLE_TX + sim.PCIE_TX_PER_TOKEN * 4000)
    assert value(sampler, m.CLOCK, clock="sm") == sim.SM_CLOCK_MAX_MHZ * 1e6
    assert value(sampler, m.CLOCK_EVENT_ACTIVE, reason="gpu_idle") == 0.0
    assert value(sampler, m.MEMORY_USED) == 100 * GIB
    assert value(sampler, m.POWER) > sim.POWER_IDLE_W + 100
    # GPU 1 runs nothing: idle, flat, empty.
    assert value(sampler, m.SM_ACTIVE, gpu=1) == 0.0
    assert value(sampler, m.CLOCK, gpu=1, clock="sm") == sim.SM_CLOCK_IDLE_MHZ * 1e6
    assert value(sampler, m.CLOCK_EVENT_ACTIVE, gpu=1, reason="gpu_idle") == 1.0
    assert value(sampler, m.MEMORY_USED, gpu=1) == 0.0
    assert sample_values(sampler, m.PROCESS_MEMORY_USED.name, 1) == {}


def test_without_an_answer_the_gpu_goes_idle_and_the_failure_is_logged_once_a_minute(
    clock: FakeClock, engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    poller, _, sampler = follow(clock, engine, tmp_path)
    step(clock, poller, sampler, engine, report(10.0, steps=10))
    step(clock, poller, sampler, engine, report(10.8, steps=20))
    engine.down = True
    with caplog.at_level(logging.WARNING):
        for _ in range(STALE_INTERVALS):
            step(clock, poller, sampler, engine, engine.report)
            assert value(sampler, m.SM_ACTIVE) == pytest.approx(0.8)  # the last interval's
        step(clock, poller, sampler, engine, engine.report)
        assert value(sampler, m.SM_ACTIVE) == 0.0
        assert value(sampler, m.MEMORY_USED) == 0.0
        assert value(sampler, m.CLOCK_EVENT_ACTIVE, reason="gpu_idle") == 1.0
        for _ in range(60):
            step(clock, poller, sampler, engine, engine.report)
    warnings = [r for r in caplog.records if "no device report" in r.getMessage()]
    assert len(warnings) == 2  # at the first failure, and a minute later


def test_held_down_clocks_show_their_reasons_and_the_fault_s_share(
    clock: FakeClock, engine: Engine, tmp_path: Path,
) -> None:
    poller, nvml, sampler = follow(clock, engine, tmp_path)
    step(clock, poller, sampler, engine, report(1.0, faults=THERMAL))
    step(clock, poller, sampler, engine, report(1.9, faults=THERMAL))
    assert value(sampler, m.CLOCK, clock="sm") == 990e6
    reasons = sample_values(sampler, m.CLOCK_EVENT_ACTIVE.name)
    assert {dict(k)["reason"] for k, v in reasons.items() if v} == {"hw_thermal", "sw_power_cap"}
    assert nvml.nvmlDeviceGetCurrentClocksEventReasons(nvml.nvmlDeviceGetHandleByIndex(0)) == \
        0x40 | 0x4
    # The injected power cap is a lowered limit, held at while the GPU works; the board's own
    # limit stays, which is how the verdict tells it from an engine at the board's limit.
    capped = sim.POWER_CAPPED_SHARE * sim.POWER_MAX_W
    assert value(sampler, m.POWER) == pytest.approx(0.98 * capped)
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetEnforcedPowerLimit(handle) == round(1000 * capped)
    assert nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle) == round(1000 * sim.POWER_MAX_W)


def test_the_temperature_follows_the_power_slowly(
    clock: FakeClock, engine: Engine, tmp_path: Path,
) -> None:
    poller, _, sampler = follow(clock, engine, tmp_path)
    temperatures = []
    for second in range(120):
        step(clock, poller, sampler, engine, report(0.95 * second, steps=second))
        temperatures.append(value(sampler, m.TEMPERATURE))
    assert temperatures[0] == sim.TEMPERATURE_IDLE_C
    assert temperatures == sorted(temperatures)
    assert temperatures[10] < temperatures[-1] - 5  # still climbing after 10 s


def test_a_co_tenant_is_a_second_process_with_its_memory_and_sm_share(
    clock: FakeClock, engine: Engine, tmp_path: Path,
) -> None:
    shared = Faults(cotenant_sm_ratio=0.3, cotenant_memory_bytes=20 * GIB)
    poller, _, sampler = follow(clock, engine, tmp_path)
    step(clock, poller, sampler, engine, report(1.0, faults=shared))
    step(clock, poller, sampler, engine, report(1.5, faults=shared))
    memory = sample_values(sampler, m.PROCESS_MEMORY_USED.name)
    engine_pid, cotenant_pid = str(sim.ENGINE_PID), str(sim.COTENANT_PID)
    assert {dict(k)["pid"]: v for k, v in memory.items()} == {engine_pid: 100 * GIB,
                                                              cotenant_pid: 20 * GIB}
    shares = sample_values(sampler, m.PROCESS_SM_UTILIZATION.name)
    assert {dict(k)["pid"]: v for k, v in shares.items()} == {engine_pid: 0.5, cotenant_pid: 0.3}
    assert value(sampler, m.SM_ACTIVE) == pytest.approx(0.8)
    assert value(sampler, m.MEMORY_USED) == 120 * GIB


def test_stray_contexts_are_processes_that_hold_memory_and_run_nothing(
    clock: FakeClock, engine: Engine, tmp_path: Path,
) -> None:
    stray = Faults(stray_processes=3)
    poller, _, sampler = follow(clock, engine, tmp_path)
    step(clock, poller, sampler, engine, report(1.0, faults=stray))
    step(clock, poller, sampler, engine, report(1.5, faults=stray))
    assert value(sampler, m.PROCESS_COUNT) == 4
    assert value(sampler, m.PROCESS_COUNT, gpu=1) == 0
    memory = sample_values(sampler, m.PROCESS_MEMORY_USED.name)
    strays = {dict(k)["pid"]: v for k, v in memory.items() if dict(k)["pid"] != str(sim.ENGINE_PID)}
    assert strays == {str(sim.STRAY_PID + k): STRAY_PROCESS_MEMORY_BYTES for k in range(3)}
    assert value(sampler, m.MEMORY_USED) == 100 * GIB + 3 * STRAY_PROCESS_MEMORY_BYTES
    shares = sample_values(sampler, m.PROCESS_SM_UTILIZATION.name)
    assert {v for k, v in shares.items() if dict(k)["pid"] in strays} == {0.0}


def test_each_new_xid_is_delivered_once_as_an_event(
    clock: FakeClock, engine: Engine, tmp_path: Path,
) -> None:
    nvml = FakeNvml(2, clock=clock)
    delivered: list[tuple[int, int]] = []
    nvml.inject_xid = lambda gpu, xid: delivered.append((gpu, xid))  # type: ignore[method-assign]
    poller = DevicePoller(["http://x:1"], nvml, interval_seconds=1.0, fetch=engine,
                          monotonic=clock)
    for xids, ecc in (({79: 1}, 0), ({79: 1}, 0), ({79: 3, 31: 1}, 4), ({79: 3, 31: 1}, 4)):
        clock.advance(1.0)
        engine.report = report(xids=xids, ecc=ecc)
        poller.poll()
    # The first report's XID was raised before anyone listened: only what came after counts.
    assert delivered == [(0, 31), (0, 79), (0, 79)]
    assert nvml.state(0).ecc_uncorrected == 4


def test_an_engine_restart_counts_from_zero_and_the_gpu_s_ecc_keeps_growing(
    clock: FakeClock, engine: Engine, tmp_path: Path,
) -> None:
    poller, nvml, sampler = follow(clock, engine, tmp_path)
    delivered: list[tuple[int, int]] = []
    nvml.inject_xid = lambda gpu, xid: delivered.append((gpu, xid))  # type: ignore[method-assign]
    step(clock, poller, sampler, engine, report(500.0, steps=90_000, xids={79: 5}, ecc=10))
    step(clock, poller, sampler, engine, report(500.6, steps=90_100, xids={79: 5}, ecc=10))
    step(clock, poller, sampler, engine, report(0.3, steps=40, xids={79: 1}, ecc=2))  # restarted
    assert value(sampler, m.SM_ACTIVE) == pytest.approx(0.3)  # not a negative rate, not zero
    assert delivered == [(0, 79)]
    assert value(sampler, m.ECC_UNCORRECTED_ERRORS) == 12.0


def test_a_report_for_a_gpu_that_is_not_here_is_said_once(
    clock: FakeClock, engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    engine.report = report(uuid=fake_gpu_uuid(0, seed=7))
    poller, nvml, _ = follow(clock, engine, tmp_path)
    with caplog.at_level(logging.WARNING):
        for _ in range(5):
            clock.advance(1.0)
            poller.poll()
    assert sum("none of the 2 fake GPUs" in r.getMessage() for r in caplog.records) == 1
    assert nvml.states == (sim.IDLE, sim.IDLE)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"<html>502 Bad Gateway</html>", id="not JSON"),
        pytest.param(b'{"busy_seconds": 1}', id="JSON without a GPU"),
        pytest.param(b'{"busy_seconds": -1}', id="a negative counter"),
        pytest.param(b"[" * 50_000 + b"]" * 50_000, id="nested too deep"),
        pytest.param(b'{"steps": ' + b"9" * 400 + b"}", id="a 400-digit counter"),
    ],
)
def test_an_answer_that_is_not_a_report_is_a_failure_not_a_crash(
    clock: FakeClock, tmp_path: Path, body: bytes, caplog: pytest.LogCaptureFixture,
) -> None:
    nvml = FakeNvml(1, clock=clock)
    poller = DevicePoller(["http://x:1"], nvml, interval_seconds=1.0,
                          fetch=lambda url, timeout: body, monotonic=clock)
    with caplog.at_level(logging.WARNING):
        poller.poll()
    assert "no device report" in caplog.text
    assert nvml.states == (sim.IDLE,)


def test_the_real_fetch_reads_at_most_a_bounded_answer(tmp_path: Path) -> None:
    """Served by a local HTTP server: a body past the bound is refused, not read whole."""
    import http.server
    import threading

    from governor.exporters.gpu.poller import fetch

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"x" * (MAX_REPORT_BYTES + 10) if self.path == "/big" else b"{}"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert fetch(f"{base}/ok", 1.0) == b"{}"
        with pytest.raises(ReportError, match="over"):
            fetch(f"{base}/big", 1.0)
        with pytest.raises(ReportError):
            fetch("http://127.0.0.1:9/", 0.5)  # nothing listens on the discard port
    finally:
        server.shutdown()


def test_a_state_s_readings_follow_from_it_alone() -> None:
    idle_hot = replace(sim.IDLE, temperature_c=80.0)
    assert sim.is_idle(idle_hot) and sim.power_watts(idle_hot) == sim.POWER_IDLE_W
    busy = replace(sim.IDLE, busy=0.99, dram=0.89, engine_memory_bytes=1)
    assert 470 < sim.power_watts(busy) < 500  # the H200's memory copy: 485 W
    multiply = replace(sim.IDLE, busy=0.96, tensor=0.93, dram=0.17)
    assert sim.power_watts(multiply) == sim.POWER_MAX_W  # at its limit, as measured
    follower = DeviceFollower([GPU0], interval_seconds=1.0)
    assert follower.settle(now=0.0) == (sim.IDLE,)
