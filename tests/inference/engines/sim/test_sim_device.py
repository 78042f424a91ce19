"""The simulated GPU: what each step charges to it, and how each fault slows the steps."""

from __future__ import annotations

import asyncio
import itertools
import random
import time

import pytest
from prometheus_client import CollectorRegistry

from governor.contracts.simdevice import XID_INTERVAL_SECONDS, Faults, fake_gpu_uuid
from governor.inference.engines.base import GenerateRequest, SamplingOptions
from governor.inference.engines.settings import EngineSettings
from governor.inference.engines.sim.device import (
    LINK_SERVICE_SECONDS,
    SimDevice,
    memory_used_bytes,
)
from governor.inference.engines.sim.engine import create_sim_engine
from governor.inference.engines.sim.presets import ACTIVATION_RESERVE_BYTES, get_preset
from governor.inference.engines.sim.roofline import Roofline, StepShape
from governor.inference.engines.sim.virtual import VirtualSim

H200 = get_preset("llama-3-8b@h200")
THERMAL = ("hw_thermal",)


def decode_shape(batch: int, context: int) -> StepShape:
    shape = StepShape()
    for _ in range(batch):
        shape.add_decode(context)
    return shape


def mixed_shape() -> StepShape:
    shape = decode_shape(32, 900)
    shape.add_prefill(0, 2048, samples=False)
    shape.add_prefill(4096, 1024, samples=True)
    return shape


def test_a_step_s_parts_add_up_to_its_time() -> None:
    roofline = Roofline.of(H200)
    rng = random.Random(7)
    for _ in range(200):
        shape = decode_shape(rng.randrange(0, 300), rng.randrange(1, 8000))
        if rng.random() < 0.5:
            shape.add_prefill(rng.randrange(0, 4000), rng.randrange(1, 4000), samples=True)
        parts = roofline.parts(shape)
        assert parts.host + parts.gpu == pytest.approx(roofline.step_seconds(shape), rel=1e-12)
        assert 0 <= parts.compute <= parts.gpu and 0 <= parts.memory <= parts.gpu


def test_a_decode_step_is_memory_bound_and_a_prefill_step_compute_bound() -> None:
    roofline = Roofline.of(H200)
    decode, prefill = roofline.parts(decode_shape(8, 1000)), roofline.parts(mixed_shape())
    assert decode.memory / decode.gpu > 0.9 and decode.compute / decode.gpu < 0.2
    assert prefill.compute / prefill.gpu > 0.6


def test_every_step_is_charged_in_wall_seconds() -> None:
    roofline, device = Roofline.of(H200), SimDevice(H200, "GPU-x", time_scale=2.0)
    shapes = [decode_shape(4, 500), mixed_shape(), decode_shape(64, 3000)]
    for shape in shapes:
        device.step(roofline.parts(shape), roofline.step_seconds(shape), shape.scheduled_tokens)
    report = device.report(now=0.0)
    parts = [roofline.parts(shape) for shape in shapes]
    assert report.steps == 3
    assert report.tokens == sum(shape.scheduled_tokens for shape in shapes)
    assert report.busy_seconds == pytest.approx(2 * sum(p.gpu for p in parts))
    assert report.compute_seconds == pytest.approx(2 * sum(p.compute for p in parts))
    assert report.memory_seconds == pytest.approx(2 * sum(p.memory for p in parts))
    assert report.link_seconds == 0.0


def test_the_engine_holds_its_weights_kv_pool_and_activations() -> None:
    used = memory_used_bytes(H200)
    assert used == int(16.06e9 + 840_016 * 131_072 + ACTIVATION_RESERVE_BYTES)
    report = SimDevice(H200, "GPU-x").report(now=0.0)
    assert report.memory_used_bytes == used < report.memory_total_bytes == 143_771 * 2**20


def step_time(faults: Faults, shape: StepShape) -> tuple[float, float, SimDevice]:
    """(the faulted step's seconds, the healthy one's, the device)."""
    roofline, device = Roofline.of(H200), SimDevice(H200, "GPU-x")
    device.set_faults(faults, now=0.0)
    healthy = roofline.step_seconds(shape)
    return device.step(roofline.parts(shape), healthy), healthy, device


@pytest.mark.parametrize("shape", [decode_shape(16, 2000), mixed_shape()],
                         ids=["a decode step", "a mixed step"])
def test_held_down_clocks_stretch_the_kernels_not_the_host(shape: StepShape) -> None:
    parts = Roofline.of(H200).parts(shape)
    slow, _, device = step_time(Faults(clock_ratio=0.5, clock_reasons=THERMAL), shape)
    assert slow == pytest.approx(parts.host + 2 * parts.gpu)
    assert device.report(0.0).busy_seconds == pytest.approx(2 * parts.gpu)


def test_a_co_tenant_s_share_stretches_the_kernels_but_is_not_the_engine_s_busy_time() -> None:
    shape = decode_shape(16, 2000)
    parts = Roofline.of(H200).parts(shape)
    slow, _, device = step_time(Faults(cotenant_sm_ratio=0.6), shape)
    assert slow == pytest.approx(parts.host + parts.gpu / 0.4)
    assert device.report(0.0).busy_seconds == pytest.approx(parts.gpu)


def test_a_loaded_link_adds_a_wait_that_grows_with_its_load() -> None:
    shape = decode_shape(1, 500)
    waits = [step_time(Faults(link_ratio=r), shape)[0] - step_time(Faults(), shape)[0]
             for r in (0.5, 0.9, 0.99)]
    assert waits == pytest.approx([LINK_SERVICE_SECONDS, 9 * LINK_SERVICE_SECONDS,
                                   99 * LINK_SERVICE_SECONDS])
    _, _, device = step_time(Faults(link_ratio=0.9), shape)
    assert device.report(0.0).link_seconds == pytest.approx(9 * LINK_SERVICE_SECONDS)


def test_healing_gives_the_roofline_s_step_back_exactly() -> None:
    shape = mixed_shape()
    roofline, device = Roofline.of(H200), SimDevice(H200, "GPU-x")
    device.set_faults(Faults(clock_ratio=0.3, clock_reasons=THERMAL, link_ratio=0.5), now=0.0)
    device.set_faults(Faults(), now=1.0)
    healthy = roofline.step_seconds(shape)
    assert device.step(roofline.parts(shape), healthy) is healthy


def test_an_xid_is_raised_at_once_then_every_interval_and_stalls_the_engine() -> None:
    device = SimDevice(H200, "GPU-x")
    device.set_faults(Faults(xid=79, ecc_uncorrected_per_xid=2, stall_seconds=5.0), now=100.0)
    assert device.report(100.0).xid_events == {79: 1}
    assert device.resume_at(101.0) == 105.0
    assert device.resume_at(106.0) == 106.0
    later = 100.0 + 2 * XID_INTERVAL_SECONDS + 1.0
    report = device.report(later)
    assert report.xid_events == {79: 3} and report.ecc_uncorrected_total == 6
    assert device.resume_at(later) == 100.0 + 2 * XID_INTERVAL_SECONDS + 5.0
    device.set_faults(Faults(), now=later)
    assert device.report(later + 1000.0).xid_events == {79: 3}  # counted for good, no more


def test_a_leak_grows_the_engine_s_memory_while_set_and_keeps_it_when_healed() -> None:
    device = SimDevice(H200, "GPU-x")
    start = device.report(0.0).memory_used_bytes
    device.set_faults(Faults(leak_bytes_per_second=2**20), now=10.0)
    assert device.report(10.0).memory_used_bytes == start  # nothing leaked before it was set
    assert device.report(40.0).memory_used_bytes == start + 30 * 2**20
    device.set_faults(Faults(), now=50.0)
    assert device.report(500.0).memory_used_bytes == start + 40 * 2**20
    device.set_faults(Faults(leak_bytes_per_second=2.0**31), now=500.0)
    report = device.report(10_000.0)
    assert report.memory_used_bytes == report.memory_total_bytes  # never past the GPU's memory


def test_the_same_xid_put_again_keeps_its_schedule() -> None:
    device = SimDevice(H200, "GPU-x")
    faults = Faults(xid=43)
    device.set_faults(faults, now=0.0)
    device.set_faults(Faults(xid=43, stall_seconds=1.0), now=5.0)
    assert device.report(XID_INTERVAL_SECONDS - 1).xid_events == {43: 1}


def chat_itl_p50(faults: Faults) -> float:
    """The median inter-token latency of 8 decoding chats beside nothing else, in virtual time."""
    sim = VirtualSim(H200, seed=1)
    sim.core.device.set_faults(faults, now=0.0)
    for _ in range(8):
        sim.submit(arrival=0.0, prompt=300, output_tokens=200)
    sim.run_until_idle()
    return sim.window(0.0, sim.now).itl_p50


def test_each_fault_slows_a_decoding_chat_as_a_drill_expects() -> None:
    healthy = chat_itl_p50(Faults())
    assert healthy < 0.010
    assert chat_itl_p50(Faults(clock_ratio=0.5, clock_reasons=THERMAL)) > 1.7 * healthy
    assert chat_itl_p50(Faults(cotenant_sm_ratio=0.5)) > 1.7 * healthy
    assert chat_itl_p50(Faults(link_ratio=0.9)) > 0.120  # past the default ITL SLO


def test_the_virtual_driver_charges_its_steps_too() -> None:
    sim = VirtualSim(H200, seed=1)
    sim.submit(arrival=0.0, prompt=2000, output_tokens=50)
    sim.run_until_idle()
    report = sim.core.device.report(sim.now)
    assert report.steps == len(sim.steps) and report.tokens == 2000 + 49
    assert 0 < report.busy_seconds < sum(step.duration for step in sim.steps)


# ---- the real-time engine ---------------------------------------------------------------------


async def test_the_engine_runs_on_the_exporter_s_first_fake_gpu_unless_told() -> None:
    default = create_sim_engine(EngineSettings(preset="tiny"), CollectorRegistry())
    assert default.gpu_uuids == (fake_gpu_uuid(0),)
    other = create_sim_engine(EngineSettings(preset="tiny", gpu_uuid=fake_gpu_uuid(1)),
                              CollectorRegistry())
    assert other.device_report().gpu_uuid == fake_gpu_uuid(1)


async def test_an_xid_stalls_the_step_loop() -> None:
    engine = create_sim_engine(EngineSettings(preset="tiny"), CollectorRegistry())
    await engine.start()
    try:
        prompt = engine.render_chat([{"role": "user", "content": "hello"}])
        request = GenerateRequest("r1", prompt, tuple(engine.tokenize(prompt)), max_tokens=400,
                                  sampling=SamplingOptions(ignore_eos=True))
        arrivals: list[float] = []
        stream = engine.generate(request)
        async for _ in stream:
            arrivals.append(time.monotonic())
            if len(arrivals) == 20:
                engine.set_faults(Faults(xid=79, stall_seconds=0.3))
        gaps = [b - a for a, b in itertools.pairwise(arrivals)]
        assert max(gaps) >= 0.25
        assert engine.device_report().xid_events == {79: 1}
        assert engine.faults.xid == 79
    finally:
        await engine.close()


async def test_a_slow_tokenizer_takes_its_time_per_kib() -> None:
    engine = create_sim_engine(EngineSettings(preset="tiny"), CollectorRegistry())
    text = "x" * 4096
    engine.set_faults(Faults(tokenize_seconds_per_kib=0.05))
    started = time.monotonic()
    await asyncio.to_thread(engine.tokenize, text)
    assert time.monotonic() - started >= 0.19
    engine.set_faults(Faults())
    started = time.monotonic()
    engine.tokenize(text)
    assert time.monotonic() - started < 0.05
