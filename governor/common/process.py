"""Child processes that answer on HTTP: start, wait until healthy, stop, tail the log.

``governor up``, the benchmarks and the integration tests all run parts of the stack as real
processes. They share this one helper, so every one of them stops its children the same way
(SIGTERM to the child's own process group, a grace period, then SIGKILL) and reports a child
that died with the end of its log::

    service = Child("inference", Serve(engine="sim").python(),      # governor.common.commands
                    health_url="http://127.0.0.1:8000/health", log=Path("inference.log"))
    with running([service]) as (child,):
        ...                                 # healthy here; stopped on the way out
    service.tail(20)                        # the last 20 lines of its output

A caller on an event loop, or one that starts several children before waiting for any, uses the
child as a context manager instead (``with child:`` starts it and stops it on the way out) and
waits with :meth:`Child.wait_healthy_async`.

A child runs in a new session (its own process group), so a Ctrl-C typed at the terminal reaches
only the parent, which then stops the children in reverse order.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

POLL_SECONDS = 0.2
PROBE_TIMEOUT_SECONDS = 2.0


class ChildError(Exception):
    """A child that died or never became healthy; the message ends with its log's last lines."""

    def __init__(self, child: Child, what: str) -> None:
        self.child = child
        self.what = what  # the reason alone, for a caller that shows the logs itself
        tail = child.tail()
        super().__init__(f"{child.name} {what}" + (f"; last lines of {child.log}:\n{tail}"
                                                   if tail else ""))


def http_ok(url: str, timeout: float = PROBE_TIMEOUT_SECONDS,
            accept: Callable[[bytes], bool] | None = None) -> bool:
    """True when ``url`` answers 200 (any error, refusal or other status is False) with a body
    that ``accept`` takes, when given (e.g. an exposition that already lists every GPU)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (our URL)
            return int(response.status) == 200 and (accept is None or accept(response.read()))
    except (urllib.error.URLError, OSError, ValueError):
        return False


async def wait_http_ok(url: str, limit_seconds: float = 30.0,
                       poll_seconds: float = POLL_SECONDS) -> float:
    """Wait until ``url`` answers 200; the seconds it took. For a server with no child process
    to watch (one on this event loop: the probe runs in a thread so the loop can answer it).

    Raises :class:`TimeoutError` when the limit passes.
    """
    started = time.monotonic()
    while not await asyncio.to_thread(http_ok, url):
        if time.monotonic() - started > limit_seconds:
            raise TimeoutError(f"{url} did not answer 200 within {limit_seconds:.0f}s")
        await asyncio.sleep(poll_seconds)
    return time.monotonic() - started


# Where free_port looks, when set: "FIRST-LAST" (e.g. "20000-23999"). Unset, the OS picks from
# its ephemeral range, where any outgoing connection of any process may take the port between
# the check and the child's bind; a range below it has no such race, and one range per process
# (the test suite's workers) keeps processes from picking the same port.
FREE_PORTS_ENV = "GOVERNOR_FREE_PORTS"
_cursor: dict[range, int] = {}


def port_range(text: str | None = None) -> range | None:
    """The ports ``GOVERNOR_FREE_PORTS`` names (or ``text``), or None where it is unset.

    Raises :class:`ValueError` for anything but ``FIRST-LAST`` with 1024 <= FIRST <= LAST <= 65535.
    """
    text = os.environ.get(FREE_PORTS_ENV) if text is None else text
    if not text:
        return None
    first, dash, last = text.strip().partition("-")
    try:
        low, high = int(first), int(last)
    except ValueError:
        low = high = -1
    if not dash or not 1024 <= low <= high <= 65535:
        raise ValueError(f"{FREE_PORTS_ENV}={text[:40]!r}: expected FIRST-LAST, two ports from "
                         f"1024 to 65535, e.g. 20000-23999")
    return range(low, high + 1)


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_ports(count: int, host: str = "127.0.0.1", *, consecutive: bool = False) -> list[int]:
    """``count`` distinct TCP ports nothing listens on right now, for children to bind;
    ``consecutive``: ``p, p + 1, ...``.

    From ``GOVERNOR_FREE_PORTS``'s range where it is set, walking on from where the last call
    stopped (so a port handed out is not handed out again before the range wraps); else the OS
    picks each. Raises :class:`OSError` when none are free.
    """
    span = port_range()
    if span is None:
        return _os_ports(count, host, consecutive)
    start = _cursor.get(span, span.start + os.getpid() % len(span))
    found: list[int] = []
    for step in range(len(span)):
        port = span.start + (start - span.start + step) % len(span)
        if consecutive and found and port != found[-1] + 1:
            found = []  # wrapped round to the range's start
        if _bindable(host, port):
            found.append(port)
            if len(found) == count:
                _cursor[span] = port + 1
                return found
        elif consecutive:
            found = []
    raise OSError(f"no {count} {'consecutive ' if consecutive else ''}free ports in "
                  f"{FREE_PORTS_ENV}={span.start}-{span.stop - 1}")


def _os_ports(count: int, host: str, consecutive: bool) -> list[int]:
    for _ in range(50):
        sockets = [socket.socket() for _ in range(count if not consecutive else 1)]
        try:
            for sock in sockets:
                sock.bind((host, 0))
            ports = [int(sock.getsockname()[1]) for sock in sockets]
        finally:
            for sock in sockets:
                sock.close()
        if not consecutive:
            return ports
        run = [ports[0] + i for i in range(count)]
        if run[-1] <= 65535 and all(_bindable(host, port) for port in run[1:]):
            return run
    raise OSError(f"no {count} consecutive free ports found")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now, for a child to bind (see :func:`free_ports`)."""
    return free_ports(1, host)[0]


@dataclass
class Child:
    """One program of the stack: its command line, where it is healthy, where its output goes."""

    name: str
    argv: Sequence[str]
    health_url: str | None
    log: Path
    env: Mapping[str, str] | None = None  # None: inherit the parent's environment
    cwd: Path | None = None
    # How a 200 from health_url counts as healthy, by its body; None: any 200.
    accept: Callable[[bytes], bool] | None = field(default=None, repr=False)
    # False: stderr stays the parent's, e.g. a benchmark's warnings reach its terminal.
    log_stderr: bool = True
    # True: the log starts empty (a benchmark's log is its run's alone) instead of appending.
    fresh_log: bool = False
    # SIGTERM to SIGKILL: vLLM shuts its engine down for longer than a small server does.
    grace_seconds: float = 10.0
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> Child:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb" if self.fresh_log else "ab") as sink:
            self.popen = subprocess.Popen(
                list(self.argv), stdout=sink, stderr=subprocess.STDOUT if self.log_stderr else None,
                cwd=self.cwd, env=None if self.env is None else dict(self.env),
                start_new_session=True)
        return self

    def __enter__(self) -> Child:
        """Start; the caller waits (:meth:`wait_healthy_async`, for several children at once)."""
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        return self._popen().pid

    def poll(self) -> int | None:
        """The exit status once the child has exited, else None."""
        return self._popen().poll()

    def healthy(self) -> bool:
        return self.health_url is None or http_ok(self.health_url, accept=self.accept)

    def wait_healthy(self, limit_seconds: float = 60.0,
                     should_stop: Callable[[], bool] = lambda: False) -> float:
        """Block until the health URL answers 200; returns the seconds it took.

        Raises :class:`ChildError` when the child exits first or the limit passes. Returns early
        (without raising) when ``should_stop()`` turns true, e.g. on Ctrl-C.
        """
        started = time.monotonic()
        while True:
            status = self.poll()
            if status is not None:
                raise ChildError(self, f"exited with status {status}")
            if should_stop() or self.healthy():
                return time.monotonic() - started
            if time.monotonic() - started > limit_seconds:
                raise ChildError(self, f"did not answer {self.health_url} within "
                                       f"{limit_seconds:.0f}s")
            time.sleep(POLL_SECONDS)

    async def wait_healthy_async(self, limit_seconds: float = 60.0) -> float:
        """:meth:`wait_healthy` for callers on an event loop (the probe runs in a thread)."""
        started = time.monotonic()
        while True:
            status = self.poll()
            if status is not None:
                raise ChildError(self, f"exited with status {status}")
            if await asyncio.to_thread(self.healthy):
                return time.monotonic() - started
            if time.monotonic() - started > limit_seconds:
                raise ChildError(self, f"did not answer {self.health_url} within "
                                       f"{limit_seconds:.0f}s")
            await asyncio.sleep(POLL_SECONDS)

    def stop(self, grace_seconds: float | None = None) -> int | None:
        """SIGTERM to the child's process group, SIGKILL after the grace period (the child's
        own unless given); the status."""
        if self.popen is None:
            return None
        grace = self.grace_seconds if grace_seconds is None else grace_seconds
        if self.popen.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.popen.wait(grace)
        return self.popen.returncode

    def tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines of the child's output."""
        try:
            with self.log.open("rb") as handle:
                handle.seek(0, os.SEEK_END)
                handle.seek(max(0, handle.tell() - 64 * 1024))
                text = handle.read().decode("utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _signal(self, signum: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)  # the child leads its own group (start_new_session)

    def _popen(self) -> subprocess.Popen[bytes]:
        if self.popen is None:
            raise RuntimeError(f"{self.name} was never started")
        return self.popen


@contextlib.contextmanager
def running(children: Sequence[Child], limit_seconds: float = 60.0,
            on_ready: Callable[[Child, float], None] = lambda child, seconds: None,
            should_stop: Callable[[], bool] = lambda: False) -> Iterator[Sequence[Child]]:
    """Start each child in order, waiting until it is healthy before the next; stop them all in
    reverse order on the way out, whatever happened (an error, Ctrl-C, a normal exit)."""
    started: list[Child] = []
    try:
        for child in children:
            if should_stop():
                break
            started.append(child.start())
            seconds = child.wait_healthy(limit_seconds, should_stop)
            if not should_stop():
                on_ready(child, seconds)
        yield children
    finally:
        for child in reversed(started):
            child.stop()


def first_exited(children: Sequence[Child]) -> Child | None:
    """The first child that is no longer running, if any."""
    return next((c for c in children if c.popen is not None and c.poll() is not None), None)
