"""What some engines can do beyond :class:`~governor.inference.engines.base.Engine`.

The service asks with ``isinstance`` and offers what the engine has: an engine that knows the
GPUs it runs on names them on ``/metrics`` (``governor_engine_gpu_info``) and on its spans; an
engine placed in a data-parallel deployment (vLLM) puts its place on its spans too; an engine
whose GPU is simulated answers ``GET /sim/device`` and takes faults on
``PUT /admin/sim/faults``. The ``Engine`` protocol itself stays what every engine must do::

    if isinstance(engine, SimulatedGpu):
        engine.set_faults(Faults(cotenant_sm_ratio=0.4))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from governor.contracts.simdevice import DeviceReport, Faults


@runtime_checkable
class OnGpus(Protocol):
    """An engine that knows the GPUs it runs on."""

    @property
    def gpu_uuids(self) -> tuple[str, ...]:
        """The UUIDs of its GPUs, as NVML (and the GPU exporter's ``uuid`` label) names them."""


@dataclass(frozen=True, slots=True)
class Placement:
    """Where an engine runs, as far as it can tell at start-up.

    ``gpu_indices``: GPUs given by index (``CUDA_VISIBLE_DEVICES=0,1``) that could not be named
    by UUID (no NVML); ``data_parallel_rank``: the rank every request of this engine runs on, or
    ``None`` when the engine spreads requests over several ranks and does not say which.
    """

    gpu_uuids: tuple[str, ...] = ()
    gpu_indices: tuple[str, ...] = ()
    data_parallel_size: int = 1
    data_parallel_rank: int | None = 0


@runtime_checkable
class Placed(Protocol):
    """An engine that knows its place beyond its GPUs' UUIDs (data parallelism, unnamed GPUs)."""

    @property
    def placement(self) -> Placement:
        """Where it runs (fixed once the engine is created)."""


@runtime_checkable
class SimulatedGpu(OnGpus, Protocol):
    """An engine on a simulated GPU (``--engine sim``): its report, and the faults set on it."""

    @property
    def faults(self) -> Faults:
        """The faults in force."""

    def set_faults(self, faults: Faults) -> Faults:
        """Replace the whole fault set; returns the one it replaced."""

    def device_report(self) -> DeviceReport:
        """The simulated GPU as the engine has charged it so far."""
