"""OpenSLO v1 ``kind: SLO`` documents → a native Governor spec, for the subset that maps.

What maps: one rolling ``timeWindow`` in days or weeks shared by every document,
``budgetingMethod: Occurrences``, one objective (``target`` or ``targetPercent``), and an inline
Prometheus ``ratioMetric`` that is either ``bad``/``total`` (a ratio SLI) or ``good`` = a histogram
bucket ``X_bucket{le="T"}`` over ``total`` = ``X_count`` (a latency SLI with threshold T).
Governor's own settings ride in annotations: ``governor.dev/controller: "true"``,
``governor.dev/role: ttft`` and ``governor.dev/min-event-rate: "30/m"``. Everything else
(calendar windows, time slices, ``indicatorRef``, ``thresholdMetric``, alert policies) is refused
with the reason, never ignored.
``Service`` documents are skipped: the service name comes from each SLO's ``spec.service``.

The translation keeps, for every native path, the OpenSLO path it came from, so that the spec
validator's messages point at the line the user wrote.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from governor.contracts.promql import Selector, parse_duration, parse_selector
from governor.slo.yamlio import Path_

API_VERSION: Final = "openslo/v1"
CONTROLLER_ANNOTATION: Final = "governor.dev/controller"
MIN_EVENT_RATE_ANNOTATION: Final = "governor.dev/min-event-rate"
ROLE_ANNOTATION: Final = "governor.dev/role"

_SPEC_KEYS = ("description", "service", "indicator", "indicatorRef", "timeWindow",
              "budgetingMethod", "objectives", "alertPolicies")
_QUERY: Path_ = ("metricSource", "spec", "query")
_OBJECTIVE_KEYS = ("displayName", "op", "value", "target", "targetPercent", "timeSliceTarget",
                   "timeSliceWindow", "indicator", "indicatorRef", "compositeWeight")


@dataclass
class Translation:
    data: dict[str, object] = field(default_factory=dict)  # the native spec
    problems: list[tuple[Path_, str]] = field(default_factory=list)  # (document, *path)
    origins: dict[Path_, Path_] = field(default_factory=dict)  # native → (document, *path)

    def problem(self, path: Path_, message: str) -> None:
        self.problems.append((path, message))


def is_openslo(documents: Sequence[object]) -> bool:
    return any(isinstance(d, dict) and d.get("apiVersion") == API_VERSION for d in documents)


def _get(node: object, key: str) -> object:
    return node.get(key) if isinstance(node, dict) else None


def _metric_query(node: object, path: Path_, out: Translation) -> Selector | None:
    """``{metricSource: {type: Prometheus, spec: {query: …}}}`` → the parsed selector."""
    source = _get(node, "metricSource")
    if not isinstance(source, dict):
        out.problem(path, "must hold metricSource: {type: Prometheus, spec: {query: …}}")
        return None
    if "metricSourceRef" in source:
        out.problem((*path, "metricSource", "metricSourceRef"),
                    "data-source references are not supported: inline type: Prometheus")
        return None
    kind = source.get("type")
    if not isinstance(kind, str) or kind.lower() != "prometheus":
        out.problem((*path, "metricSource", "type"), f"only Prometheus sources map: got {kind!r}")
        return None
    query = _get(source.get("spec"), "query")
    if not isinstance(query, str):
        out.problem((*path, "metricSource", "spec"), "must hold query: a PromQL selector")
        return None
    try:
        return parse_selector(query)
    except ValueError as exc:
        out.problem((*path, "metricSource", "spec", "query"), str(exc))
        return None


def _latency_from_good(
    good: Selector, total: Selector, path: Path_, out: Translation,
) -> dict[str, object] | None:
    """``good: X_bucket{…, le="T"}`` over ``total: X_count{…}`` is a latency SLI on X at T."""
    le = [m for m in good.matchers if m.label == "le"]
    rest = tuple(m for m in good.matchers if m.label != "le")
    base = good.metric.removesuffix("_bucket")
    if (good.metric == base or len(le) != 1 or le[0].op != "="
            or total.metric != base + "_count" or set(total.matchers) != set(rest)
            or any(m.op != "=" for m in rest)):
        out.problem(path, "good/total maps only as a histogram: good X_bucket{…, le=\"T\"} over "
                          "total X_count{…} with the same equality matchers; otherwise use bad")
        return None
    return {"metric": base, "threshold": _le_seconds(le[0].value, path, out),
            "selector": {m.label: m.value for m in rest}}


def _le_seconds(value: str, path: Path_, out: Translation) -> object:
    try:
        return float(value)
    except ValueError:
        out.problem(path, f"le={value!r} is not a number")
        return value


_RATIO_KEYS = ("counter", "good", "bad", "total", "raw", "rawType")


def _indicator(
    node: object, path: Path_, out: Translation, native: Path_,
) -> dict[str, object] | None:
    """The SLI; ``native`` is where it lands in the Governor spec (for error locations)."""
    spec = _get(node, "spec")
    ratio = _get(spec, "ratioMetric")
    if ratio is None:
        kinds = sorted(str(k) for k in (spec or {}) if k != "description") \
            if isinstance(spec, dict) else []
        out.problem((*path, "spec"), f"only ratioMetric maps (got {', '.join(kinds) or 'nothing'})")
        return None
    path = (*path, "spec", "ratioMetric")
    if not isinstance(ratio, dict):
        out.problem(path, "must be a mapping")
        return None
    for key in ratio:
        if key not in _RATIO_KEYS:
            out.problem((*path, str(key)), f"unknown key (expected: {', '.join(_RATIO_KEYS)})")
    if "raw" in ratio:
        out.problem((*path, "raw"), "raw ratios do not map: give bad (or good) and total counters")
        return None
    if ratio.get("counter") is not True:
        out.problem((*path, "counter"), "must be true: Governor computes rates of counters")
    total = _metric_query(ratio.get("total"), (*path, "total"), out)
    if "bad" in ratio:
        bad = _metric_query(ratio["bad"], (*path, "bad"), out)
        if bad is None or total is None:
            return None
        out.origins[(*native, "ratio", "errors")] = (*path, "bad", *_QUERY)
        out.origins[(*native, "ratio", "total")] = (*path, "total", *_QUERY)
        return {"ratio": {"errors": bad.render(), "total": total.render()}}
    if "good" in ratio:
        good = _metric_query(ratio["good"], (*path, "good"), out)
        if good is None or total is None:
            return None
        latency = _latency_from_good(good, total, path, out)
        for key in ("metric", "threshold", "selector"):
            out.origins[(*native, "latency", key)] = (*path, "good", *_QUERY)
        return None if latency is None else {"latency": latency}
    out.problem(path, "must have bad (or good) and total")
    return None


def _window(spec: dict[str, object], path: Path_, out: Translation) -> str | None:
    windows = spec.get("timeWindow")
    if not isinstance(windows, list) or len(windows) != 1 or not isinstance(windows[0], dict):
        out.problem((*path, "timeWindow"), "must be a list of exactly one window")
        return None
    window = windows[0]
    path = (*path, "timeWindow", 0)
    if "calendar" in window or window.get("isRolling") is False:
        out.problem(path, "calendar windows do not map: Governor's period is rolling")
        return None
    duration = window.get("duration")
    if not isinstance(duration, str):
        out.problem((*path, "duration"), "must be a duration such as 4w or 30d")
        return None
    try:
        parse_duration(duration)  # M, Q and Y (calendar units) fail here
    except ValueError:
        out.problem((*path, "duration"), f"{duration!r} does not map: use days or weeks "
                                         "(M, Q and Y are calendar units)")
        return None
    return duration


def _objective(spec: dict[str, object], path: Path_, out: Translation) -> tuple[object, Path_]:
    objectives = spec.get("objectives")
    if not isinstance(objectives, list) or len(objectives) != 1 or \
            not isinstance(objectives[0], dict):
        out.problem((*path, "objectives"), "must be a list of exactly one objective")
        return None, path
    objective, path = objectives[0], (*path, "objectives", 0)
    for key in objective:
        if key not in _OBJECTIVE_KEYS:
            out.problem((*path, str(key)), "unknown key")
        elif key in ("timeSliceTarget", "timeSliceWindow", "indicator", "indicatorRef",
                     "compositeWeight", "op", "value"):
            out.problem((*path, key), "does not map: Governor counts occurrences with the SLO's "
                                      "own indicator")
    if "targetPercent" in objective:
        value = objective["targetPercent"]
        return (f"{value}%" if isinstance(value, int | float) and not isinstance(value, bool)
                else value), (*path, "targetPercent")
    if "target" in objective:
        return objective["target"], (*path, "target")
    out.problem(path, "must have target or targetPercent")
    return None, path


def _annotations(metadata: dict[str, object], slo: dict[str, object], path: Path_,
                 origins: dict[Path_, Path_], native: Path_) -> None:
    annotations = metadata.get("annotations")
    if not isinstance(annotations, dict):
        return
    if CONTROLLER_ANNOTATION in annotations:
        raw = annotations[CONTROLLER_ANNOTATION]
        slo["controller"] = {"true": True, "false": False}.get(str(raw).lower(), raw)
        origins[(*native, "controller")] = (*path, "annotations", CONTROLLER_ANNOTATION)
    if MIN_EVENT_RATE_ANNOTATION in annotations:
        slo["min_event_rate"] = annotations[MIN_EVENT_RATE_ANNOTATION]
        origins[(*native, "min_event_rate")] = (*path, "annotations", MIN_EVENT_RATE_ANNOTATION)
    if ROLE_ANNOTATION in annotations:
        slo["role"] = annotations[ROLE_ANNOTATION]
        origins[(*native, "role")] = (*path, "annotations", ROLE_ANNOTATION)


def _slo(document: dict[str, object], index: int, out: Translation) -> None:
    root: Path_ = (index,)
    for key in document:
        if key not in ("apiVersion", "kind", "metadata", "spec"):
            out.problem((*root, str(key)), "unknown key")
    metadata = document.get("metadata")
    spec = document.get("spec")
    if not isinstance(metadata, dict) or not isinstance(spec, dict):
        out.problem(root, "must have metadata and spec mappings")
        return
    spec_path = (*root, "spec")
    for key in spec:
        if key not in _SPEC_KEYS:
            out.problem((*spec_path, str(key)), "unknown key")
    if "indicatorRef" in spec or "indicator" not in spec:
        out.problem(spec_path, "needs an inline indicator (indicatorRef does not map)")
    if spec.get("alertPolicies"):
        out.problem((*spec_path, "alertPolicies"), "do not map: Governor generates multi-window "
                                                   "burn-rate alerts from the objective itself")
    if spec.get("budgetingMethod") != "Occurrences":
        out.problem((*spec_path, "budgetingMethod"), "only Occurrences maps")
    native: Path_ = ("slos", len(out.data.setdefault("slos", [])))  # type: ignore[arg-type]
    slo: dict[str, object] = {"name": metadata.get("name"),
                              "description": spec.get("description", metadata.get("displayName",
                                                                                   ""))}
    origins = out.origins
    origins[native] = root
    origins[(*native, "name")] = (*root, "metadata", "name")
    origins[(*native, "description")] = (*spec_path, "description")
    slo["objective"], origins[(*native, "objective")] = _objective(spec, spec_path, out)
    if "indicator" in spec:
        sli = _indicator(spec["indicator"], (*spec_path, "indicator"), out, (*native, "sli"))
        if sli is not None:
            slo["sli"] = sli
            origins[(*native, "sli")] = (*spec_path, "indicator")
    if "labels" in metadata:
        slo["labels"] = metadata["labels"]
        origins[(*native, "labels")] = (*root, "metadata", "labels")
    _annotations(metadata, slo, (*root, "metadata"), origins, native)
    _shared(out, "service", spec.get("service"), (*spec_path, "service"))
    window = _window(spec, spec_path, out)
    if window is not None:
        _shared(out, "period", window, (*spec_path, "timeWindow", 0, "duration"))
    out.data["slos"].append(slo)  # type: ignore[attr-defined]


def _shared(out: Translation, key: str, value: object, path: Path_) -> None:
    """Service and period are per document in OpenSLO but one per Governor spec."""
    if key not in out.data:
        out.data[key] = value
        out.origins[(key,)] = path
    elif out.data[key] != value:
        first = out.origins[(key,)][0]
        number = first + 1 if isinstance(first, int) else first
        out.problem(path, f"{value!r} differs from {out.data[key]!r} in document {number}: "
                          f"every SLO in one spec shares its {key}")


def translate(documents: Sequence[object]) -> Translation:
    out = Translation(data={"version": "governor/v1"})
    for index, document in enumerate(documents):
        if not isinstance(document, dict) or document.get("apiVersion") != API_VERSION:
            out.problem((index,), f"not an OpenSLO document (apiVersion {API_VERSION!r})")
        elif document.get("kind") == "Service":
            continue
        elif document.get("kind") != "SLO":
            out.problem((index, "kind"), f"{document.get('kind')!r} does not map: Governor reads "
                                         "kind SLO with an inline indicator")
        else:
            _slo(document, index, out)
    if "slos" not in out.data and not out.problems:
        out.problem((), "no kind: SLO document")
    return out


def locator(
    translation: Translation, source: str, lines: Sequence[Mapping[Path_, int]],
    format_path: Callable[[Path_], str],
) -> Callable[[Path_], str]:
    """``where`` for a problem path: OpenSLO paths as they are, native paths via their origin."""

    def openslo_where(path: Path_) -> str:
        if not path or not isinstance(path[0], int):
            return f"{source}: {format_path(path)}"
        document, rest = path[0], path[1:]
        table = lines[document] if document < len(lines) else {}
        line = next((table[rest[:d]] for d in range(len(rest), -1, -1) if rest[:d] in table), None)
        at = f"{source}:{line}" if line is not None else source
        return f"{at}: document {document + 1}: {format_path(rest)}"

    def where(path: Path_) -> str:
        if path and isinstance(path[0], int):
            return openslo_where(path)
        for depth in range(len(path), 0, -1):
            origin = translation.origins.get(path[:depth])
            if origin is not None:
                return openslo_where((*origin, *path[depth:]))
        return openslo_where(path)

    return where
