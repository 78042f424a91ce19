"""The admission bound shared by every API process of one ``vllm serve --api-server-count N``.

Each API process has its own app and its own deadline gate, and a ``PUT /admin/admission``
reaches the one process that takes the connection. That process writes the bound it applies to
a small file every process of the server can see, replaced whole (written beside it, then
renamed over it, so a reader sees the old file or the new one, never half of one), and every
process reads it back on the gate's 100 ms sync: a ``PUT`` moves the whole server within a sync.

The file lives in the folder vLLM makes for its metrics with several API processes
(``PROMETHEUS_MULTIPROC_DIR``: created for each server, removed when it stops, shared by its
processes through their environment, as vLLM shares its request counts through memory the
parent process made). With one API process vLLM makes none, and there is nothing to share. The
file names the server (its parent process and that process's start), so a bound left in a
folder a user set and did not wipe is not taken for this server's. A file that is not one this
module wrote (corrupt, oversized, out of range) is logged once and ignored; the bound in force
stays::

    shared = SharedBound.from_env(os.environ)          # None with one API process
    shared.publish(bound)                              # on a PUT, before applying it
    newer = shared.read(current)                       # at every sync: None when unchanged
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

from governor.contracts.admission import AdmissionBound, requested
from governor.contracts.batching import BodyError

log = logging.getLogger("governor.vllm.admission")

FOLDER_ENV: Final = "PROMETHEUS_MULTIPROC_DIR"
FILE_NAME: Final = "governor-admission-bound.json"
# A bound is three numbers: anything past this is not a file this module wrote.
MAX_FILE_BYTES: Final = 4096


class ShareError(OSError):
    """The bound could not be written where the other API processes read it."""


@dataclass
class SharedBound:
    path: Path
    server: str = field(default_factory=lambda: server_identity())
    # The file as last read (inode, modification time, size): unchanged, it is not read again.
    _seen: tuple[int, int, int] | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> SharedBound | None:
        folder = env.get(FOLDER_ENV, "").strip()
        return cls(Path(folder) / FILE_NAME) if folder else None

    def publish(self, bound: AdmissionBound) -> None:
        """Replace the file with ``bound`` (:class:`ShareError` when it cannot be written)."""
        text = json.dumps({"server": self.server, "bound": bound.as_dict()}, sort_keys=True)
        try:
            with tempfile.NamedTemporaryFile("w", dir=self.path.parent, prefix=".governor-",
                                             suffix=".tmp", delete=False) as out:
                out.write(text)
            os.replace(out.name, self.path)
        except OSError as exc:
            raise ShareError(f"cannot write the shared admission bound {self.path}: "
                             f"{exc.strerror or exc}") from exc
        self._seen = _signature(self.path)  # its own write: nothing new to read back

    def read(self, current: AdmissionBound) -> AdmissionBound | None:
        """The bound another process published since the last read, merged into ``current``;
        None when the file is unchanged, absent, another server's, or not a bound."""
        signature = _signature(self.path)
        if signature is None or signature == self._seen:
            return None
        self._seen = signature
        if signature[2] > MAX_FILE_BYTES:
            log.warning("ignoring the shared admission bound %s: %d bytes, more than the %d "
                        "a bound takes; the bound in force stays", self.path, signature[2],
                        MAX_FILE_BYTES)
            return None
        try:
            body = json.loads(self.path.read_bytes()[:MAX_FILE_BYTES])
            if not isinstance(body, dict) or body.get("server") != self.server:
                # Another server's, left in a folder that was not wiped, or no bound at all.
                log.warning("ignoring the shared admission bound %s: not this server's (%s); "
                            "the bound in force stays", self.path, self.server)
                return None
            # vLLM's own bound is read whatever this process knows of its vLLM yet (one that has
            # taken no request has not seen it): the caller applies it where it can.
            return requested(body.get("bound"), replace(current, vllm_queued_tokens=True))
        except OSError:
            return None  # replaced or removed between the two reads: the next sync reads it
        except (ValueError, RecursionError, BodyError) as exc:
            reason = exc.message if isinstance(exc, BodyError) else "not valid JSON"
            log.warning("ignoring the shared admission bound %s: %s; the bound in force stays",
                        self.path, reason)
            return None


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        found = path.stat()
    except OSError:
        return None
    return found.st_ino, found.st_mtime_ns, found.st_size


def server_identity() -> str:
    """The server this API process belongs to: its parent (the ``vllm serve`` process that
    started every API process) and when that started, so a reused process id is another."""
    parent = os.getppid()
    try:
        # Field 22 of /proc/PID/stat, after the command in parentheses: the start time.
        start = Path(f"/proc/{parent}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        start = "?"
    return f"{parent}:{start}"
