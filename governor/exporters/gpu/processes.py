"""Per-process GPU memory and SM time, labelled with the container the process runs in (when
there is one).

NVML reports host PIDs. The container id comes from ``/proc/<pid>/cgroup``; when the exporter
runs in its own PID namespace those files are not there and the label is empty (run it with the
host's PID namespace to get container ids).

>>> container_id("0::/system.slice/docker-" + "ab" * 32 + ".scope")[:12]
'abababababab'
>>> container_id("0::/user.slice/user-1000.slice/session-2.scope")
''
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from governor.contracts.metrics import gpu as m
from governor.exporters.gpu import nvml as nv
from governor.exporters.gpu.readings import Sample

# The last path segment that carries a 64-hex id: docker-<id>.scope, cri-containerd-<id>.scope,
# crio-<id>.scope, libpod-<id>.scope, or a bare /docker/<id> (cgroup v1, cgroupfs driver).
_SEGMENT = re.compile(r"^(?:[a-z][a-z0-9-]*-)?([0-9a-f]{64})(?:\.scope)?$")
_MAX_CGROUP_BYTES = 64 * 1024  # real files are a few hundred bytes


def container_id(cgroup_text: str) -> str:
    """The container id in a ``/proc/<pid>/cgroup`` text, "" when the process is in none."""
    for line in cgroup_text.splitlines():
        path = line.split(":", 2)[-1]
        for segment in reversed(path.split("/")):
            match = _SEGMENT.match(segment)
            if match:
                return match.group(1)
    return ""


def read_cgroup(proc_root: Path, pid: int) -> str:
    """The cgroup file of ``pid``, "" when it is gone or not visible from here."""
    try:
        with (proc_root / str(pid) / "cgroup").open("rb") as handle:
            return handle.read(_MAX_CGROUP_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""


class ContainerResolver:
    """Caches pid → container id for the pids still running, so a tick reads only new pids."""

    def __init__(self, read: Callable[[int], str]) -> None:
        self._read = read
        self._cache: dict[int, str] = {}

    def __call__(self, pid: int) -> str:
        cached = self._cache.get(pid)
        if cached is None:
            cached = self._cache[pid] = container_id(self._read(pid))
        return cached

    def retain(self, pids: Iterable[int]) -> None:
        """Forget pids that are gone (a reused pid is then looked up afresh)."""
        keep = set(pids)
        self._cache = {pid: cid for pid, cid in self._cache.items() if pid in keep}


def shape_processes(processes: Iterable[Any], resolve: Callable[[int], str]) -> list[Sample]:
    """One series per pid; memory summed when a pid appears more than once (several MIG slices).

    ``usedGpuMemory`` is None where the driver cannot tell (Windows WDDM); such a pid is left out
    rather than reported as using nothing.
    """
    used: dict[int, int] = {}
    for process in processes:
        if process.usedGpuMemory is None:
            continue
        used[int(process.pid)] = used.get(int(process.pid), 0) + int(process.usedGpuMemory)
    return [
        Sample(
            m.PROCESS_MEMORY_USED.name, float(total),
            ((m.LABEL_PID, str(pid)), (m.LABEL_CONTAINER, resolve(pid))),
        )
        for pid, total in sorted(used.items())
    ]


def shape_process_count(processes: Iterable[Any]) -> list[Sample]:
    """How many processes hold a context on the GPU: distinct pids, those whose memory the
    driver cannot tell included (a leaked context counts whatever it holds)."""
    return [Sample(m.PROCESS_COUNT.name, float(len({int(p.pid) for p in processes})))]


def read_utilization(nvml: nv.NvmlApi, handle: Any, since: int) -> list[Any]:
    """NVML's per-process utilisation samples newer than ``since`` (µs), ``[]`` when there are
    none: NVML answers NOT_FOUND then, which is news, not an error."""
    try:
        return list(nvml.nvmlDeviceGetProcessUtilization(handle, since))
    except nvml.NVMLError as exc:
        if nv.error_code(exc) == nv.ERROR_NOT_FOUND:
            return []
        raise


def shape_utilization(samples: Iterable[Any], resolve: Callable[[int], str]) -> list[Sample]:
    """The SM share of each pid in its newest sample (NVML keeps several per process)."""
    newest: dict[int, Any] = {}
    for sample in samples:
        pid = int(sample.pid)
        if pid not in newest or int(sample.timeStamp) > int(newest[pid].timeStamp):
            newest[pid] = sample
    return [
        Sample(
            m.PROCESS_SM_UTILIZATION.name, min(max(int(s.smUtil) / 100.0, 0.0), 1.0),
            ((m.LABEL_PID, str(pid)), (m.LABEL_CONTAINER, resolve(pid))),
        )
        for pid, s in sorted(newest.items())
    ]


def newest_stamp(samples: Iterable[Any], since: int) -> int:
    """Where the next call should start: after the newest sample seen."""
    return max((int(sample.timeStamp) for sample in samples), default=since)
