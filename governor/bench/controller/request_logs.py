"""Request logs as workloads: production traffic replayed instead of Poisson phases.

A request log is a CSV or JSONL file with one request a row: when it arrived and how many prompt
and output tokens it had. Its schema is told by its columns, not its name:

=========================  ==========================================  ====================
schema                     columns (time, prompt, output)              time
=========================  ==========================================  ====================
Governor's request log     ``at``, ``prompt_tokens``, ``output_tokens``  Unix seconds
Azure LLM inference        ``TIMESTAMP``, ``ContextTokens``,           a datetime
                           ``GeneratedTokens``
BurstGPT                   ``Timestamp``, ``Request tokens``,          seconds
                           ``Response tokens``
Mooncake / Dynamo JSONL    ``timestamp``, ``input_length``,            milliseconds
                           ``output_length``
=========================  ==========================================  ====================

Times become seconds since the first request; ``slice`` takes ``duration`` seconds of the log
from ``start`` (in the log's own time), and ``speed`` replays it that many times faster. A
prompt longer than the context is capped (and counted); a row that cannot be read is skipped
and counted by reason, with the first few located (``file:line: what``); a file with no
usable row, or no known schema, is a :class:`~governor.bench.controller.workload.WorkloadError`.
Each request's class is the one Governor's request log recorded where the spec declares it, and
otherwise the spec's classes' verdict, as the service would classify it (a recorded class the
spec does not declare is counted in the report, ``undeclared_classes``). Lines may end in LF,
CRLF or CR alone; a line is never held past :data:`MAX_LINE_BYTES`, and a replay lasts at most
:data:`MAX_REPLAY_SECONDS` (one stray time would otherwise stretch it over years)::

    log = load_request_log(Path("trace.csv"), ReplayOptions(speed=2.0), name="azure")
    log.arrivals(seed=1)       # the same list whatever the seed: the log is the randomness
    log.report["skipped"]      # {"failed (0 response tokens)": 12, ...}
"""

from __future__ import annotations

import csv
import datetime as dt
import itertools
import json
import math
from array import array
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO, Final

import numpy as np

from governor.bench.controller.workload import (
    MAX_DURATION_SECONDS,
    VERSION,
    Arrival,
    Workload,
    WorkloadError,
    parse_workload,
    read_yaml,
)
from governor.contracts import request_log as contract
from governor.contracts.endpoints import CHAT_COMPLETIONS_PATH
from governor.slo.classes import RequestClasses

MAX_ROWS: Final = 20_000_000
# The longest replay, as long as the longest workload: a run's memory and time grow with it.
MAX_REPLAY_SECONDS: Final = MAX_DURATION_SECONDS
# Schemas whose clock is Unix time: an error shows their times as dates.
UNIX_CLOCKS: Final = frozenset({"azure", "governor"})
MAX_PROBLEMS_SHOWN: Final = 5
# A JSON line or CSV row longer than this is not a request: skipped, not parsed, never held.
MAX_LINE_BYTES: Final = 64 * 1024
# A line with no end this far is not a request log's: reading stops (/dev/zero, a disk image).
MAX_RUNAWAY_BYTES: Final = 1024 * 1024
CHUNK_BYTES: Final = 64 * 1024
FAILED: Final = "failed (0 response tokens)"
NOT_SERVED: Final = "not served (no output token)"
BAD_ROW: Final = "unreadable"


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    """How a log becomes a run: its time slice, speed, context and classes."""

    speed: float = 1.0
    start_seconds: float = 0.0  # the slice, in the log's own time
    duration_seconds: float | None = None  # None: to the end of the log
    context_tokens: int = 8192  # the engine's max_model_len: prompt + output never exceed it
    classes: RequestClasses = field(default_factory=RequestClasses)

    def __post_init__(self) -> None:
        errors = []
        if not (math.isfinite(self.speed) and 0 < self.speed <= 1000):
            errors.append(f"speed: must be in (0, 1000], got {self.speed!r}")
        if not (math.isfinite(self.start_seconds) and self.start_seconds >= 0):
            errors.append(f"slice: the start must be a duration ≥ 0, got {self.start_seconds!r}")
        if self.duration_seconds is not None and not (
                math.isfinite(self.duration_seconds) and self.duration_seconds > 0):
            errors.append(f"slice: the duration must be positive, got {self.duration_seconds!r}")
        if self.context_tokens < 2:
            errors.append(f"context_tokens: must be at least 2, got {self.context_tokens}")
        if errors:
            raise ValueError("; ".join(errors))


@dataclass(frozen=True, slots=True)
class Row:
    """One request as the log has it: time in the schema's clock, its counts, its labels."""

    time: float
    prompt_tokens: int
    output_tokens: int
    route: str = CHAT_COMPLETIONS_PATH
    request_class: str | None = None  # what the service recorded (Governor's log only)


@dataclass(frozen=True, slots=True)
class Schema:
    name: str
    time: str
    prompt: str
    output: str
    clock: Callable[[object], float]  # the time column's value → seconds
    # A row's reason to be skipped although it parses (None: replay it).
    skip: Callable[[Mapping[str, Any], int], str | None] = lambda row, output: None

    def matches(self, columns: set[str]) -> bool:
        return {self.time, self.prompt, self.output} <= columns

    def row(self, data: Mapping[str, Any]) -> Row | str:
        """The row, or why it is skipped."""
        try:
            time = self.clock(data[self.time])
            prompt, output = _count(data[self.prompt]), _count(data[self.output])
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            return f"{BAD_ROW}: {exc}"[:120]
        reason = self.skip(data, output)
        if reason is not None:
            return reason
        if prompt < 1:
            return f"{BAD_ROW}: no prompt token"
        return Row(time, prompt, output)


def _count(raw: object) -> int:
    if isinstance(raw, bool):
        raise ValueError(f"not a token count: {raw!r}")
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, float) and raw.is_integer():
        value = int(raw)
    elif isinstance(raw, str) and raw.strip().isdigit():
        value = int(raw.strip())
    else:
        raise ValueError(f"not a token count: {str(raw)[:30]!r}")
    if not 0 <= value <= 10_000_000:
        raise ValueError(f"token count out of range: {value}")
    return value


def _seconds(raw: object) -> float:
    try:
        value = float(raw) if isinstance(raw, int | float | str) and not isinstance(raw, bool) \
            else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ValueError(f"not a time in seconds: {str(raw)[:30]!r}")
    return value


def _milliseconds(raw: object) -> float:
    return _seconds(raw) / 1000.0


def _datetime(raw: object) -> float:
    if not isinstance(raw, str):
        raise ValueError(f"not a datetime: {raw!r}")
    moment = dt.datetime.fromisoformat(raw.strip())
    if moment.tzinfo is None:  # only differences matter; read a naive time as UTC
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.timestamp()


def _burstgpt_failure(row: Mapping[str, Any], output: int) -> str | None:
    # BurstGPT marks a failed request with 0 response tokens (its README).
    return FAILED if output == 0 else None


AZURE: Final = Schema("azure", "TIMESTAMP", "ContextTokens", "GeneratedTokens", _datetime)
BURSTGPT: Final = Schema("burstgpt", "Timestamp", "Request tokens", "Response tokens", _seconds,
                         _burstgpt_failure)
MOONCAKE: Final = Schema("mooncake", "timestamp", "input_length", "output_length", _milliseconds)
SCHEMAS: Final = (AZURE, BURSTGPT, MOONCAKE)


def _governor_row(data: Mapping[str, Any]) -> Row | str:
    """A line of Governor's own request log (:mod:`governor.contracts.request_log`)."""
    try:
        record = contract.RequestRecord.from_mapping(data)
    except contract.RecordError as exc:
        return f"{BAD_ROW}: {exc}"[:120]
    if record.output_tokens < 1:
        return NOT_SERVED
    return Row(record.at, max(1, record.prompt_tokens), record.output_tokens, record.route,
               record.request_class)


@dataclass
class _Tally:
    """Rows read, kept and skipped (by reason, the first few located)."""

    source: str
    rows: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    lines: array[int] = field(default_factory=lambda: array("Q"))  # of each row kept, in order

    def skip(self, line: int, reason: str) -> None:
        key = BAD_ROW if reason.startswith(BAD_ROW) else reason
        self.skipped[key] += 1
        if key == BAD_ROW and len(self.problems) < MAX_PROBLEMS_SHOWN:
            self.problems.append(f"{self.source}:{line}: {reason.removeprefix(BAD_ROW + ': ')}")


def _lines(path: Path) -> Iterator[tuple[int, str | None]]:
    """Numbered lines of text, ended by LF, CRLF or CR alone; ``None`` for a line past
    :data:`MAX_LINE_BYTES` (skipped). A line with no end within :data:`MAX_RUNAWAY_BYTES` is no
    request log's (``/dev/zero``, a disk image): reading stops there, with its line."""
    number = 0
    try:
        with path.open("rb") as handle:
            for number, raw in enumerate(_split(handle), start=1):
                yield number, None if raw is None else \
                    raw.decode("utf-8", errors="replace").lstrip("\ufeff")
    except _RunawayLine:
        raise WorkloadError(str(path), [
            f"line {number}: no line end in its first {MAX_RUNAWAY_BYTES // 1024} KiB: not a "
            "request log (one request a line)"]) from None
    except OSError as exc:
        raise WorkloadError(str(path), [f"cannot read: {exc}"]) from exc


class _RunawayLine(Exception):
    """A line still without an end after :data:`MAX_RUNAWAY_BYTES`."""


def _split(handle: BinaryIO) -> Iterator[bytes | None]:
    """Lines without their ends, read in chunks: never more than a chunk and
    :data:`MAX_LINE_BYTES` held. A longer line is ``None`` as soon as it is that long, and its
    bytes are dropped as they come."""
    held = b""  # the current line's start, while it is short enough to keep
    dropped = 0  # bytes of the current line dropped since it came out as None
    while chunk := handle.read(CHUNK_BYTES):
        *ended, held = (held + chunk).splitlines(keepends=True)
        if held.endswith(b"\n"):
            ended.append(held)
            held = b""
        # A CR at the very end may be the first half of a CRLF: the next chunk says.
        for piece in ended:
            line = piece.rstrip(b"\r\n")
            if dropped:  # the end of a line already out as None
                dropped = 0
            else:
                yield None if len(line) > MAX_LINE_BYTES else line
        if dropped or len(held) - held.endswith(b"\r") > MAX_LINE_BYTES:
            if not dropped:
                yield None
            dropped += len(held)
            if dropped > MAX_RUNAWAY_BYTES:
                raise _RunawayLine
            held = b"\r" if held.endswith(b"\r") else b""
    if held and not dropped:  # the last line, without an end or with a CR
        line = held.removesuffix(b"\r")
        yield None if len(line) > MAX_LINE_BYTES else line


def read_rows(path: Path) -> tuple[str, list[Row], _Tally]:
    """The schema's name, the usable rows and the tally of the rest."""
    tally = _Tally(str(path))
    lines = _lines(path)
    first = next(((n, text) for n, text in lines if text is None or text.strip()), None)
    if first is None:
        raise WorkloadError(str(path), ["empty: not a request log"])
    number, text = first
    if text is None:
        raise WorkloadError(str(path), [f"line {number}: longer than "
                                        f"{MAX_LINE_BYTES // 1024} KiB: not a request log (its "
                                        "first line is a header or one request)"])
    if text.lstrip().startswith("{"):
        name, rows = _jsonl((number, text), lines, tally)
    else:
        name, rows = _csv((number, text), lines, tally)
    if not rows:
        reasons = ", ".join(f"{n} {r}" for r, n in tally.skipped.most_common()) or "none"
        raise WorkloadError(str(path), [f"no usable request among {tally.rows} rows "
                                        f"({reasons})", *tally.problems])
    return name, rows, tally


def _requests(lines: Iterator[tuple[int, str | None]], tally: _Tally
              ) -> Iterator[tuple[int, str]]:
    """The lines that may be requests, counted; blank ones passed over, long ones skipped."""
    for number, text in lines:
        if text is not None and not text.strip():
            continue
        _count_row(tally, str(number))
        if text is None:
            tally.skip(number, f"{BAD_ROW}: longer than {MAX_LINE_BYTES // 1024} KiB")
            continue
        yield number, text


def _jsonl(first: tuple[int, str], lines: Iterator[tuple[int, str | None]],
           tally: _Tally) -> tuple[str, list[Row]]:
    parse: Callable[[Mapping[str, Any]], Row | str] | None = None
    name = ""
    rows: list[Row] = []
    for number, text in _requests(_chain(first, lines), tally):
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            tally.skip(number, f"{BAD_ROW}: not JSON ({str(exc)[:60]})")
            continue
        if not isinstance(data, dict):
            tally.skip(number, f"{BAD_ROW}: not a JSON object")
            continue
        if parse is None:
            name, parse = _jsonl_schema(data, tally.source, number)
        _keep(parse(data), number, rows, tally)
    return name, rows


def _jsonl_schema(data: Mapping[str, Any], source: str,
                  line: int) -> tuple[str, Callable[[Mapping[str, Any]], Row | str]]:
    if data.get(contract.VERSION_KEY) == contract.VERSION:
        return "governor", _governor_row
    schema = next((s for s in SCHEMAS if s.matches(set(map(str, data)))), None)
    if schema is None:
        raise WorkloadError(source, [f"line {line}: no known request-log schema in the keys "
                                     f"{sorted(map(str, data))[:8]} ({_known()})"])
    return schema.name, schema.row


def _csv(first: tuple[int, str], lines: Iterator[tuple[int, str | None]],
         tally: _Tally) -> tuple[str, list[Row]]:
    try:
        header = next(csv.reader([first[1]]), [])
    except csv.Error as exc:
        raise WorkloadError(tally.source, [f"line {first[0]}: not a CSV header ({exc})"]) \
            from None
    columns = {c.strip() for c in header}
    schema = next((s for s in SCHEMAS if s.matches(columns)), None)
    if schema is None:
        raise WorkloadError(tally.source, [f"line {first[0]}: no known request-log schema in "
                                           f"the columns {sorted(columns)[:8]} ({_known()})"])
    names = [c.strip() for c in header]
    rows: list[Row] = []
    for number, text in _requests(lines, tally):
        try:
            values = next(csv.reader([text]))
        except (csv.Error, StopIteration) as exc:
            tally.skip(number, f"{BAD_ROW}: not a CSV row ({exc})")
            continue
        if len(values) != len(names):
            tally.skip(number, f"{BAD_ROW}: {len(values)} fields, the header has {len(names)}")
            continue
        _keep(schema.row(dict(zip(names, values, strict=True))), number, rows, tally)
    return schema.name, rows


def _chain(first: tuple[int, str], rest: Iterator[tuple[int, str | None]]
           ) -> Iterator[tuple[int, str | None]]:
    yield first
    yield from rest


def _count_row(tally: _Tally, where: str) -> None:
    tally.rows += 1
    if tally.rows > MAX_ROWS:
        raise WorkloadError(tally.source, [f"line {where}: more than {MAX_ROWS} requests; "
                                           "take a slice of the file first"])


def _keep(parsed: Row | str, line: int, rows: list[Row], tally: _Tally) -> None:
    if isinstance(parsed, str):
        tally.skip(line, parsed)
    else:
        rows.append(parsed)
        tally.lines.append(line)


def _known() -> str:
    named = ", ".join(f"{s.name} ({s.time}, {s.prompt}, {s.output})" for s in SCHEMAS)
    return f"known: {named}, and Governor's request log ({contract.VERSION})"


# ---- a log as a workload -----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class RequestLog:
    """A workload whose arrivals are a log's: the same requests whatever the seed."""

    name: str
    duration_seconds: float
    requests: tuple[Arrival, ...]
    description: str = ""
    # What was read: schema, rows, kept, skipped by reason, capped, speed, slice.
    report: Mapping[str, Any] = field(default_factory=dict)

    def arrivals(self, seed: int) -> list[Arrival]:
        return list(self.requests)

    def with_minutes(self, minutes: float) -> RequestLog:
        """The first ``minutes`` of the replay."""
        end = minutes * 60.0
        return replace(self, duration_seconds=end,
                       requests=tuple(a for a in self.requests if a.at < end))

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(sorted({a.kind for a in self.requests}))

    def rates(self, t: float, window: float = 60.0) -> dict[str, float]:
        """Requests per second of each kind over the ``window`` around ``t``."""
        lo, hi = max(0.0, t - window / 2), min(self.duration_seconds, t + window / 2)
        span = max(hi - lo, 1e-9)
        counts = Counter(a.kind for a in self.requests if lo <= a.at < hi)
        return {kind: counts[kind] / span for kind in self.kinds}


Traffic = Workload | RequestLog


def load_request_log(paths: Path | Sequence[Path], options: ReplayOptions, *,
                     name: str | None = None, description: str = "") -> RequestLog:
    """One or more logs merged on their own clocks, sliced, sped up, capped and classified."""
    files = [paths] if isinstance(paths, Path) else list(paths)
    rows: list[Row] = []
    schemas, tallies = [], []
    for path in files:
        schema, found, tally = read_rows(path)
        schemas.append(schema)
        tallies.append(tally)
        rows += found
    start = min(r.time for r in rows) + options.start_seconds
    span = max(r.time for r in rows) - start
    length = options.duration_seconds if options.duration_seconds is not None else span
    where = ", ".join(map(str, files))
    if span < 0:
        whole = max(0.0, span + options.start_seconds)
        raise WorkloadError(where, [f"slice: the log spans {whole:g} s; nothing from "
                                    f"{options.start_seconds:g} s on"])
    if length / options.speed > MAX_REPLAY_SECONDS:
        raise WorkloadError(where, _too_long(rows, _Origins(tallies, schemas), length, options))
    end = start + length if options.duration_seconds is not None else math.inf
    chosen = sorted((r for r in rows if start <= r.time < end), key=lambda r: r.time)
    if not chosen:
        raise WorkloadError(where, [f"slice: no request between {options.start_seconds:g} s and "
                                    f"{options.start_seconds + length:g} s of the log"])
    arrivals, capped, undeclared = _arrivals(chosen, start, options)
    duration = max(length / options.speed, 1.0)
    report = {
        "files": [str(p) for p in files], "schemas": schemas,
        "rows": sum(t.rows for t in tallies), "requests": len(arrivals),
        "skipped": dict(sum((t.skipped for t in tallies), Counter())),
        "problems": [p for t in tallies for p in t.problems][:MAX_PROBLEMS_SHOWN],
        "capped_to_context": capped, "context_tokens": options.context_tokens,
        "speed": options.speed, "slice_seconds": [options.start_seconds, length],
        "undeclared_classes": dict(sorted(undeclared.items())),
    }
    label = name or (files[0].stem if len(files) == 1 else "+".join(p.stem for p in files))
    return RequestLog(label, duration, tuple(arrivals), description, report)


@dataclass(frozen=True, slots=True)
class _Origins:
    """Where each of the merged rows came from: ``file:line``, and its clock."""

    tallies: Sequence[_Tally]
    schemas: Sequence[str]

    def _find(self, index: int) -> tuple[_Tally, str, int]:
        for tally, schema in zip(self.tallies, self.schemas, strict=True):
            if index < len(tally.lines):
                return tally, schema, tally.lines[index]
            index -= len(tally.lines)
        raise IndexError(index)

    def where(self, index: int) -> str:
        tally, _, line = self._find(index)
        return f"{tally.source}:{line}"

    def moment(self, index: int, time: float) -> str:
        """The time as the log gives it: seconds, with the date where its clock is Unix time."""
        _, schema, _ = self._find(index)
        if schema in UNIX_CLOCKS:
            try:
                moment = dt.datetime.fromtimestamp(time, dt.UTC)
                return moment.isoformat(sep=" ", timespec="seconds").replace("+00:00", " UTC")
            except (OverflowError, ValueError, OSError):
                pass
        return f"{time:.15g} s"


def _too_long(rows: Sequence[Row], origins: _Origins, length: float,
              options: ReplayOptions) -> list[str]:
    """Why a replay would last past :data:`MAX_REPLAY_SECONDS`: the slice asked for, or the
    log's first and last requests and its largest gap (a stray time is one line)."""
    limit = (f"a replay lasts at most {_span(MAX_REPLAY_SECONDS)} (the log's time over "
             f"--speed, here {options.speed:g})")
    if options.duration_seconds is not None:
        return [f"slice: {_span(length)} of the log replay for {_span(length / options.speed)}; "
                f"{limit}: take a shorter slice"]
    order = sorted(range(len(rows)), key=lambda i: rows[i].time)
    first, last = order[0], order[-1]
    before, after = max(itertools.pairwise(order), default=(first, last),
                        key=lambda p: rows[p[1]].time - rows[p[0]].time)
    gap = rows[after].time - rows[before].time
    return [f"the log spans {_span(rows[last].time - rows[first].time)}, from "
            f"{origins.where(first)} ({origins.moment(first, rows[first].time)}) to "
            f"{origins.where(last)} ({origins.moment(last, rows[last].time)}); {limit}",
            f"its largest gap, {_span(gap)}, is between {origins.where(before)} and "
            f"{origins.where(after)}: delete a stray line, or replay a part of the log with "
            "--slice START:DURATION (in the log's own time, from its first request)"]


def _span(seconds: float) -> str:
    """``7 days``, ``54.1 years``, ``3.2 h``: a duration at the scale a person reads it."""
    for unit, size in (("years", 365.25 * 86400), ("days", 86400.0), ("h", 3600.0), ("s", 1.0)):
        if seconds >= size or unit == "s":
            value = seconds / size
            return f"{value:.3g} {unit}" if value < 1000 else f"{value:,.0f} {unit}"
    raise AssertionError("unreachable")


def _arrivals(rows: Sequence[Row], start: float,
              options: ReplayOptions) -> tuple[list[Arrival], int, Counter[str]]:
    """The rows as arrivals in replay time; prompts capped so that prompt + output fit. A class
    the log recorded is kept where the spec declares it; one it does not declare is counted,
    and the request classified by the spec's rules instead."""
    out, capped, undeclared = [], 0, Counter[str]()
    context, classes = options.context_tokens, options.classes
    for row in rows:
        output = min(max(row.output_tokens, 1), context - 1)
        prompt = min(row.prompt_tokens, context - output)
        capped += prompt < row.prompt_tokens or output < row.output_tokens
        recorded = row.request_class if row.request_class in classes.names else None
        if row.request_class and recorded is None:
            undeclared[row.request_class] += 1
        kind = recorded or classes.classify(row.route, {}, prompt).name
        out.append(Arrival((row.time - start) / options.speed, prompt, output, kind, recorded))
    return out, capped, undeclared


def parse_slice(text: str) -> tuple[float, float]:
    """``START:DURATION`` in the log's own time (``10m:5m``, ``0:90s``) → seconds."""
    from governor.contracts.promql import parse_duration

    start, sep, length = text.partition(":")
    try:
        if not sep:
            raise ValueError("expected START:DURATION")
        first = 0.0 if start.strip() in ("", "0") else float(parse_duration(start.strip()))
        return first, float(parse_duration(length.strip()))
    except ValueError as exc:
        raise ValueError(f"--slice: expected START:DURATION such as 10m:5m, got {text!r} "
                         f"({exc})") from None


def describe(log: RequestLog) -> str:
    """One line on what was replayed, for the benchmark's stderr."""
    r = log.report
    skipped = ", ".join(f"{n} {reason}" for reason, n in sorted(r["skipped"].items())) or "none"
    text = (f"{log.name}: {r['requests']} requests of {r['rows']} rows "
            f"({'/'.join(sorted(set(r['schemas'])))}), speed {r['speed']:g}x, skipped: {skipped}; "
            f"{r['capped_to_context']} capped to the {r['context_tokens']}-token context")
    kinds = Counter(a.kind for a in log.requests)
    peak = _peak_rate(log)
    text += f"; classes {dict(sorted(kinds.items()))}, peak {peak:.1f} req/s over 10 s"
    if r["undeclared_classes"]:
        text += (f"; recorded classes the spec does not declare, classified by its rules "
                 f"instead: {r['undeclared_classes']}")
    return text


def _peak_rate(log: RequestLog) -> float:
    if not log.requests:
        return 0.0
    times = np.fromiter((a.at for a in log.requests), float)
    bins = np.bincount((times // 10).astype(int))
    return float(bins.max()) / 10.0


# ---- a workload file: phases, a request log, or a named replay of logs -------------------------

YAML_SUFFIXES: Final = (".yaml", ".yml")


def load_traffic(path: Path, options: ReplayOptions) -> Traffic:
    """A phases file, a named replay (a YAML file with ``request_logs``), or a request log.

    A named replay keeps a log beside the synthetic workloads with the way to replay it; its
    paths are relative to the file, and ``options``' speed multiplies its own::

        version: governor/workload/v1
        name: azure-chat-code
        request_logs: [../traces/azure-conv.csv, ../traces/azure-code.csv]
        speed: 2.5
        slice: 0s:15m
    """
    if path.suffix.lower() not in YAML_SUFFIXES:
        return load_request_log(path, options)
    data = read_yaml(path)
    if not isinstance(data, Mapping) or "request_logs" not in data:
        return parse_workload(data, str(path))
    return _named_replay(path, data, options)


def _named_replay(path: Path, data: Mapping[str, Any], options: ReplayOptions) -> RequestLog:
    errors = [f"{key}: unknown field" for key in sorted(set(map(str, data)) - {
        "version", "name", "description", "request_logs", "speed", "slice"})]
    if data.get("version") != VERSION:
        errors.append(f"version: expected {VERSION!r}, got {data.get('version')!r}")
    logs = data.get("request_logs")
    if not isinstance(logs, list) or not logs or len(logs) > 16 or not all(
            isinstance(p, str) and p for p in logs):
        errors.append("request_logs: expected a list of 1 to 16 file paths")
        logs = []
    speed = data.get("speed", 1.0)
    if isinstance(speed, bool) or not isinstance(speed, int | float) or not 0 < speed <= 1000:
        errors.append(f"speed: expected a factor in (0, 1000], got {speed!r}")
        speed = 1.0
    start, length = options.start_seconds, options.duration_seconds
    if "slice" in data and length is None:
        try:
            start, length = parse_slice(str(data["slice"]))
        except ValueError as exc:
            errors.append(f"slice: {exc}")
    name, description = data.get("name", path.stem), data.get("description", "")
    if not isinstance(name, str) or not name or not isinstance(description, str):
        errors.append("name, description: must be text")
    if errors:
        raise WorkloadError(str(path), errors)
    files = [(path.parent / p) for p in logs]
    try:
        merged = replace(options, speed=options.speed * float(speed), start_seconds=start,
                         duration_seconds=length)
    except ValueError as exc:
        raise WorkloadError(str(path), [str(exc)]) from exc
    return load_request_log(files, merged, name=str(name), description=str(description))
