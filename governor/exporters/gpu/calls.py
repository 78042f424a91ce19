"""One NVML call for one GPU, guarded: unsupported readings are asked once, errors are counted.

>>> from governor.exporters.gpu.fake import FakeNvml
>>> nvml = FakeNvml(1)
>>> nvml.fail("nvmlDeviceGetPowerUsage", 3)            # NVML_ERROR_NOT_SUPPORTED
>>> guard = CallGuard(nvml, ErrorLedger(), 0)
>>> guard("power", lambda: nvml.nvmlDeviceGetPowerUsage(None)) is None
True
>>> "power" in guard.disabled                             # never asked again
True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from governor.exporters.gpu import nvml as nv
from governor.exporters.gpu.errors import ErrorLedger

T = TypeVar("T")


class GpuLost(Exception):
    """The GPU stopped answering (NVML_ERROR_GPU_IS_LOST): abandon this GPU for this round."""


class CallGuard:
    """Runs NVML calls for one GPU. Not thread-safe: each GPU belongs to the sampler thread."""

    def __init__(self, nvml: nv.NvmlApi, ledger: ErrorLedger, gpu_index: int) -> None:
        self._nvml = nvml
        self._ledger = ledger
        self._where = f"gpu {gpu_index}"
        self.disabled: set[str] = set()

    def __call__(self, name: str, call: Callable[[], T]) -> T | None:
        """``call()``'s result, or None when it failed (counted, logged once, maybe disabled)."""
        if name in self.disabled:
            return None
        try:
            return call()
        except self._nvml.NVMLError as exc:
            self.failed(name, nv.error_code(exc), str(exc))
            if nv.error_code(exc) == nv.ERROR_GPU_IS_LOST:
                raise GpuLost(self._where) from exc
            return None

    def failed(self, name: str, code: int | None, detail: str) -> None:
        """Record a failure reported without an exception (a per-field or per-metric return)."""
        if code == nv.ERROR_GPU_IS_LOST:
            # One line per loss, not one per call that noticed it.
            self._ledger.record(nv.error_kind(code), self._where, "GPU is lost")
            return
        self._ledger.record(nv.error_kind(code), f"{self._where} {name}", detail)
        if code in nv.PERMANENT_CODES:
            self.disabled.add(name)

    def recovered(self) -> None:
        """The GPU answers again: its next loss is logged again."""
        self._ledger.forget(nv.error_kind(nv.ERROR_GPU_IS_LOST), self._where)
