"""Per-target state on disk, so that a restart neither forgets nor oscillates.

One JSON document, replaced atomically (write a temporary file beside it, fsync, rename), so a
crash leaves either the old state or the new one, never half of each. A file that cannot be read
is moved aside (``<name>.corrupt-<unix time>``) and the controller starts from no memory, loudly.

>>> from governor.controller.model import Limits
>>> targets = {"a:8000": PersistedTarget("http://a:8000", TargetState(limits=Limits(64, 2048)))}
>>> decode(encode(targets)) == targets
True
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from governor.controller.model import (
    Avoid,
    ChangeKind,
    Limits,
    LimitsScore,
    Param,
    Probe,
    TargetState,
)

log = logging.getLogger(__name__)

FORMAT_VERSION = 1


class StateError(ValueError):
    """A state document that does not decode; the message says where."""


@dataclass(frozen=True, slots=True)
class PersistedTarget:
    url: str
    state: TargetState


def encode(targets: Mapping[str, PersistedTarget]) -> dict[str, Any]:
    return {
        "version": FORMAT_VERSION,
        "targets": {name: {"url": t.url, "state": encode_state(t.state)}
                    for name, t in sorted(targets.items())},
    }


def encode_state(s: TargetState) -> dict[str, Any]:
    return {
        "limits": s.limits.as_dict() if s.limits else None,
        "last_change_at": s.last_change_at,
        "last_breach_at": s.last_breach_at,
        "probe": None if s.probe is None else {
            "kind": s.probe.kind.value, "param": s.probe.param.value,
            "before": s.probe.before.as_dict(), "after": s.probe.after.as_dict(),
            "at": s.probe.at, "itl_tail_before": s.probe.itl_tail_before,
            "ttft_tail_before": s.probe.ttft_tail_before,
            "good_share_before": s.probe.good_share_before,
            "ttft_share_before": s.probe.ttft_share_before,
            "waiting_before": s.probe.waiting_before,
            "prompt_rate_before": s.probe.prompt_rate_before,
        },
        "avoid": [{"param": a.param.value, "low": a.low, "high": a.high, "until": a.until,
                   "load": a.load} for a in s.avoid],
        "prefill_seconds_per_token": s.prefill_seconds_per_token,
        "ledger": [{"limits": e.limits.as_dict(), "good_per_second": e.good_per_second,
                    "good_share": e.good_share, "demand_per_second": e.demand_per_second,
                    "at": e.at, "samples": e.samples} for e in s.ledger],
        "queue_growing_since": s.queue_growing_since,
        "overload_since": s.overload_since,
    }


def decode(data: Any) -> dict[str, PersistedTarget]:
    """The inverse of :func:`encode`; :class:`StateError` on anything it did not write."""
    if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
        raise StateError(f"not a version-{FORMAT_VERSION} controller state document")
    targets = data.get("targets")
    if not isinstance(targets, dict):
        raise StateError("targets: must be an object")
    out = {}
    for name, raw in targets.items():
        try:
            out[str(name)] = PersistedTarget(str(raw["url"]), _decode_state(raw["state"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"targets[{name!r}]: {type(exc).__name__}: {exc}") from exc
    return out


def _decode_state(raw: Mapping[str, Any]) -> TargetState:
    # Fields added after version 1 was first written default when absent, so older files load.
    probe = raw.get("probe")
    return TargetState(
        limits=_limits(raw["limits"]) if raw.get("limits") is not None else None,
        last_change_at=_optional_float(raw.get("last_change_at")),
        last_breach_at=_optional_float(raw.get("last_breach_at")),
        probe=None if probe is None else Probe(
            ChangeKind(probe["kind"]), Param(probe["param"]), _limits(probe["before"]),
            _limits(probe["after"]), float(probe["at"]), float(probe["itl_tail_before"]),
            _optional_float(probe.get("ttft_tail_before")),
            _optional_float(probe.get("good_share_before")),
            _optional_float(probe.get("ttft_share_before")),
            _optional_float(probe.get("waiting_before")),
            _optional_float(probe.get("prompt_rate_before")),
        ),
        avoid=tuple(Avoid(Param(a["param"]), int(a["low"]), int(a["high"]), float(a["until"]),
                          float(a["load"])) for a in raw.get("avoid") or ()),
        prefill_seconds_per_token=_optional_float(raw.get("prefill_seconds_per_token")),
        ledger=tuple(LimitsScore(_limits(e["limits"]), float(e["good_per_second"]),
                                 float(e["good_share"]), float(e["demand_per_second"]),
                                 float(e["at"]), int(e.get("samples", 1)))
                     for e in raw.get("ledger") or ()),
        queue_growing_since=_optional_float(raw.get("queue_growing_since")),
        overload_since=_optional_float(raw.get("overload_since")),
    )


def _limits(raw: Mapping[str, Any]) -> Limits:
    return Limits(int(raw["max_num_seqs"]), int(raw["max_num_batched_tokens"]))


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


class StateStore:
    """Loads and saves the targets' state; ``path=None`` keeps it in memory only."""

    def __init__(self, path: Path | None, *, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self._clock = clock

    def load(self) -> dict[str, PersistedTarget]:
        if self.path is None or not self.path.exists():
            return {}
        try:
            return decode(json.loads(self.path.read_bytes()))
        except (ValueError, OSError) as exc:
            aside = self.path.with_name(f"{self.path.name}.corrupt-{int(self._clock())}")
            log.error("state file %s is unreadable (%s); moved to %s, starting without memory",
                      self.path, exc, aside)
            try:
                self.path.replace(aside)
            except OSError as move_error:
                log.error("could not move %s aside: %s", self.path, move_error)
            return {}

    def save(self, targets: Mapping[str, PersistedTarget]) -> None:
        if self.path is None:
            return
        data = json.dumps(encode(targets), indent=1, sort_keys=True).encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _fsync_dir(self.path.parent)


def _fsync_dir(directory: Path) -> None:
    # The rename is durable only once the directory entry is; not every platform allows this.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
