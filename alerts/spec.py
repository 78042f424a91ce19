"""The SLO spec: ``slo.yaml`` → a validated, frozen model read by the generators and the controller.

>>> spec = parse_spec({
...     "version": "governor/v1", "service": "inference", "period": "30d",
...     "slos": [{"name": "availability", "objective": "99.9%",
...               "sli": {"ratio": {"errors": 'governor_requests_total{code=~"5.."}',
...                                 "total": "governor_requests_total"}}}]})
>>> spec.slo("availability").objective, spec.period_seconds
(0.999, 2592000)

Every problem is reported at once, each as ``where: what`` (``slo.yaml:9: slos[0].objective: …``),
in :attr:`SpecError.errors`. OpenSLO v1 ``kind: SLO`` documents are accepted too
(``alerts.openslo``).
This module imports no runtime component: the controller imports it, and an import-linter contract
keeps it that way. Checks that need the metric catalog (is the threshold a bucket edge?) run when
the caller passes ``histograms=``, as the generator does.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Final

from alerts import openslo
from alerts.promql import (
    LABEL_NAME,
    METRIC_NAME,
    format_duration,
    format_number,
    parse_duration,
    parse_selector,
    to_decimal,
)
from alerts.yamlio import Document, YamlError, read_documents, read_file

SPEC_VERSION: Final = "governor/v1"
MIN_PERIOD_SECONDS: Final = 7 * 86400  # the longest burn-rate window (3d) must fit well inside
MAX_PERIOD_SECONDS: Final = 400 * 86400
MAX_SLOS: Final = 64
MAX_LABELS: Final = 32
MAX_TEXT: Final = 1024
# Labels the generated rules set themselves; a spec may not override them.
RESERVED_LABELS: Final = frozenset(
    {"slo", "service", "severity", "alertname", "instance", "job", "le", "quantile"}
)

_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_SERVICE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}")
_RATE = re.compile(r"(\d+(?:\.\d+)?)\s*/\s*(s|m|h)")
_PER = {"s": Decimal(1), "m": Decimal(60), "h": Decimal(3600)}

Path_ = tuple[str | int, ...]


class SpecError(Exception):
    """A spec that cannot be used; :attr:`errors` holds every problem, each ``where: what``."""

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors: tuple[str, ...] = tuple(errors)
        count = len(self.errors)
        heading = "1 problem" if count == 1 else f"{count} problems"
        super().__init__(f"{heading} in the SLO spec:\n  " + "\n  ".join(self.errors))


class Labels(Mapping[str, str]):
    """An immutable, hashable, sorted label set (so that SLO and SloSpec stay hashable)."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, str] | None = None) -> None:
        self._items: tuple[tuple[str, str], ...] = tuple(sorted((items or {}).items()))

    def __getitem__(self, key: str) -> str:
        for name, value in self._items:
            if name == key:
                return value
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self._items) == dict(other.items())

    def __repr__(self) -> str:
        return f"Labels({dict(self._items)!r})"


@dataclass(frozen=True)
class LatencySLI:
    """Good events: observations of histogram ``metric`` at or below ``threshold_seconds``."""

    metric: str  # histogram base name, e.g. "governor_inter_token_latency_seconds"
    threshold_seconds: float  # a bucket edge of that histogram
    selector: Mapping[str, str] = field(default_factory=Labels)  # extra equality matchers


@dataclass(frozen=True)
class RatioSLI:
    """Bad events over all events, both as plain PromQL counter selectors."""

    errors: str  # e.g. 'governor_requests_total{code=~"5.."}'
    total: str  # e.g. 'governor_requests_total'


@dataclass(frozen=True)
class SLO:
    name: str  # "inter-token-latency", "time-to-first-token", "availability"
    description: str
    objective: float  # a ratio in (0, 1), e.g. 0.99
    sli: LatencySLI | RatioSLI
    controller: bool  # the controller acts on this SLO
    labels: Mapping[str, str]
    # Burn-rate alerts stay quiet while the SLI sees fewer events per second than this (0: off).
    min_event_rate_per_second: float = 0.0

    @property
    def camel_name(self) -> str:
        """``inter-token-latency`` → ``InterTokenLatency``, the stem of its alert names."""
        return camel_case(self.name)

    @property
    def error_budget(self) -> Decimal:
        """``1 - objective``, exactly: 0.999 → Decimal('0.001'), not 0.0010000000000000009."""
        return Decimal(1) - to_decimal(self.objective)


@dataclass(frozen=True)
class SloSpec:
    version: str
    service: str
    period_seconds: int
    slos: tuple[SLO, ...]
    labels: Mapping[str, str] = field(default_factory=Labels)

    def slo(self, name: str) -> SLO:
        for slo in self.slos:
            if slo.name == name:
                return slo
        known = ", ".join(s.name for s in self.slos)
        raise KeyError(f"no SLO named {name!r} in the spec (it has: {known})")

    @property
    def period(self) -> str:
        """The period as a Prometheus duration, e.g. ``30d``."""
        return format_duration(self.period_seconds)


def camel_case(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("-"))


# ---- validation --------------------------------------------------------------------------------


def format_path(path: Path_) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text or "(top level)"


class _Problems:
    """Collects ``where: what`` lines; ``where`` comes from the caller (lines, OpenSLO paths)."""

    def __init__(self, where: Callable[[Path_], str], *, quiet_missing: bool = False) -> None:
        self.where = where
        self.items: list[str] = []
        # After a failed OpenSLO translation a missing key is a consequence, already explained.
        self.quiet_missing = quiet_missing

    def add(self, path: Path_, message: str) -> None:
        self.items.append(f"{self.where(path)}: {message}")

    def missing(self, path: Path_, key: str) -> None:
        if self.quiet_missing:
            self.items.append("")  # still a failure, but nothing new to say
        else:
            self.add(path, f"missing required key {key!r}")


def _where_in(source: str, lines: Mapping[Path_, int]) -> Callable[[Path_], str]:
    def where(path: Path_) -> str:
        for depth in range(len(path), -1, -1):  # the nearest line we know
            line = lines.get(path[:depth])
            if line is not None:
                return f"{source}:{line}: {format_path(path)}"
        return f"{source}: {format_path(path)}"

    return where


def _type_name(value: object) -> str:
    names = {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean",
             int: "an integer", float: "a number", type(None): "nothing (null)"}
    return names.get(type(value), type(value).__name__)


def _mapping(
    value: object, path: Path_, problems: _Problems, allowed: Sequence[str],
    required: Sequence[str] = (),
) -> dict[str, object] | None:
    """``value`` as a mapping of known string keys; unknown and missing keys become problems."""
    if not isinstance(value, dict):
        problems.add(path, f"must be a mapping with keys {', '.join(allowed)}: "
                           f"got {_type_name(value)}")
        return None
    result: dict[str, object] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            problems.add(path, f"keys must be strings: got {key!r}")
        elif key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=1)
            hint = (f" (did you mean {close[0]!r}?)" if close
                    else f" (expected: {', '.join(allowed)})")
            problems.add((*path, key), f"unknown key {key[:80]!r}{hint}")
        else:
            result[key] = item
    for key in required:
        if key not in result:
            problems.missing(path, key)
    return result


def _text(value: object, path: Path_, problems: _Problems, *, what: str = "text") -> str | None:
    if not isinstance(value, str):
        problems.add(path, f"must be {what} (a string): got {_type_name(value)}")
        return None
    if len(value) > MAX_TEXT:
        problems.add(path, f"longer than {MAX_TEXT} characters")
        return None
    return value


def _labels(value: object, path: Path_, problems: _Problems) -> Labels:
    if value is None:
        return Labels()
    if not isinstance(value, dict):
        problems.add(path, f"must be a mapping of label names to strings: got {_type_name(value)}")
        return Labels()
    if len(value) > MAX_LABELS:
        problems.add(path, f"more than {MAX_LABELS} labels")
        return Labels()
    labels: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not LABEL_NAME.fullmatch(key) or key.startswith("__"):
            problems.add(path, f"{key!r} is not a valid label name ([a-zA-Z_][a-zA-Z0-9_]*, "
                               "not starting with __)")
        elif key in RESERVED_LABELS:
            problems.add((*path, key), f"label {key!r} is set by Governor and cannot be overridden")
        elif (text := _text(item, (*path, key), problems, what="a label value")) is not None:
            labels[key] = text
    return Labels(labels)


def parse_objective(value: object) -> float:
    """``99``, ``"99%"``, ``99.9``, ``0.99`` → a ratio in (0, 1); raises ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"must be a number or a percentage string: got {_type_name(value)}")
    text = value.strip() if isinstance(value, str) else value
    percent = isinstance(text, str) and text.endswith("%")
    try:
        number = to_decimal(text[:-1].strip() if isinstance(text, str) and percent else text)
    except ValueError:
        raise ValueError(f"not a number or percentage: {value!r}") from None
    if not number.is_finite():
        raise ValueError(f"must be finite: got {value!r}")
    if not percent and 0 < number < 1:
        return float(number)
    if 0 < number < 100 and (percent or number >= 1):
        return float(number / 100)
    raise ValueError(
        f"must be a percentage in (0, 100) such as 99.9 or \"99.9%\", or a ratio in (0, 1) "
        f"such as 0.999: got {value!r}"
    )


def _objective(value: object, path: Path_, problems: _Problems) -> float | None:
    try:
        return parse_objective(value)
    except ValueError as exc:
        problems.add(path, str(exc))
        return None


def _seconds(value: object, path: Path_, problems: _Problems, what: str) -> Decimal | None:
    """A duration string (``120ms``, ``30d``) or a bare number of seconds."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        problems.add(path, f"must be {what}, as a duration such as 120ms or 30d: "
                           f"got {_type_name(value)}")
        return None
    try:
        seconds = parse_duration(value) if isinstance(value, str) else to_decimal(value)
    except ValueError as exc:
        problems.add(path, str(exc))
        return None
    if not seconds.is_finite() or seconds <= 0:
        problems.add(path, f"must be a positive duration: got {value!r}")
        return None
    return seconds


def _period(value: object, path: Path_, problems: _Problems) -> int | None:
    seconds = _seconds(value, path, problems, "the SLO period")
    if seconds is None:
        return None
    if seconds != seconds.to_integral_value():
        problems.add(path, f"must be whole seconds: got {value!r}")
        return None
    if not MIN_PERIOD_SECONDS <= seconds <= MAX_PERIOD_SECONDS:
        problems.add(path, f"must be between {format_duration(MIN_PERIOD_SECONDS)} and "
                           f"{format_duration(MAX_PERIOD_SECONDS)}: got {value!r}")
        return None
    return int(seconds)


def _event_rate(value: object, path: Path_, problems: _Problems) -> float | None:
    """``0.5`` (per second), ``"30/m"``, ``"100/h"`` → events per second."""
    rate: Decimal | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        rate = to_decimal(value)
    elif isinstance(value, str) and (match := _RATE.fullmatch(value.strip())):
        rate = Decimal(match.group(1)) / _PER[match.group(2)]
    if rate is None or not rate.is_finite() or rate < 0:
        problems.add(path, f"must be a non-negative rate: events per second (0.5) or per "
                           f"minute or hour (\"30/m\", \"100/h\"): got {value!r}")
        return None
    return float(rate)


def _nearby_edges(edges: Sequence[float], threshold: float) -> str:
    ordered = sorted(edges)
    below = [e for e in ordered if e < threshold][-2:]
    above = [e for e in ordered if e > threshold][:2]
    return ", ".join(format_number(e) for e in (*below, *above))


def _latency(
    value: object, path: Path_, problems: _Problems,
    histograms: Mapping[str, Sequence[float]] | None,
) -> LatencySLI | None:
    fields = _mapping(value, path, problems, ("metric", "threshold", "selector"),
                      ("metric", "threshold"))
    if fields is None:
        return None
    metric = _text(fields.get("metric"), (*path, "metric"), problems, what="a histogram name")
    if metric is not None and not METRIC_NAME.fullmatch(metric):
        problems.add((*path, "metric"), f"{metric!r} is not a valid metric name")
        metric = None
    elif metric is not None and metric.endswith(("_bucket", "_count", "_sum")):
        problems.add((*path, "metric"), f"give the histogram's base name, without "
                                        f"_bucket/_count/_sum: got {metric!r}")
        metric = None
    threshold: float | None = None
    if "threshold" in fields:
        seconds = _seconds(fields["threshold"], (*path, "threshold"), problems, "a latency")
        threshold = None if seconds is None else float(seconds)
    selector = _labels(fields.get("selector"), (*path, "selector"), problems)
    if metric is None or threshold is None:
        return None
    if histograms is not None:
        threshold = _bucket_edge(metric, threshold, path, problems, histograms)
    return None if threshold is None else LatencySLI(metric, threshold, selector)


def _bucket_edge(
    metric: str, threshold: float, path: Path_, problems: _Problems,
    histograms: Mapping[str, Sequence[float]],
) -> float | None:
    """The bucket edge equal to ``threshold``: the SLI counts ``le`` buckets, so it must exist."""
    edges = histograms.get(metric)
    if edges is None:
        known = ", ".join(sorted(histograms))
        problems.add((*path, "metric"), f"{metric!r} is not a histogram Governor knows "
                                        f"(known: {known})")
        return None
    for edge in edges:
        if math.isclose(edge, threshold, rel_tol=1e-9):
            return edge
    problems.add((*path, "threshold"),
                 f"{format_number(threshold)}s is not a bucket edge of {metric}, so the SLI "
                 f"could not count it exactly (nearest edges: {_nearby_edges(edges, threshold)})")
    return None


def _selector(value: object, path: Path_, problems: _Problems) -> str | None:
    text = _text(value, path, problems, what="a PromQL counter selector")
    if text is None:
        return None
    try:
        return parse_selector(text).render()
    except ValueError as exc:
        problems.add(path, str(exc))
        return None


def _ratio(value: object, path: Path_, problems: _Problems) -> RatioSLI | None:
    fields = _mapping(value, path, problems, ("errors", "total"), ("errors", "total"))
    if fields is None:
        return None
    errors = _selector(fields.get("errors"), (*path, "errors"), problems) if "errors" in fields \
        else None
    total = _selector(fields.get("total"), (*path, "total"), problems) if "total" in fields \
        else None
    if errors is not None and errors == total:
        problems.add((*path, "errors"), "selects the same series as total, so the SLI would "
                                        "always be 100% errors")
        return None
    return None if errors is None or total is None else RatioSLI(errors, total)


def _sli(
    value: object, path: Path_, problems: _Problems,
    histograms: Mapping[str, Sequence[float]] | None,
) -> LatencySLI | RatioSLI | None:
    fields = _mapping(value, path, problems, ("latency", "ratio"))
    if fields is None:
        return None
    if len(fields) != 1:
        problems.add(path, "must have exactly one of 'latency' or 'ratio'")
        return None
    if "latency" in fields:
        return _latency(fields["latency"], (*path, "latency"), problems, histograms)
    return _ratio(fields["ratio"], (*path, "ratio"), problems)


_SLO_KEYS = ("name", "description", "objective", "sli", "controller", "labels", "min_event_rate")


def _slo(
    value: object, path: Path_, problems: _Problems,
    histograms: Mapping[str, Sequence[float]] | None,
) -> SLO | None:
    fields = _mapping(value, path, problems, _SLO_KEYS, ("name", "objective", "sli"))
    if fields is None:
        return None
    name = _text(fields.get("name"), (*path, "name"), problems, what="a name") \
        if "name" in fields else None
    if name is not None and not _NAME.fullmatch(name):
        problems.add((*path, "name"), f"{name[:80]!r} must be lower-case letters, digits and "
                                      "dashes (at most 63, like a DNS label)")
        name = None
    description = _text(fields.get("description", ""), (*path, "description"), problems)
    objective = _objective(fields["objective"], (*path, "objective"), problems) \
        if "objective" in fields else None
    sli = _sli(fields["sli"], (*path, "sli"), problems, histograms) if "sli" in fields else None
    controller = fields.get("controller", False)
    if not isinstance(controller, bool):
        problems.add((*path, "controller"), f"must be true or false: got {_type_name(controller)}")
        controller = False
    elif controller and isinstance(sli, RatioSLI):
        problems.add((*path, "controller"), "the controller acts on latency quantiles; "
                                            "a ratio SLI cannot be controller-linked")
    labels = _labels(fields.get("labels"), (*path, "labels"), problems)
    min_rate = _event_rate(fields.get("min_event_rate", 0), (*path, "min_event_rate"), problems)
    if name is None or description is None or objective is None or sli is None \
            or min_rate is None:
        return None
    return SLO(name, description, objective, sli, controller, labels, min_rate)


def _slos(
    value: object, path: Path_, problems: _Problems,
    histograms: Mapping[str, Sequence[float]] | None,
) -> tuple[SLO, ...]:
    if not isinstance(value, list) or not value:
        problems.add(path, f"must be a non-empty list of SLOs: got {_type_name(value)}")
        return ()
    if len(value) > MAX_SLOS:
        problems.add(path, f"more than {MAX_SLOS} SLOs")
        return ()
    slos = [_slo(item, (*path, index), problems, histograms) for index, item in enumerate(value)]
    seen: dict[str, int] = {}
    for index, slo in enumerate(slos):
        if slo is None:
            continue
        for key in (slo.name, slo.camel_name):
            if key in seen and seen[key] != index:
                problems.add((*path, index, "name"),
                             f"{slo.name!r} clashes with slos[{seen[key]}] (names and their "
                             "alert names must be unique)")
                break
            seen[key] = index
    return tuple(slo for slo in slos if slo is not None)


def _native(
    data: object, problems: _Problems, histograms: Mapping[str, Sequence[float]] | None,
) -> SloSpec | None:
    fields = _mapping(data, (), problems, ("version", "service", "period", "labels", "slos"),
                      ("version", "service", "period", "slos"))
    if fields is None:
        return None
    version = fields.get("version")
    if "version" in fields and version != SPEC_VERSION:
        problems.add(("version",), f"unsupported version {version!r}: this Governor reads "
                                   f"{SPEC_VERSION!r} (or OpenSLO {openslo.API_VERSION!r} "
                                   "documents)")
    service = _text(fields.get("service"), ("service",), problems, what="the service name") \
        if "service" in fields else None
    if service is not None and not _SERVICE.fullmatch(service):
        problems.add(("service",), f"{service[:80]!r} must be letters, digits, '_', '.' or '-' "
                                   "(at most 63)")
        service = None
    period = _period(fields["period"], ("period",), problems) if "period" in fields else None
    labels = _labels(fields.get("labels"), ("labels",), problems)
    slos = _slos(fields["slos"], ("slos",), problems, histograms) if "slos" in fields else ()
    if problems.items or service is None or period is None:
        return None
    return SloSpec(SPEC_VERSION, service, period, slos, labels)


def _finish(spec: SloSpec | None, problems: _Problems) -> SloSpec:
    if problems.items or spec is None:
        raise SpecError([item for item in problems.items if item] or ["the spec is empty"])
    return spec


def parse_spec(
    data: object, source: str = "<memory>", *,
    histograms: Mapping[str, Sequence[float]] | None = None,
) -> SloSpec:
    """Validate plain data (a native spec, an OpenSLO ``SLO`` document or a list of them).

    ``histograms`` maps histogram names to their bucket edges; with it, a latency SLI's metric
    must be one of them and its threshold one of the edges.
    """
    documents = data if isinstance(data, list) and openslo.is_openslo(data) else [data]
    return _parse([Document(item) for item in documents], source, histograms)


def _parse(
    documents: Sequence[Document], source: str,
    histograms: Mapping[str, Sequence[float]] | None,
) -> SloSpec:
    if not documents:
        raise SpecError([f"{source}: empty; expected version, service, period and slos"])
    if openslo.is_openslo([d.data for d in documents]):
        translation = openslo.translate([d.data for d in documents])
        where = openslo.locator(translation, source, [d.lines for d in documents], format_path)
        problems = _Problems(where, quiet_missing=bool(translation.problems))
        for path, message in translation.problems:
            problems.add(path, message)
        return _finish(_native(translation.data, problems, histograms), problems)
    if len(documents) > 1:
        raise SpecError([f"{source}: {len(documents)} YAML documents; a Governor spec is one "
                         "(several documents are read as OpenSLO, each with apiVersion "
                         f"{openslo.API_VERSION!r} and kind SLO)"])
    problems = _Problems(_where_in(source, documents[0].lines))
    return _finish(_native(documents[0].data, problems, histograms), problems)


def load_spec(
    path: str | Path, *, histograms: Mapping[str, Sequence[float]] | None = None,
) -> SloSpec:
    """Read and validate a spec file; every problem, YAML ones included, is a :class:`SpecError`."""
    try:
        text, source = read_file(path)
        documents = read_documents(text, source)
    except YamlError as exc:
        raise SpecError([str(exc)]) from exc
    return _parse(documents, source, histograms)
