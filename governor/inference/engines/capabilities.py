"""What some engines can do beyond :class:`~governor.inference.engines.base.Engine`.

The service asks with ``isinstance`` and offers what the engine has: an engine that knows the
GPUs it runs on names them on ``/metrics`` (``governor_engine_gpu_info``); an engine whose GPU is
simulated answers ``GET /sim/device`` and takes faults on ``PUT /admin/sim/faults``. The
``Engine`` protocol itself stays what every engine must do::

    if isinstance(engine, SimulatedGpu):
        engine.set_faults(Faults(cotenant_sm_ratio=0.4))
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from governor.contracts.simdevice import DeviceReport, Faults


@runtime_checkable
class OnGpus(Protocol):
    """An engine that knows the GPUs it runs on."""

    @property
    def gpu_uuids(self) -> tuple[str, ...]:
        """The UUIDs of its GPUs, as NVML (and the GPU exporter's ``uuid`` label) names them."""


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
