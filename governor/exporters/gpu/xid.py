"""XID errors: a thread waits on an NVML event set and counts critical XIDs by GPU and code.

NVML delivers XIDs as events, not as a value to poll, so they need their own thread. The wait
releases the GIL (a ctypes call), wakes at least every ``poll_ms`` to notice shutdown, and the
counts are copied into each snapshot by the sampler, never read by a scrape.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Sequence
from typing import Any

from governor.contracts.metrics import gpu as m
from governor.exporters.gpu import nvml as nv
from governor.exporters.gpu.errors import ErrorLedger
from governor.exporters.gpu.readings import Sample

log = logging.getLogger("governor.exporters.gpu.xid")

UNKNOWN_GPU = -1


def handle_key(handle: Any) -> Any:
    """A hashable identity for a device handle: the address for pynvml's ctypes pointers, the
    handle itself otherwise (the fake's handles are frozen dataclasses)."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return handle


class XidWatcher:
    def __init__(
        self, nvml: nv.NvmlApi, handles: Sequence[tuple[int, Any]], ledger: ErrorLedger,
        *, poll_ms: int = 500,
    ) -> None:
        self._nvml = nvml
        self._handles = list(handles)
        self._by_handle = {handle_key(handle): index for index, handle in self._handles}
        self._ledger = ledger
        self._poll_ms = poll_ms
        self._counts: dict[tuple[int, int], int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._event_set: Any = None

    def start(self) -> bool:
        """Register every GPU that supports XID events; False (logged) when none does."""
        try:
            self._event_set = self._nvml.nvmlEventSetCreate()
        except self._nvml.NVMLError as exc:
            self._ledger.record(nv.error_kind(nv.error_code(exc)), "xid events", str(exc))
            return False
        registered = 0
        for index, handle in self._handles:
            try:
                self._nvml.nvmlDeviceRegisterEvents(
                    handle, nv.EVENT_XID_CRITICAL_ERROR, self._event_set)
                registered += 1
            except self._nvml.NVMLError as exc:
                kind = nv.error_kind(nv.error_code(exc))
                self._ledger.record(kind, f"gpu {index} xid events", str(exc))
        if not registered:
            self._free()
            return False
        self._thread = threading.Thread(target=self._run, name="gpu-xid-watcher", daemon=True)
        self._thread.start()
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self._nvml.nvmlEventSetWait_v2(self._event_set, self._poll_ms)
            except self._nvml.NVMLError as exc:
                code = nv.error_code(exc)
                if code != nv.ERROR_TIMEOUT:
                    self._ledger.record(nv.error_kind(code), "xid event wait", str(exc))
                    # An error other than a timeout returns at once; do not spin on it.
                    self._stop.wait(self._poll_ms / 1000)
                continue
            if int(data.eventType) & nv.EVENT_XID_CRITICAL_ERROR:
                self._count(self._index_of(data.device), int(data.eventData))

    def _index_of(self, device: Any) -> int:
        """The GPU an event is about. By handle first: an XID 79 comes from a GPU that has just
        fallen off the bus, and asking NVML for its index would only answer GPU_IS_LOST."""
        index = self._by_handle.get(handle_key(device))
        if index is not None:
            return index
        try:
            return int(self._nvml.nvmlDeviceGetIndex(device))
        except self._nvml.NVMLError:
            return UNKNOWN_GPU

    def _count(self, gpu: int, xid: int) -> None:
        with self._lock:
            first = (gpu, xid) not in self._counts
            self._counts[(gpu, xid)] = self._counts.get((gpu, xid), 0) + 1
        if first:  # an XID storm repeats one code thousands of times; the counter has them all
            log.warning("gpu %d reported XID %d (further XID %d on this GPU are only counted)",
                        gpu, xid, xid)

    def samples(self, gpu: int) -> list[Sample]:
        with self._lock:
            counts = sorted((xid, n) for (g, xid), n in self._counts.items() if g == gpu)
        return [Sample(m.XID_ERRORS.name, float(n), ((m.LABEL_XID, str(xid)),))
                for xid, n in counts]

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(1.0, 2 * self._poll_ms / 1000))
            if self._thread.is_alive():
                # Still inside the wait: freeing the set under it would be a use-after-free.
                log.warning("the XID watcher did not stop in time; leaving its event set")
                return
            self._thread = None
        self._free()

    def _free(self) -> None:
        if self._event_set is not None:
            try:
                self._nvml.nvmlEventSetFree(self._event_set)
            except self._nvml.NVMLError as exc:
                log.debug("freeing the XID event set: %s", exc)
            self._event_set = None
