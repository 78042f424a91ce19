"""Per-process memory and container ids from cgroup files, including hostile ones."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace as Process

import pytest

from governor.contracts.metrics import gpu as m
from governor.exporters.gpu.processes import (
    ContainerResolver,
    container_id,
    read_cgroup,
    shape_process_count,
    shape_processes,
)

CID = "0123456789abcdef" * 4


@pytest.mark.parametrize(
    ("cgroup", "expected"),
    [
        pytest.param(f"0::/system.slice/docker-{CID}.scope", CID, id="docker, systemd driver"),
        pytest.param(f"12:memory:/docker/{CID}\n11:cpu:/docker/{CID}", CID,
                     id="docker, cgroup v1 cgroupfs"),
        pytest.param("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
                     f"1a2b_3c4d.slice/cri-containerd-{CID}.scope", CID,
                     id="kubernetes containerd"),
        pytest.param(f"0::/kubepods/burstable/pod1a2b3c4d-0000-1111-2222-333344445555/{CID}", CID,
                     id="kubernetes cgroupfs"),
        pytest.param(f"0::/machine.slice/libpod-{CID}.scope/container", CID, id="podman"),
        pytest.param(f"0::/kubepods.slice/crio-{CID}.scope", CID, id="cri-o"),
        pytest.param("0::/user.slice/user-1000.slice/session-3.scope", "", id="a login session"),
        pytest.param("0::/", "", id="the root cgroup"),
        pytest.param("", "", id="an empty file"),
        pytest.param("garbage without colons\n\x00\xff", "", id="garbage"),
        pytest.param(f"0::/docker-{CID[:-1]}.scope", "", id="an id one digit short"),
        pytest.param(f"0::/docker-{CID.upper()}.scope", "", id="upper-case hex is not an id"),
    ],
)
def test_container_id(cgroup: str, expected: str) -> None:
    assert container_id(cgroup) == expected


def test_reading_a_cgroup_file(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cgroup").write_text(f"0::/docker/{CID}\n")
    assert container_id(read_cgroup(tmp_path, 42)) == CID
    assert read_cgroup(tmp_path, 43) == ""  # gone, or in another PID namespace


def test_an_oversized_cgroup_file_is_read_only_in_part(tmp_path: Path) -> None:
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cgroup").write_bytes(b"x" * (10 * 1024 * 1024))
    text = read_cgroup(tmp_path, 7)
    assert len(text) == 64 * 1024
    assert container_id(text) == ""


def test_the_resolver_reads_each_pid_once_and_forgets_gone_ones() -> None:
    reads: list[int] = []

    def read(pid: int) -> str:
        reads.append(pid)
        return f"0::/docker/{CID}" if pid == 1 else ""

    resolve = ContainerResolver(read)
    assert [resolve(1), resolve(1), resolve(2)] == [CID, CID, ""]
    assert reads == [1, 2]
    resolve.retain([2])
    resolve(1)
    assert reads == [1, 2, 1]


def test_processes_are_summed_per_pid_and_unknown_memory_left_out() -> None:
    processes = [Process(pid=10, usedGpuMemory=100), Process(pid=10, usedGpuMemory=50),
                 Process(pid=11, usedGpuMemory=None), Process(pid=12, usedGpuMemory=7)]
    samples = shape_processes(processes, lambda pid: "c" if pid == 12 else "")
    assert [(dict(s.labels), s.value) for s in samples] == [
        ({m.LABEL_PID: "10", m.LABEL_CONTAINER: ""}, 150.0),
        ({m.LABEL_PID: "12", m.LABEL_CONTAINER: "c"}, 7.0),
    ]


def test_the_process_count_is_distinct_pids_unknown_memory_included() -> None:
    processes = [Process(pid=10, usedGpuMemory=100), Process(pid=10, usedGpuMemory=50),
                 Process(pid=11, usedGpuMemory=None), Process(pid=12, usedGpuMemory=7)]
    assert [(s.name, s.value, s.labels) for s in shape_process_count(processes)] == [
        (m.PROCESS_COUNT.name, 3.0, ())]
    assert shape_process_count([])[0].value == 0.0
