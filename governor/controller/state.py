"""Per-target state on disk, so that a restart neither forgets nor oscillates.

One JSON document, replaced atomically (write a temporary file beside it, fsync, rename), so a
crash leaves either the old state or the new one, never half of each. A file that cannot be read,
or holds anything :func:`encode` would not have written, is moved aside
(``<name>.corrupt-<unix time>``) and the controller starts from no memory, loudly. Nothing is
written that would not load again: a target's state that the loader would refuse (a number past
its bounds, from a reading no check caught) is saved as it last loaded, loudly, so the file never
costs a restart any target's memory.

>>> from governor.controller.model import Limits
>>> targets = {"a:8000": PersistedTarget("http://a:8000", TargetState(limits=Limits(64, 2048)))}
>>> decode(encode(targets)) == targets
True
"""

from __future__ import annotations

import enum
import json
import logging
import math
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from governor.contracts.admission import (
    MAX_QUEUED_TOKENS,
    queued_tokens_within,
    slack_range,
    slack_within,
)
from governor.contracts.batching import MAX_LIMIT
from governor.controller.law.tuning import LawConfig
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
# The state of a few hundred targets is a few hundred KiB; a file past this is not one.
MAX_STATE_BYTES = 64 * 2**20
_T = TypeVar("_T")
_E = TypeVar("_E", bound=enum.Enum)


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
        "breach_began_at": s.breach_began_at,
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
        "drain_from": s.drain_from,
        "slack_from": s.slack_from,
        "slack_since": s.slack_since,
        "queued_tokens_held": s.queued_tokens_held,
        "queued_tokens_from": s.queued_tokens_from,
    }


def decode(data: Any, *, now: float = math.inf,
           avoid_seconds: float = LawConfig().avoid_seconds,
           unusable: dict[str, str] | None = None) -> dict[str, PersistedTarget]:
    """The inverse of :func:`encode`; :class:`StateError` on anything it did not write.

    Strict, because a restart acts on what it reads: every field has its type, every number is
    finite, limits are positive integers, and no moment lies ahead of ``now`` (an avoided range
    ends at most ``avoid_seconds`` ahead) beyond :data:`FUTURE_TOLERANCE_SECONDS`. With
    ``unusable``, a target that is not what :func:`encode` wrote costs that target alone: its
    reason goes there and the others are returned.
    """
    if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
        raise StateError(f"not a version-{FORMAT_VERSION} controller state document")
    targets = data.get("targets")
    if not isinstance(targets, dict):
        raise StateError("targets: must be an object")
    read = _Reader(now + FUTURE_TOLERANCE_SECONDS, avoid_seconds)
    out = {}
    for name, raw in targets.items():
        try:
            out[name] = read.target(f"targets[{name[:80]!r}]", raw)
        except StateError as exc:
            if unusable is None:
                raise
            unusable[name] = str(exc)
    return out


# A moment further ahead than this was written by a clock that has since stepped back (or by
# no clock at all): read as it is, it would hold a cooldown for as long.
FUTURE_TOLERANCE_SECONDS = 60.0
MAX_ENTRIES = 1000  # avoided ranges or ledger entries per target; the law keeps a few
MAX_URL = 2048


@dataclass(frozen=True, slots=True)
class _Reader:
    """Reads one field at a time, naming where it is when it is not what :func:`encode` wrote."""

    latest: float  # no moment may lie after this
    avoid_seconds: float

    def target(self, where: str, raw: Any) -> PersistedTarget:
        fields = self.object(where, raw)
        url = fields.get("url")
        if not isinstance(url, str) or not 0 < len(url) <= MAX_URL:
            raise StateError(f"{where}.url: must be a URL of at most {MAX_URL} characters")
        return PersistedTarget(url, self.state(f"{where}.state", fields.get("state")))

    def state(self, where: str, raw: Any) -> TargetState:
        # Fields added after version 1 was first written default when absent, so older files
        # load.
        s = self.object(where, raw)
        return TargetState(
            limits=self.optional(self.limits, f"{where}.limits", s.get("limits")),
            last_change_at=self.optional(self.moment, f"{where}.last_change_at",
                                         s.get("last_change_at")),
            last_breach_at=self.optional(self.moment, f"{where}.last_breach_at",
                                         s.get("last_breach_at")),
            breach_began_at=self.optional(self.moment, f"{where}.breach_began_at",
                                          s.get("breach_began_at")),
            probe=self.optional(self.probe, f"{where}.probe", s.get("probe")),
            avoid=self.entries(self.avoid, f"{where}.avoid", s.get("avoid")),
            prefill_seconds_per_token=self.optional(
                self.number, f"{where}.prefill_seconds_per_token",
                s.get("prefill_seconds_per_token")),
            ledger=self.entries(self.score, f"{where}.ledger", s.get("ledger")),
            queue_growing_since=self.optional(self.moment, f"{where}.queue_growing_since",
                                              s.get("queue_growing_since")),
            overload_since=self.optional(self.moment, f"{where}.overload_since",
                                         s.get("overload_since")),
            drain_from=self.optional(self.count, f"{where}.drain_from", s.get("drain_from")),
            slack_from=self.optional(self.slack, f"{where}.slack_from", s.get("slack_from")),
            slack_since=self.optional(self.moment, f"{where}.slack_since",
                                      s.get("slack_since")),
            queued_tokens_held=self.flag(f"{where}.queued_tokens_held",
                                         s.get("queued_tokens_held", False)),
            queued_tokens_from=self.optional(self.tokens, f"{where}.queued_tokens_from",
                                             s.get("queued_tokens_from")),
        )

    def probe(self, where: str, raw: Any) -> Probe:
        p = self.object(where, raw)
        return Probe(
            self.choice(ChangeKind, f"{where}.kind", p.get("kind")),
            self.choice(Param, f"{where}.param", p.get("param")),
            self.limits(f"{where}.before", p.get("before")),
            self.limits(f"{where}.after", p.get("after")),
            self.moment(f"{where}.at", p.get("at")),
            self.number(f"{where}.itl_tail_before", p.get("itl_tail_before")),
            *(self.optional(self.number, f"{where}.{key}", p.get(key)) for key in (
                "ttft_tail_before", "good_share_before", "ttft_share_before", "waiting_before",
                "prompt_rate_before")),
        )

    def avoid(self, where: str, raw: Any) -> Avoid:
        a = self.object(where, raw)
        until = self.number(f"{where}.until", a.get("until"))
        if until > self.latest + self.avoid_seconds:
            raise StateError(f"{where}.until: {until!r} lies further ahead than an avoided "
                             f"range lasts ({self.avoid_seconds:g}s)")
        return Avoid(self.choice(Param, f"{where}.param", a.get("param")),
                     self.count(f"{where}.low", a.get("low"), least=0),
                     self.count(f"{where}.high", a.get("high"), least=0), until,
                     self.number(f"{where}.load", a.get("load")))

    def score(self, where: str, raw: Any) -> LimitsScore:
        e = self.object(where, raw)
        return LimitsScore(
            self.limits(f"{where}.limits", e.get("limits")),
            self.number(f"{where}.good_per_second", e.get("good_per_second")),
            self.number(f"{where}.good_share", e.get("good_share")),
            self.number(f"{where}.demand_per_second", e.get("demand_per_second")),
            self.moment(f"{where}.at", e.get("at")),
            self.count(f"{where}.samples", e.get("samples", 1)))

    def limits(self, where: str, raw: Any) -> Limits:
        fields = self.object(where, raw)
        return Limits(*(self.count(f"{where}.{p.value}", fields.get(p.value)) for p in Param))

    @staticmethod
    def object(where: str, raw: Any) -> Mapping[str, Any]:
        if not isinstance(raw, dict):
            raise StateError(f"{where}: must be an object, got {_kind(raw)}")
        return raw

    @staticmethod
    def number(where: str, raw: Any) -> float:
        if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
            raise StateError(f"{where}: must be a finite number, got {_kind(raw)}")
        return float(raw)

    @staticmethod
    def flag(where: str, raw: Any) -> bool:
        if not isinstance(raw, bool):
            raise StateError(f"{where}: must be true or false, got {_kind(raw)}")
        return raw

    @staticmethod
    def tokens(where: str, raw: Any) -> int:
        if isinstance(raw, bool) or not isinstance(raw, int) or not queued_tokens_within(raw):
            raise StateError(f"{where}: must be an integer from 1 to {MAX_QUEUED_TOKENS}, got "
                             f"{_kind(raw)}")
        return raw

    def slack(self, where: str, raw: Any) -> float:
        slack = self.number(where, raw)
        if not slack_within(slack):
            raise StateError(f"{where}: a deadline slack must be within {slack_range()}, "
                             f"got {slack!r}")
        return slack

    def moment(self, where: str, raw: Any) -> float:
        at = self.number(where, raw)
        if not 0 <= at <= self.latest:
            raise StateError(f"{where}: {at!r} is not a moment up to now (a clock that stepped "
                             "back since it was written?)")
        return at

    @staticmethod
    def count(where: str, raw: Any, *, least: int = 1) -> int:
        if isinstance(raw, bool) or not isinstance(raw, int) or not least <= raw <= MAX_LIMIT:
            raise StateError(f"{where}: must be an integer from {least} to {MAX_LIMIT}, got "
                             f"{_kind(raw)}")
        return raw

    @staticmethod
    def choice(kind: type[_E], where: str, raw: Any) -> _E:
        try:
            return kind(raw)
        except ValueError:
            raise StateError(f"{where}: must be one of {', '.join(map(str, kind))}, got "
                             f"{_kind(raw)}") from None

    @staticmethod
    def optional(read: Callable[[str, Any], _T], where: str, raw: Any) -> _T | None:
        return None if raw is None else read(where, raw)

    @staticmethod
    def entries(read: Callable[[str, Any], _T], where: str, raw: Any) -> tuple[_T, ...]:
        if raw is None:
            return ()
        if not isinstance(raw, list) or len(raw) > MAX_ENTRIES:
            raise StateError(f"{where}: must be a list of at most {MAX_ENTRIES} entries")
        return tuple(read(f"{where}[{i}]", item) for i, item in enumerate(raw))


def _kind(value: Any) -> str:
    """A value as an error message may show it: short, whatever it is."""
    if value is None:
        return "null"
    if isinstance(value, bool | float) or (isinstance(value, int) and abs(value) < 10**20):
        return repr(value)
    return {int: "an integer too large", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), type(value).__name__)


class StateStore:
    """Loads and saves the targets' state; ``path=None`` keeps it in memory only."""

    def __init__(self, path: Path | None, *, clock: Callable[[], float] = time.time,
                 avoid_seconds: float = LawConfig().avoid_seconds) -> None:
        self.path = path
        self._clock = clock
        self._avoid_seconds = avoid_seconds
        # Each target's state as last written or loaded (encoded), and why a target's newer one
        # could not be written (logged once per reason).
        self._written: dict[str, Any] = {}
        self._unwritable: dict[str, str] = {}

    def load(self) -> dict[str, PersistedTarget]:
        """The state on disk; a file that is not one is moved aside, and the controller starts
        from no memory rather than crash on every restart. A target whose state is not what
        the controller writes costs that target's memory alone: the file is moved aside (the
        next save writes the others anew) and the other targets load."""
        if self.path is None or not self.path.exists():
            return {}
        unusable: dict[str, str] = {}
        try:
            targets = decode(_parse(self._read()), now=self._clock(),
                             avoid_seconds=self._avoid_seconds, unusable=unusable)
        except (ValueError, OSError) as exc:  # StateError and UnicodeDecodeError included
            self._move_aside(str(exc))
            return {}
        self._written = encode(targets)["targets"]
        if unusable:
            first = next(iter(unusable.values()))
            self._move_aside(f"{len(unusable)} of {len(unusable) + len(targets)} targets "
                             f"unusable, the first: {first}", whom=" of those targets")
            self._keep(targets)
        return targets

    def _keep(self, targets: Mapping[str, PersistedTarget]) -> None:
        """The targets that loaded, written back at once: until the next pass that changes a
        state, they would otherwise live in memory only."""
        if not targets:
            return
        try:
            self.save(targets)
        except OSError as exc:
            log.error("cannot write back the %d targets that loaded from %s: %s", len(targets),
                      self.path, exc)

    def _read(self) -> bytes:
        assert self.path is not None
        with self.path.open("rb") as handle:
            raw = handle.read(MAX_STATE_BYTES + 1)
        if len(raw) > MAX_STATE_BYTES:
            raise StateError(f"larger than {MAX_STATE_BYTES} bytes")
        return raw

    def _move_aside(self, why: str, whom: str = "") -> None:
        assert self.path is not None
        stem = f"{self.path.name}.corrupt-{int(self._clock())}"
        aside = self.path.with_name(stem)
        for n in range(1, 100):  # never over an earlier one
            if not aside.exists():
                break
            aside = self.path.with_name(f"{stem}-{n}")
        try:
            self.path.replace(aside)
        except OSError as move_error:
            log.error("state file %s is unusable (%s) and cannot be moved aside (%s); starting "
                      "without memory%s", self.path, why[:300], move_error, whom)
            return
        log.error("state file %s is unusable (%s); moved to %s, starting without memory%s",
                  self.path, why[:300], aside, whom)

    def save(self, targets: Mapping[str, PersistedTarget]) -> None:
        if self.path is None:
            return
        document = self._loadable(encode(targets))
        data = json.dumps(document, indent=1, sort_keys=True).encode()
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
        self._written = document["targets"]

    def _loadable(self, document: dict[str, Any]) -> dict[str, Any]:
        """``document`` with every target's state as :func:`decode` would load it: one it would
        refuse is replaced by that target's state as last written (left out if there is none),
        and the reason logged, once per reason."""
        unusable: dict[str, str] = {}
        decode(document, now=self._clock(), avoid_seconds=self._avoid_seconds,
               unusable=unusable)
        for name, why in unusable.items():
            kept = self._written.get(name)
            if self._unwritable.get(name) != why:
                log.error("target %s: its state would not load again (%s); %s", name[:80],
                          why[:300], "writing it as last written" if kept is not None
                          else "leaving it out of the state file")
            if kept is None:
                del document["targets"][name]
            else:
                document["targets"][name] = kept
        self._unwritable = unusable
        return document


def _parse(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except RecursionError:
        raise StateError("JSON nested too deeply") from None


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
