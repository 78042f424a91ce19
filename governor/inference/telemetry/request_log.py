"""``--request-log FILE``: one JSON line per generation request, written off the event loop.

The record (:mod:`governor.contracts.request_log`) holds when a request arrived, its route and
class, its prompt and output token counts, its time to first token, its own inter-token P99 and
the status it was counted under, and the seconds it spent in each stage; never a prompt, a
completion, a header or an address. Replayed by
``governor bench controller --workload FILE``, it answers "which limits, and what would the
controller have done, on my traffic?".

The event loop only hands a record to a bounded queue (a full queue drops it and counts the
drop: the service never waits on its log); one thread encodes and writes, and rotates the file
by bytes (``FILE`` → ``FILE.1`` → … ``FILE.<backups>``), so the log never holds more than
``max_bytes * (backups + 1)``::

    writer = RequestLogWriter(RequestLogSettings(Path("requests.jsonl")))
    facts = RequestFacts(arrived_unix=time.time())       # per request, filled as it runs
    writer.submit(facts, "/v1/chat/completions", "chat", "200")   # once it has ended
    writer.close()                                       # drains the queue, then stops

The record, its P99 included, is built in the writer's thread too.
"""

from __future__ import annotations

import logging
import os
import queue
import stat
import threading
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Final

from governor.contracts.request_log import RequestRecord
from governor.inference.telemetry.stages import RequestStages

log = logging.getLogger(__name__)

# What a path is when it is not a regular file, by its mode.
_NOT_FILES: Final = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                     (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                     (stat.S_ISSOCK, "a socket"))

# The quantile of a request's own inter-token gaps the record carries (the ITL SLO's).
ITL_QUANTILE: Final = 0.99


@dataclass(frozen=True, slots=True)
class RequestLogSettings:
    """Where the log goes (None: no log) and how much of it is kept."""

    path: Path | None = None
    max_bytes: int = 64 * 1024 * 1024  # per file
    backups: int = 3  # rotated files kept beside the current one
    queue_size: int = 10_000  # records waiting for the writer; more are dropped and counted

    def __post_init__(self) -> None:
        errors = []
        if self.max_bytes < 4096:
            errors.append(f"request log: max_bytes must be at least 4096, got {self.max_bytes}")
        if not 0 <= self.backups <= 100:
            errors.append(f"request log: backups must be in 0..100, got {self.backups}")
        if self.queue_size < 1:
            errors.append(f"request log: queue_size must be positive, got {self.queue_size}")
        if errors:
            raise ValueError("; ".join(errors))


@dataclass(slots=True)
class RequestFacts:
    """What one request's record is built from, filled in as it runs (on the event loop)."""

    arrived_unix: float
    prompt_tokens: int = 0
    output_tokens: int = 0
    ttft_seconds: float | None = None
    gaps: array[float] = field(default_factory=lambda: array("f"))
    stages: RequestStages | None = None  # set as the request ends

    def first_token(self, ttft_seconds: float, tokens: int) -> None:
        self.ttft_seconds = ttft_seconds
        self.output_tokens += tokens

    def next_token(self, gap_seconds: float, tokens: int) -> None:
        self.gaps.append(gap_seconds)
        self.output_tokens += tokens

    def record(self, route: str, request_class: str, status: str) -> RequestRecord:
        """The request's record: the one place a field of the log is filled in."""
        tail = quantile(sorted(self.gaps), ITL_QUANTILE) if self.gaps else None
        return RequestRecord(at=self.arrived_unix, route=route, request_class=request_class,
                             prompt_tokens=self.prompt_tokens, output_tokens=self.output_tokens,
                             ttft_seconds=self.ttft_seconds, itl_p99_seconds=tail, status=status,
                             stages=None if self.stages is None else self.stages.as_dict())


def quantile(ordered: list[float], q: float) -> float:
    """numpy's default ("linear") quantile of sorted values, without numpy's per-call cost.

    >>> quantile([1.0, 2.0, 3.0, 4.0], 0.5), round(quantile([0.02] * 99 + [0.5], 0.99), 4)
    (2.5, 0.0248)
    """
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (position - low) * (ordered[high] - ordered[low])


_STOP: Final = None
_Item = tuple[RequestFacts, str, str, str]  # an ended request: its facts, route, class, status


class RequestLogWriter:
    """A bounded queue and one writer thread, with rotation by bytes."""

    def __init__(self, settings: RequestLogSettings) -> None:
        if settings.path is None:
            raise ValueError("RequestLogWriter needs a path")
        self.settings = settings
        self.path: Path = settings.path
        self.dropped = 0  # records the full queue turned away
        self.written = 0
        self._queue: queue.Queue[_Item | None] = queue.Queue(settings.queue_size)
        self._file = self._open()
        self._size = self._file.tell()
        self._thread = threading.Thread(target=self._run, name="request-log", daemon=True)
        self._thread.start()

    def _open(self) -> IO[str]:
        return open_log(self.path)

    def submit(self, facts: RequestFacts, route: str, request_class: str, status: str) -> None:
        """Hand an ended request to the writer; never blocks (a full queue drops it, counted).
        ``facts`` must not change after this."""
        try:
            self._queue.put_nowait((facts, route, request_class, status))
        except queue.Full:
            self.dropped += 1

    def close(self) -> None:
        """Write what is queued, then stop (blocks: call it off the event loop)."""
        self._queue.put(_STOP)
        self._thread.join()
        if self.dropped:
            log.warning("request log: %d records dropped (the writer fell behind)", self.dropped)

    def _run(self) -> None:
        try:
            while (item := self._queue.get()) is not _STOP:
                facts, route, request_class, status = item
                self._write(facts.record(route, request_class, status).to_json() + "\n")
                if self._queue.empty():
                    self._file.flush()
        # A full disk, or a FIFO put where the log was: say so once, stop logging, not serving.
        except (OSError, RequestLogPathError) as exc:
            log.error("request log %s: %s; no more records are written", self.path, exc)
            self._discard()
        finally:
            self._file.close()

    def _discard(self) -> None:
        while self._queue.get() is not _STOP:
            self.dropped += 1

    def _write(self, line: str) -> None:
        data = len(line.encode("utf-8"))
        if self._size and self._size + data > self.settings.max_bytes:
            self._rotate()
        self._file.write(line)
        self._size += data
        self.written += 1

    def _rotate(self) -> None:
        self._file.close()
        backups = self.settings.backups
        if backups == 0:
            self.path.unlink(missing_ok=True)
        for k in range(backups, 0, -1):
            older = self._backup(k - 1)
            if older.exists():
                older.replace(self._backup(k))
        self._file = self._open()
        self._size = 0

    def _backup(self, k: int) -> Path:
        return self.path if k == 0 else self.path.with_name(f"{self.path.name}.{k}")


class RequestLogPathError(ValueError):
    """A path that cannot be a request log: what it is, or why it cannot be opened."""


def open_log(path: Path) -> IO[str]:
    """``path`` opened to append, owner-only (the log says how the service is used, if nothing
    of what was said), its folders made. Never waits: a FIFO, a directory, a device, a file
    where a folder should be or a place that takes no file is a :class:`RequestLogPathError`
    saying which, as ``governor serve`` checks it at start::

        open_log(Path("/proc/x"))   # RequestLogPathError: /proc/x: cannot create it here: …
    """
    for ancestor in path.parents:  # the nearest one there must be a folder
        if ancestor.exists():
            if not ancestor.is_dir():
                raise RequestLogPathError(f"{path}: {ancestor} is a file, not a folder")
            break
    _check_kind(path, path.stat().st_mode if path.exists() else stat.S_IFREG)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # O_NONBLOCK: a FIFO put there since the check fails at once instead of waiting for a
        # reader; on a regular file it changes nothing.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        raise RequestLogPathError(f"{path}: cannot create or append to it here: "
                                  f"{exc.strerror or exc}") from None
    try:
        _check_kind(path, os.fstat(fd).st_mode)
    except RequestLogPathError:
        os.close(fd)
        raise
    os.set_blocking(fd, True)
    return os.fdopen(fd, "a", encoding="utf-8")


def _check_kind(path: Path, mode: int) -> None:
    for test, kind in _NOT_FILES:
        if test(mode):
            raise RequestLogPathError(f"{path}: {kind}, not a regular file")
