"""Rendering snapshots as Prometheus text or OpenMetrics, once per snapshot and format.

A scrape costs a dictionary lookup and a few hundred bytes of rendering (the snapshot age); the
expensive part, the families of every GPU, is rendered on the first scrape that sees a new
snapshot and reused by every later one until the sampler publishes the next.

>>> negotiate("application/openmetrics-text; version=1.0.0,text/plain;q=0.5") is Format.OPENMETRICS
True
>>> negotiate("*/*") is Format.TEXT
True
"""

from __future__ import annotations

import enum
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client import exposition
from prometheus_client.core import Metric
from prometheus_client.openmetrics import exposition as om_exposition

from governor.exporters.dcgm import DcgmView
from governor.exporters.gpu.collector import age_family, families
from governor.exporters.gpu.readings import Snapshot

_OPENMETRICS_EOF = b"# EOF\n"
_MAX_ACCEPT_ENTRIES = 32  # an Accept header is a handful of types; more is noise, not intent


class Format(enum.Enum):
    TEXT = "text/plain; version=0.0.4; charset=utf-8"
    OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"

    @property
    def content_type(self) -> str:
        return self.value


def negotiate(accept: str | None) -> Format:
    """OpenMetrics when the client names it (as Prometheus does), the text format otherwise.

    Prometheus lists its preferences with q-values; any mention of OpenMetrics with a non-zero q
    means it can read it. Malformed parameters are ignored, never an error: a scrape always gets
    an answer in a format every client reads.
    """
    for entry in (accept or "").split(",")[:_MAX_ACCEPT_ENTRIES]:
        media, *params = (part.strip() for part in entry.split(";"))
        if media.lower() != "application/openmetrics-text":
            continue
        if not any(_is_zero_q(param) for param in params):
            return Format.OPENMETRICS
    return Format.TEXT


def _is_zero_q(param: str) -> bool:
    key, _, value = param.partition("=")
    if key.strip().lower() != "q":
        return False
    try:
        return float(value) == 0.0
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class _Families:
    """What ``generate_latest`` wants: an object whose ``collect()`` yields families."""

    items: tuple[Metric, ...]

    def collect(self) -> Iterable[Metric]:
        return self.items


def render(items: Iterable[Metric], fmt: Format) -> bytes:
    collector = _Families(tuple(items))
    if fmt is Format.OPENMETRICS:
        return bytes(om_exposition.generate_latest(collector))  # type: ignore[no-untyped-call]
    return bytes(exposition.generate_latest(collector))


# gzip, as Prometheus asks for it: level 1 with a 4 kB window turns 55 kB (8 GPUs) into 6 kB in
# 0.5 ms, once per snapshot; the small state is what makes finishing it per scrape cost 11 us.
_GZIP_LEVEL = 1
_GZIP_WBITS = 16 + 12  # 16+: a gzip header and trailer; 12: a 4 kB window
_GZIP_MEM_LEVEL = 1


def accepts_gzip(accept_encoding: str | None) -> bool:
    """Whether ``Accept-Encoding`` allows gzip (``gzip;q=0`` refuses it)."""
    for entry in (accept_encoding or "").split(",")[:_MAX_ACCEPT_ENTRIES]:
        coding, *params = (part.strip() for part in entry.split(";"))
        if coding.lower() in {"gzip", "x-gzip"} and not any(_is_zero_q(p) for p in params):
            return True
    return False


class _GzipPrefix:
    """A gzip stream of the static part, left open: each scrape appends its own tail.

    The compressor is flushed to a byte boundary after the static part and kept; a scrape
    copies it, compresses the tail and finishes the stream, so the CRC and length in the
    trailer cover the whole body and the answer is one ordinary gzip member.
    """

    def __init__(self, plain: bytes) -> None:
        self._state = zlib.compressobj(_GZIP_LEVEL, zlib.DEFLATED, _GZIP_WBITS, _GZIP_MEM_LEVEL)
        self._head = self._state.compress(plain) + self._state.flush(zlib.Z_SYNC_FLUSH)

    def finish(self, tail: bytes) -> bytes:
        state = self._state.copy()
        return self._head + state.compress(tail) + state.flush()


class _Rendered:
    """The static part of one (snapshot, freshness, format): plain, and gzipped on first use."""

    def __init__(self, plain: bytes) -> None:
        self.plain = plain
        self.gzip: _GzipPrefix | None = None

    def gzipped(self) -> _GzipPrefix:
        if self.gzip is None:
            self.gzip = _GzipPrefix(self.plain)
        return self.gzip


class ExpositionCache:
    """The rendered bodies of the latest snapshot, per (freshness, format, encoding).

    Shared by two threads without a lock: the entry is a (sequence, bodies) pair that is
    replaced, never changed in place, and each body is keyed by its snapshot's sequence, so a
    lost race costs a render, never a wrong answer. :meth:`prepare` runs in the sampler thread
    after each round and renders ahead only what was scraped since the previous round; a target
    scraped every 15 s is rendered on demand instead, once per scrape. With ``dcgm`` the bodies
    are dcgm-exporter's series (:mod:`governor.exporters.dcgm`), in the text format only and
    without the exporter's own age.
    """

    def __init__(self, version: str, dcgm: DcgmView | None = None) -> None:
        self._version = version
        self._dcgm = dcgm
        self._entry: tuple[int, dict[tuple[bool, Format], _Rendered]] = (-1, {})
        # (format, gzip) -> sequence of the last snapshot scraped that way
        self._scraped: dict[tuple[Format, bool], int] = {}
        self.renders = 0  # how many times families were rendered (tests, the benchmark)
        # The newest snapshot whose bodies are rendered: scrapes serve it, so that a scrape
        # landing while the sampler thread renders never renders the same snapshot again.
        self.published: Snapshot | None = None

    def negotiate(self, accept: str | None) -> Format:
        """The format a scrape gets: as it asks, or text where that is all there is."""
        return Format.TEXT if self._dcgm is not None else negotiate(accept)

    def _render(self, snapshot: Snapshot, fresh: bool, fmt: Format) -> _Rendered:
        if self._dcgm is not None:
            self.renders += 1
            return _Rendered(self._dcgm.render(snapshot, fresh=fresh))
        static = render(families(snapshot, fresh=fresh, version=self._version), fmt)
        self.renders += 1
        # OpenMetrics ends with "# EOF"; the per-scrape age family goes before it.
        if fmt is Format.OPENMETRICS:
            static = static.removesuffix(_OPENMETRICS_EOF)
        return _Rendered(static)

    def body(
        self, snapshot: Snapshot, *, fresh: bool, fmt: Format, age_seconds: float,
        gzip: bool = False,
    ) -> bytes:
        sequence, bodies = self._entry
        key = (fresh, fmt)
        rendered = bodies.get(key) if sequence == snapshot.sequence else None
        if rendered is None:
            rendered = self._render(snapshot, fresh, fmt)
            kept = bodies if sequence == snapshot.sequence else {}
            self._entry = (snapshot.sequence, {**kept, key: rendered})
        self._scraped[(fmt, gzip)] = snapshot.sequence
        tail = b"" if self._dcgm is not None else render([age_family(age_seconds)], fmt)
        return rendered.gzipped().finish(tail) if gzip else rendered.plain + tail

    def prepare(self, snapshot: Snapshot) -> None:
        """Render ahead what the scrapes of the previous snapshot asked for (sampler thread)."""
        wanted = [key for key, seq in list(self._scraped.items()) if seq >= snapshot.sequence - 1]
        if not wanted:
            self.published = snapshot
            return
        bodies: dict[tuple[bool, Format], _Rendered] = {}
        for fmt, gzip in wanted:
            rendered = bodies.get((True, fmt)) or self._render(snapshot, True, fmt)
            if gzip:
                rendered.gzipped()
            bodies[(True, fmt)] = rendered
        self._entry = (snapshot.sequence, bodies)
        self.published = snapshot


def render_snapshot(
    snapshot: Snapshot, fmt: Format, *, version: str, fresh: bool = True,
    age: Callable[[Snapshot], float] = lambda s: 0.0,
) -> bytes:
    """Render one snapshot uncached (the golden tests and the benchmark's baseline)."""
    items = [*families(snapshot, fresh=fresh, version=version), age_family(age(snapshot))]
    return render(items, fmt)
