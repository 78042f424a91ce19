"""Which of the ports a command is about to listen on are taken, and by what.

``governor up`` asks before it starts anything: a second stack on the same ports would otherwise
find the first one's parts answering its health probes, say "ready", and only then die on
"address already in use". The holder is read from Linux's ``/proc`` (the listening socket's
inode, then the process whose descriptors hold it); elsewhere, or for another user's process, it
is not named::

    for taken in taken_ports("127.0.0.1", {"prometheus": 9090}):
        print(taken)   # port 9090 (prometheus): pid 4242, prometheus --config.file=…
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
LISTEN = "0A"  # the TCP state /proc/net/tcp gives a listening socket
COMMAND_CHARS = 120  # a holder's command line, cut to keep the message one line


@dataclass(frozen=True, slots=True)
class Holder:
    pid: int
    command: str


@dataclass(frozen=True, slots=True)
class Taken:
    """A port some other process listens on, named as the command calls it."""

    name: str
    port: int
    holder: Holder | None

    def __str__(self) -> str:
        if self.holder is None:
            return f"port {self.port} ({self.name}): held by a process this user cannot see"
        return f"port {self.port} ({self.name}): pid {self.holder.pid}, {self.holder.command}"


def in_use(host: str, port: int) -> bool:
    """Whether binding ``host:port`` fails because something listens there. ``SO_REUSEADDR``, as
    the servers set it, so that a socket of a stopped stack in TIME_WAIT does not count."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def listening_inodes(port: int, proc: Path = PROC) -> set[str]:
    """The inodes of the TCP sockets listening on ``port`` at any address (IPv4 and IPv6)."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if (len(fields) > 9 and fields[3] == LISTEN
                    and int(fields[1].rsplit(":", 1)[1], 16) == port):
                inodes.add(fields[9])
    return inodes


def _socket_owners(inodes: set[str], proc: Path) -> Iterator[int]:
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        if wanted & set(_links(entry / "fd")):
            yield int(entry.name)


def _links(fds: Path) -> Iterator[str]:
    """Where a process's descriptors point; nothing for a process gone or another user's, and
    no descriptor closed while read (the listing's own, when the process is this one)."""
    try:
        names = os.listdir(fds)
    except OSError:
        return
    for name in names:
        try:
            yield os.readlink(fds / name)
        except OSError:
            continue


def holder(port: int, proc: Path = PROC) -> Holder | None:
    """The process listening on ``port``, when this user may see it."""
    inodes = listening_inodes(port, proc)
    if not inodes:
        return None
    for pid in _socket_owners(inodes, proc):
        try:
            raw = (proc / str(pid) / "cmdline").read_bytes()
        except OSError:
            continue
        command = " ".join(raw.decode(errors="replace").replace("\0", " ").split())
        if len(command) > COMMAND_CHARS:
            command = command[:COMMAND_CHARS - 1] + "…"
        return Holder(pid, command or f"pid {pid}")
    return None


def taken_ports(host: str, ports: Mapping[str, int]) -> list[Taken]:
    """Each of ``ports`` (name → port) that something already listens on at ``host``."""
    return [Taken(name, port, holder(port)) for name, port in ports.items()
            if in_use(host, port)]
