"""Validating a native spec field by field, collecting every problem with its place.

Each parser takes a value, its path in the document and the problem list, and returns the
parsed value or ``None`` after recording why. :func:`governor.slo.assemble.native` assembles
the whole spec; the spec's other sections (classes, fleet, buckets) parse their fields with the
public ones here (:func:`parse_mapping`, :func:`parse_text`, :func:`parse_seconds`, …)::

    problems = Problems(format_path)
    parse_seconds("120ms", ("slos", 0, "sli", "threshold"), problems, "a threshold")
    # Decimal('0.120'); a bad value returns None and adds its problem, with its place
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal

from governor.contracts.metrics.latency import HISTOGRAM_BUCKETS
from governor.contracts.metrics.vllm import CUSTOM_BUCKETS_FLAG, CUSTOM_BUCKETS_SINCE, family_of
from governor.contracts.promql import (
    LABEL_NAME,
    METRIC_NAME,
    format_duration,
    format_number,
    parse_duration,
    parse_selector,
    to_decimal,
)
from governor.slo.model import (
    MAX_LABELS,
    MAX_PERIOD_SECONDS,
    MAX_SLOS,
    MAX_TEXT,
    MIN_PERIOD_SECONDS,
    RESERVED_LABELS,
    ROLE_ITL,
    ROLE_NONE,
    ROLE_TTFT,
    ROLES,
    SLO,
    TTFT_NAME,
    Labels,
    LatencySLI,
    RatioSLI,
)
from governor.slo.service_buckets import grows
from governor.slo.yamlio import Path_

_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
SERVICE_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}")
_RATE = re.compile(r"(\d+(?:\.\d+)?)\s*/\s*(s|m|h)")
_PER = {"s": Decimal(1), "m": Decimal(60), "h": Decimal(3600)}


def format_path(path: Path_) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text or "(top level)"


class Problems:
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


def where_in(source: str, lines: Mapping[Path_, int]) -> Callable[[Path_], str]:
    def where(path: Path_) -> str:
        for depth in range(len(path), -1, -1):  # the nearest line we know
            line = lines.get(path[:depth])
            if line is not None:
                return f"{source}:{line}: {format_path(path)}"
        return f"{source}: {format_path(path)}"

    return where


def type_name(value: object) -> str:
    names = {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean",
             int: "an integer", float: "a number", type(None): "nothing (null)"}
    return names.get(type(value), type(value).__name__)


def parse_mapping(
    value: object, path: Path_, problems: Problems, allowed: Sequence[str],
    required: Sequence[str] = (),
) -> dict[str, object] | None:
    """``value`` as a mapping of known string keys; unknown and missing keys become problems."""
    if not isinstance(value, dict):
        problems.add(path, f"must be a mapping with keys {', '.join(allowed)}: "
                           f"got {type_name(value)}")
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


def parse_text(value: object, path: Path_, problems: Problems, *, what: str = "text") -> str | None:
    if not isinstance(value, str):
        problems.add(path, f"must be {what} (a string): got {type_name(value)}")
        return None
    if len(value) > MAX_TEXT:
        problems.add(path, f"longer than {MAX_TEXT} characters")
        return None
    return value


def parse_labels(value: object, path: Path_, problems: Problems) -> Labels:
    if value is None:
        return Labels()
    if not isinstance(value, dict):
        problems.add(path, f"must be a mapping of label names to strings: got {type_name(value)}")
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
        elif (text := parse_text(item, (*path, key), problems, what="a label value")) is not None:
            labels[key] = text
    return Labels(labels)


def parse_objective(value: object) -> float:
    """``99``, ``"99%"``, ``99.9``, ``0.99`` → a ratio in (0, 1); raises ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"must be a number or a percentage string: got {type_name(value)}")
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


def _objective(value: object, path: Path_, problems: Problems) -> float | None:
    try:
        return parse_objective(value)
    except ValueError as exc:
        problems.add(path, str(exc))
        return None


def parse_seconds(value: object, path: Path_, problems: Problems, what: str) -> Decimal | None:
    """A duration string (``120ms``, ``30d``) or a bare number of seconds."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        problems.add(path, f"must be {what}, as a duration such as 120ms or 30d: "
                           f"got {type_name(value)}")
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


def parse_period(value: object, path: Path_, problems: Problems) -> int | None:
    seconds = parse_seconds(value, path, problems, "the SLO period")
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


def _event_rate(value: object, path: Path_, problems: Problems) -> float | None:
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


def not_an_edge(metric: str, threshold: float, edges: Sequence[float], counter: str) -> str:
    """Why ``threshold`` cannot be the SLI's, with the edges nearest to it and, for a vLLM
    histogram, the way to have the server expose it (``counter``: what would count it)."""
    message = (f"{format_number(threshold)}s is not a bucket edge of {metric}, so {counter} "
               f"could not count it exactly (nearest edges: {_nearby_edges(edges, threshold)})")
    family = family_of(metric)
    if family is None:
        return message
    key = f"vllm.custom_histogram_buckets.{family}"
    if tuple(edges) != tuple(HISTOGRAM_BUCKETS.get(metric, ())):
        return (f"{message}, as {key} declares them; add it there and to vllm serve's "
                f"{CUSTOM_BUCKETS_FLAG}")
    return (f"{message}; or give vllm serve {CUSTOM_BUCKETS_FLAG} with it (vLLM >= "
            f"{CUSTOM_BUCKETS_SINCE}) and declare those edges in {key}")


def _latency(
    value: object, path: Path_, problems: Problems,
    histograms: Mapping[str, Sequence[float]] | None,
) -> LatencySLI | None:
    fields = parse_mapping(value, path, problems, ("metric", "threshold", "selector"),
                      ("metric", "threshold"))
    if fields is None:
        return None
    metric = parse_text(fields.get("metric"), (*path, "metric"), problems, what="a histogram name")
    if metric is not None and not METRIC_NAME.fullmatch(metric):
        problems.add((*path, "metric"), f"{metric!r} is not a valid metric name")
        metric = None
    elif metric is not None and metric.endswith(("_bucket", "_count", "_sum")):
        problems.add((*path, "metric"), f"give the histogram's base name, without "
                                        f"_bucket/_count/_sum: got {metric!r}")
        metric = None
    threshold: float | None = None
    if "threshold" in fields:
        seconds = parse_seconds(fields["threshold"], (*path, "threshold"), problems, "a latency")
        threshold = None if seconds is None else float(seconds)
    selector = parse_labels(fields.get("selector"), (*path, "selector"), problems)
    if metric is None or threshold is None:
        return None
    if histograms is not None:
        threshold = _bucket_edge(metric, threshold, path, problems, histograms)
    return None if threshold is None else LatencySLI(metric, threshold, selector)


def _bucket_edge(
    metric: str, threshold: float, path: Path_, problems: Problems,
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
    if grows(metric):  # the service's own: the threshold becomes one of its edges
        return threshold
    problems.add((*path, "threshold"), not_an_edge(metric, threshold, edges, "the SLI"))
    return None


def parse_counter_selector(value: object, path: Path_, problems: Problems) -> str | None:
    """A PromQL selector of a counter, rendered; ``None`` (a problem added) when it is not."""
    text = parse_text(value, path, problems, what="a PromQL counter selector")
    if text is None:
        return None
    try:
        return parse_selector(text).render()
    except ValueError as exc:
        problems.add(path, str(exc))
        return None


def _ratio(value: object, path: Path_, problems: Problems) -> RatioSLI | None:
    fields = parse_mapping(value, path, problems, ("errors", "total"), ("errors", "total"))
    if fields is None:
        return None
    errors = parse_counter_selector(fields.get("errors"), (*path, "errors"), problems) \
        if "errors" in fields else None
    total = parse_counter_selector(fields.get("total"), (*path, "total"), problems) \
        if "total" in fields else None
    if errors is not None and errors == total:
        problems.add((*path, "errors"), "selects the same series as total, so the SLI would "
                                        "always be 100% errors")
        return None
    return None if errors is None or total is None else RatioSLI(errors, total)


def _sli(
    value: object, path: Path_, problems: Problems,
    histograms: Mapping[str, Sequence[float]] | None,
) -> LatencySLI | RatioSLI | None:
    fields = parse_mapping(value, path, problems, ("latency", "ratio"))
    if fields is None:
        return None
    if len(fields) != 1:
        problems.add(path, "must have exactly one of 'latency' or 'ratio'")
        return None
    if "latency" in fields:
        return _latency(fields["latency"], (*path, "latency"), problems, histograms)
    return _ratio(fields["ratio"], (*path, "ratio"), problems)


_SLO_KEYS = ("name", "description", "objective", "sli", "controller", "role", "labels",
             "min_event_rate")


def parse_name(fields: Mapping[str, object], path: Path_, problems: Problems) -> str | None:
    """An entry's ``name``: lower-case letters, digits and dashes, like a DNS label; ``None``
    (with its problem noted) when missing or malformed."""
    if "name" not in fields:
        return None
    name = parse_text(fields["name"], (*path, "name"), problems, what="a name")
    if name is not None and not _NAME.fullmatch(name):
        problems.add((*path, "name"), f"{name[:80]!r} must be lower-case letters, digits and "
                                      "dashes (at most 63, like a DNS label)")
        return None
    return name


def _slo(
    value: object, path: Path_, problems: Problems,
    histograms: Mapping[str, Sequence[float]] | None,
) -> SLO | None:
    fields = parse_mapping(value, path, problems, _SLO_KEYS, ("name", "objective", "sli"))
    if fields is None:
        return None
    name = parse_name(fields, path, problems)
    description = parse_text(fields.get("description", ""), (*path, "description"), problems)
    objective = _objective(fields["objective"], (*path, "objective"), problems) \
        if "objective" in fields else None
    sli = _sli(fields["sli"], (*path, "sli"), problems, histograms) if "sli" in fields else None
    controller = fields.get("controller", False)
    if not isinstance(controller, bool):
        problems.add((*path, "controller"), f"must be true or false: got {type_name(controller)}")
        controller = False
    elif controller and isinstance(sli, RatioSLI):
        problems.add((*path, "controller"), "the controller acts on latency quantiles; "
                                            "a ratio SLI cannot be controller-linked")
    role = _role(fields, name, controller, sli, path, problems)
    labels = parse_labels(fields.get("labels"), (*path, "labels"), problems)
    min_rate = _event_rate(fields.get("min_event_rate", 0), (*path, "min_event_rate"), problems)
    if name is None or description is None or objective is None or sli is None \
            or min_rate is None:
        return None
    return SLO(name, description, objective, sli, controller, labels, min_rate, role)


def _role(fields: Mapping[str, object], name: str | None, controller: bool,
          sli: LatencySLI | RatioSLI | None, path: Path_, problems: Problems) -> str | None:
    """``role``, or its default: ``itl`` for the controller-linked SLO, ``ttft`` for the one
    named ``time-to-first-token`` (the name the controller read before roles existed)."""
    if "role" not in fields:
        if controller:
            return ROLE_ITL
        return ROLE_TTFT if name == TTFT_NAME and isinstance(sli, LatencySLI) else None
    role = fields["role"]
    if role not in ROLES:
        close = difflib.get_close_matches(str(role), ROLES, n=1) if isinstance(role, str) else []
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        problems.add((*path, "role"), f"must be one of {', '.join(ROLES)}: got "
                                      f"{str(role)[:80]!r}{hint}")
        return None
    if role == ROLE_NONE:
        if controller:
            problems.add((*path, "role"), f"a `controller: true` SLO has role {ROLE_ITL!r}")
        return None
    if isinstance(sli, RatioSLI):
        problems.add((*path, "role"), f"role {role!r} reads a latency histogram; a ratio SLI "
                                      "cannot have one")
    elif controller != (role == ROLE_ITL):
        problems.add((*path, "role"), f"role {ROLE_ITL!r} is the decode SLO the controller acts "
                                      f"on, and only it: {ROLE_ITL!r} goes with "
                                      f"`controller: true` (got role {role!r}, controller "
                                      f"{str(controller).lower()})")
    return str(role)


def parse_slos(
    value: object, path: Path_, problems: Problems,
    histograms: Mapping[str, Sequence[float]] | None,
) -> tuple[SLO, ...]:
    if not isinstance(value, list) or not value:
        problems.add(path, f"must be a non-empty list of SLOs: got {type_name(value)}")
        return ()
    if len(value) > MAX_SLOS:
        problems.add(path, f"more than {MAX_SLOS} SLOs")
        return ()
    slos = [_slo(item, (*path, index), problems, histograms) for index, item in enumerate(value)]
    _one_controller(slos, path, problems)
    _one_per_role(slos, path, problems)
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


def _one_per_role(slos: Sequence[SLO | None], path: Path_, problems: Problems) -> None:
    """The controller and admission read one SLO per role, so no two may share one."""
    first: dict[str, tuple[int, str]] = {}
    for index, slo in enumerate(slos):
        if slo is None or slo.role is None:
            continue
        if slo.role not in first:
            first[slo.role] = (index, slo.name)
            continue
        held, holder = first[slo.role]
        by_name = f" (by its name: give it `role: {ROLE_NONE}` if it is not the one)" \
            if holder == TTFT_NAME else ""
        problems.add((*path, index, "role"), f"slos[{held}] ({holder!r}) already has role "
                                             f"{slo.role!r}{by_name}; one SLO per role")


def _one_controller(slos: Sequence[SLO | None], path: Path_, problems: Problems) -> None:
    """The controller acts on one decode SLO, so at most one may say ``controller: true``."""
    linked = [index for index, slo in enumerate(slos) if slo is not None and slo.controller]
    for index in linked[1:]:
        problems.add((*path, index, "controller"),
                     f"only one SLO may drive the controller, and slos[{linked[0]}] "
                     "already does")
