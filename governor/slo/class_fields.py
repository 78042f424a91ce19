"""Validating a spec's ``classes`` field by field, every problem recorded with its place.

The same conventions as :mod:`governor.slo.fields`: each parser takes a value, its path and the
problem list, and returns the parsed value or ``None`` after recording why. :func:`classes`
needs the spec's SLOs, since a class's ``targets`` name them::

    classes:
      - name: doc
        match: [{prompt_tokens: {min: 3000}}, {header: {x-governor-class: doc}}]
        priority: 10
        max_in_flight: 8
        max_queue: 16
        targets: {time-to-first-token: 20s}
      - name: chat                     # no match: the default class, always last
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

from governor.contracts.endpoints import GENERATION_PATHS
from governor.contracts.metrics.service import LABEL_CLASS
from governor.slo.classes import (
    MAX_ALTERNATIVES,
    MAX_CLASSES,
    MAX_HEADER_VALUE_LENGTH,
    MAX_HEADER_VALUES,
    MAX_HEADERS,
    MAX_IN_FLIGHT,
    MAX_PRIORITY,
    MAX_PROMPT_TOKENS,
    SECRET_HEADERS,
    Match,
    RequestClass,
    RequestClasses,
)
from governor.slo.fields import (
    Problems,
    not_an_edge,
    parse_mapping,
    parse_name,
    parse_seconds,
    parse_text,
    type_name,
)
from governor.slo.model import SLO, LatencySLI
from governor.slo.service_buckets import grows
from governor.slo.yamlio import Path_

_HEADER = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
_CLASS_KEYS = ("name", "description", "match", "priority", "max_in_flight", "max_queue",
               "targets")
_MATCH_KEYS = ("prompt_tokens", "route", "header")


def _integer(value: object, path: Path_, problems: Problems, low: int, high: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        shown = repr(value)[:80] if number else type_name(value)
        problems.add(path, f"must be a whole number from {low} to {high}: got {shown}")
        return None
    return value


def _one_or_many(value: object, path: Path_, problems: Problems, limit: int,
                 what: str) -> list[object] | None:
    """A single value, or a non-empty list of at most ``limit`` of them."""
    items = value if isinstance(value, list) else [value]
    if not items or len(items) > limit:
        problems.add(path, f"must be {what} or a list of 1 to {limit} of them")
        return None
    return items


def _prompt_tokens(value: object, path: Path_, problems: Problems
                   ) -> tuple[int | None, int | None] | None:
    fields = parse_mapping(value, path, problems, ("min", "max"))
    if fields is None:
        return None
    if not fields:
        problems.add(path, "give min, max or both (prompt tokens, inclusive)")
        return None
    low = _integer(fields["min"], (*path, "min"), problems, 0, MAX_PROMPT_TOKENS) \
        if "min" in fields else None
    high = _integer(fields["max"], (*path, "max"), problems, 0, MAX_PROMPT_TOKENS) \
        if "max" in fields else None
    if ("min" in fields and low is None) or ("max" in fields and high is None):
        return None
    if low is not None and high is not None and low > high:
        problems.add(path, f"min ({low}) is above max ({high}): no prompt would match")
        return None
    return low, high


def _routes(value: object, path: Path_, problems: Problems) -> tuple[str, ...] | None:
    items = _one_or_many(value, path, problems, len(GENERATION_PATHS), "a route")
    if items is None:
        return None
    bad = [item for item in items if item not in GENERATION_PATHS]
    if bad:
        shown = ", ".join(repr(item)[:80] for item in bad)
        problems.add(path, f"{shown}: a class matches the generation routes only "
                           f"({', '.join(GENERATION_PATHS)})")
        return None
    return tuple(dict.fromkeys(str(item) for item in items))


def _header_values(value: object, path: Path_, problems: Problems) -> tuple[str, ...] | None:
    items = _one_or_many(value, path, problems, MAX_HEADER_VALUES, "a header value")
    if items is None:
        return None
    values = []
    for item in items:
        if not isinstance(item, str) or not item or len(item) > MAX_HEADER_VALUE_LENGTH \
                or not item.isprintable():
            problems.add(path, f"a header value is printable text of 1 to "
                               f"{MAX_HEADER_VALUE_LENGTH} characters: got {repr(item)[:80]}")
            return None
        values.append(item)
    return tuple(dict.fromkeys(values))


def _headers(value: object, path: Path_, problems: Problems
             ) -> tuple[tuple[str, tuple[str, ...]], ...] | None:
    if not isinstance(value, dict) or not value or len(value) > MAX_HEADERS:
        problems.add(path, f"must map 1 to {MAX_HEADERS} header names to the values that "
                           f"select the class: got {type_name(value)}")
        return None
    found: dict[str, tuple[str, ...]] = {}
    ok = True
    for name, values in value.items():
        lower = name.lower() if isinstance(name, str) else ""
        if not _HEADER.fullmatch(lower):
            problems.add(path, f"{repr(name)[:80]} is not a header name (letters, digits, '-')")
            ok = False
        elif lower in SECRET_HEADERS:
            problems.add((*path, name), f"{lower} carries credentials: a class cannot be "
                                        "chosen by it (slo.yaml would hold the secret)")
            ok = False
        elif lower in found:
            problems.add((*path, name), f"header {lower!r} is given twice (names ignore case)")
            ok = False
        elif (parsed := _header_values(values, (*path, name), problems)) is not None:
            found[lower] = parsed
        else:
            ok = False
    return tuple(sorted(found.items())) if ok else None


def _match(value: object, path: Path_, problems: Problems) -> Match | None:
    fields = parse_mapping(value, path, problems, _MATCH_KEYS)
    if fields is None:
        return None
    if not fields:
        problems.add(path, f"a match needs at least one of {', '.join(_MATCH_KEYS)}")
        return None
    tokens = _prompt_tokens(fields["prompt_tokens"], (*path, "prompt_tokens"), problems) \
        if "prompt_tokens" in fields else (None, None)
    routes = _routes(fields["route"], (*path, "route"), problems) if "route" in fields else ()
    headers = _headers(fields["header"], (*path, "header"), problems) \
        if "header" in fields else ()
    if tokens is None or routes is None or headers is None:
        return None
    return Match(tokens[0], tokens[1], routes, headers)


def _matches(value: object, path: Path_, problems: Problems) -> tuple[Match, ...] | None:
    items = value if isinstance(value, list) else [value]
    if not items or len(items) > MAX_ALTERNATIVES:
        problems.add(path, f"must be a match or a list of 1 to {MAX_ALTERNATIVES} (any one "
                           "suffices)")
        return None
    at = (lambda i: (*path, i)) if isinstance(value, list) else (lambda i: path)
    found = [_match(item, at(index), problems) for index, item in enumerate(items)]
    return None if None in found else tuple(m for m in found if m is not None)


def _edge(metric: str, threshold: float, path: Path_, problems: Problems,
          histograms: Mapping[str, Sequence[float]]) -> float | None:
    """The bucket edge equal to a class's threshold (the SLO's metric is checked already)."""
    edges = histograms.get(metric, ())
    for edge in edges:
        if math.isclose(edge, threshold, rel_tol=1e-9):
            return edge
    if grows(metric):  # the service's own: the threshold becomes one of its edges
        return threshold
    problems.add(path, not_an_edge(metric, threshold, edges, "the class's SLI"))
    return None


def own_class(slo: SLO) -> bool:
    """The SLO's selector picks a class itself, so per-class thresholds do not apply to it."""
    return isinstance(slo.sli, LatencySLI) and LABEL_CLASS in slo.sli.selector


def _targets(
    value: object, path: Path_, problems: Problems, slos: Sequence[SLO],
    histograms: Mapping[str, Sequence[float]] | None, broken: frozenset[str],
) -> tuple[tuple[str, float], ...] | None:
    """SLO name → threshold; ``broken``: names of SLOs whose own problems are reported already,
    so a target naming one says nothing more."""
    latency = {s.name: s for s in slos if isinstance(s.sli, LatencySLI) and not own_class(s)}
    allowed = (*latency, *sorted(broken - set(latency)))
    fields = parse_mapping(value, path, problems, allowed or ("(no latency SLO)",))
    if fields is None:
        return None
    fields = {name: raw for name, raw in fields.items() if name in latency}
    found: list[tuple[str, float]] = []
    for name, raw in fields.items():
        seconds = parse_seconds(raw, (*path, name), problems, "a latency threshold")
        if seconds is None:
            continue
        sli = latency[name].sli
        assert isinstance(sli, LatencySLI)
        threshold: float | None = float(seconds)
        if histograms is not None and threshold is not None:
            threshold = _edge(sli.metric, threshold, (*path, name), problems, histograms)
        if threshold is not None:
            found.append((name, threshold))
    return tuple(sorted(found)) if len(found) == len(fields) else None


def _class(
    value: object, path: Path_, problems: Problems, slos: Sequence[SLO],
    histograms: Mapping[str, Sequence[float]] | None, broken: frozenset[str], *, last: bool,
) -> RequestClass | None:
    fields = parse_mapping(value, path, problems, _CLASS_KEYS, ("name",))
    if fields is None:
        return None
    name = parse_name(fields, path, problems)
    description = parse_text(fields.get("description", ""), (*path, "description"), problems)
    match: tuple[Match, ...] | None = ()
    if "match" in fields and last:
        problems.add((*path, "match"), "the last class is the default: it takes every request "
                                       "no class before it matched, so it has no match")
        match = None
    elif "match" in fields:
        match = _matches(fields["match"], (*path, "match"), problems)
    elif not last:
        problems.add(path, "only the last class may leave out match (it is the default class)")
        match = None
    priority = _integer(fields.get("priority", 0), (*path, "priority"), problems,
                        -MAX_PRIORITY, MAX_PRIORITY)
    limit = _integer(fields["max_in_flight"], (*path, "max_in_flight"), problems, 1,
                     MAX_IN_FLIGHT) if "max_in_flight" in fields else None
    queue = _integer(fields["max_queue"], (*path, "max_queue"), problems, 0,
                     MAX_IN_FLIGHT) if "max_queue" in fields else None
    targets = _targets(fields["targets"], (*path, "targets"), problems, slos, histograms,
                       broken) if "targets" in fields else ()
    if name is None or description is None or match is None or priority is None \
            or ("max_in_flight" in fields and limit is None) or targets is None \
            or ("max_queue" in fields and queue is None):
        return None
    return RequestClass(name, match, priority, limit, queue, targets, description)


def classes(
    value: object, path: Path_, problems: Problems, slos: Sequence[SLO],
    histograms: Mapping[str, Sequence[float]] | None, broken: frozenset[str] = frozenset(),
) -> RequestClasses | None:
    """The spec's ``classes``: a list of 1 to MAX_CLASSES classes, names unique, default last.
    ``broken`` names SLOs that failed their own checks (a target may name them quietly)."""
    if not isinstance(value, list) or not value or len(value) > MAX_CLASSES:
        problems.add(path, f"must be a list of 1 to {MAX_CLASSES} request classes, the default "
                           f"last: got {type_name(value)}"
                           + (f" of {len(value)}" if isinstance(value, list) else ""))
        return None
    found = [_class(item, (*path, index), problems, slos, histograms, broken,
                    last=index == len(value) - 1) for index, item in enumerate(value)]
    seen: dict[str, int] = {}
    for index, request_class in enumerate(found):
        if request_class is None:
            continue
        if request_class.name in seen:
            problems.add((*path, index, "name"), f"{request_class.name!r} is already "
                                                 f"classes[{seen[request_class.name]}]")
        seen.setdefault(request_class.name, index)
    if None in found or len(seen) != len(found):
        return None
    return RequestClasses(tuple(c for c in found if c is not None), declared=True)
