"""What one sampling round produced: plain immutable data, no NVML objects, no metric families.

The sampler thread builds a new :class:`Snapshot` every interval and publishes it by replacing a
reference; a scrape renders whichever snapshot it finds. Nothing here is ever mutated, so the
scrape path needs no lock.
"""

from __future__ import annotations

from dataclasses import dataclass

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Sample:
    """One value of one metric for one GPU; ``labels`` are those beyond gpu/uuid/model."""

    name: str
    value: float
    labels: Labels = ()


@dataclass(frozen=True, slots=True)
class GpuIdentity:
    index: int
    uuid: str
    model: str
    pci_bus_id: str


@dataclass(frozen=True, slots=True)
class SystemInfo:
    driver_version: str
    cuda_version: str


@dataclass(frozen=True, slots=True)
class GpuReading:
    identity: GpuIdentity
    up: bool
    samples: tuple[Sample, ...] = ()


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The exporter's whole state as of one sampling round."""

    sequence: int
    taken_at: float  # wall clock, seconds since the epoch
    taken_monotonic: float  # the sampler's monotonic clock, for staleness
    source: str  # "nvml" or "fake"
    nvml_up: bool
    nvml_message: str  # why NVML is unavailable, "" when it is up
    system: SystemInfo | None = None
    gpus: tuple[GpuReading, ...] = ()
    errors: tuple[tuple[str, int], ...] = ()  # kind → count since start, every kind present
    collect_seconds: float = 0.0  # wall time of this round
    phase_seconds: tuple[tuple[str, float], ...] = ()
    cpu_seconds_total: float = 0.0  # sampler thread CPU time since start
    collections_total: int = 0
    last_success_at: float | None = None  # wall clock of the last round that read a GPU

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)
