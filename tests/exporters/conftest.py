"""Shared pieces of the exporter tests: a settable clock and samplers over the fake NVML."""

from __future__ import annotations

from pathlib import Path

import pytest

from governor.exporters.gpu import simulated as sim
from governor.exporters.gpu.fake import FakeNvml
from governor.exporters.gpu.sampler import Sampler, SamplerConfig

WALL_EPOCH = 1_700_000_000.0
# A fake GPU running a simulated engine, as --follow shows it.
ENGINE = sim.GpuState(busy=0.5, tensor=0.25, dram=0.4, tokens_per_second=2000.0,
                      engine_memory_bytes=100 * 2**30, temperature_c=55.0)


def engines_on(nvml: FakeNvml, *gpus: int, state: sim.GpuState = ENGINE) -> FakeNvml:
    """``nvml`` with an engine running on each of ``gpus`` (the others idle)."""
    nvml.states = tuple(state if i in gpus else sim.IDLE for i in range(nvml.gpu_count))
    return nvml


class FakeClock:
    """Monotonic seconds that move only when a test says so."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def make_sampler(
    nvml: FakeNvml | None, clock: FakeClock, proc_root: Path, **config: object
) -> Sampler:
    """A sampler on the fake clock: wall time, monotonic time and thread CPU all pinned."""
    settings = SamplerConfig(**{"xid": False, "source": "fake", **config})  # type: ignore[arg-type]
    return Sampler(nvml, settings, wall=lambda: WALL_EPOCH + clock(), monotonic=clock,
                   thread_cpu=lambda: 0.0, proc_root=proc_root)


def sample_values(
    sampler: Sampler, name: str, gpu: int = 0
) -> dict[tuple[tuple[str, str], ...], float]:
    """The values of one metric for one GPU in the latest snapshot, keyed by extra labels."""
    reading = sampler.latest().gpus[gpu]
    return {s.labels: s.value for s in reading.samples if s.name == name}
