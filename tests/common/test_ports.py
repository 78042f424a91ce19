"""Which ports are taken, and by whom: read from a real socket this test holds."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from governor.common.ports import Holder, Taken, holder, in_use, listening_inodes, taken_ports
from governor.common.process import free_port


@pytest.fixture
def listening() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def closed_port() -> int:
    return free_port()


def test_a_port_something_listens_on_is_in_use_at_its_address_and_at_every_address(
        listening: int) -> None:
    assert in_use("127.0.0.1", listening)
    assert in_use("0.0.0.0", listening)


def test_a_port_nothing_listens_on_is_free() -> None:
    assert not in_use("127.0.0.1", closed_port())


def test_the_holder_is_the_process_with_the_listening_socket(listening: int) -> None:
    found = holder(listening)
    assert found is not None and found.pid == os.getpid()
    assert "python" in found.command or "pytest" in found.command


def test_only_the_taken_ports_are_reported_by_their_names(listening: int) -> None:
    free = closed_port()
    (taken,) = taken_ports("127.0.0.1", {"prometheus": listening, "controller": free})
    assert (taken.name, taken.port) == ("prometheus", listening)


def test_without_proc_the_holder_is_unnamed_not_an_error(tmp_path: Path, listening: int) -> None:
    assert listening_inodes(listening, proc=tmp_path) == set()
    assert holder(listening, proc=tmp_path) is None
    assert str(Taken("prometheus", 9090, None)) == (
        "port 9090 (prometheus): held by a process this user cannot see")


def test_a_holder_reads_as_pid_and_command_line() -> None:
    assert str(Taken("inference", 8000, Holder(42, "python3 -m governor serve"))) == (
        "port 8000 (inference): pid 42, python3 -m governor serve")
