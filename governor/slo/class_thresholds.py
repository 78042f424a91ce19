"""Which latency threshold counts for which request class, as PromQL label matchers.

With request classes in the spec, a latency SLO's good events are each class's observations at
or below *that class's* threshold (its ``targets``, or the SLO's own). Classes sharing a
threshold are read together; the default class's group takes every class value no other group
names, so a series of a class the spec no longer declares is still judged, by the default's
threshold::

    >>> from governor.slo.spec import parse_spec
    >>> spec = parse_spec({"version": "governor/v1", "service": "s", "period": "30d",
    ...     "slos": [{"name": "ttft", "objective": 99,
    ...               "sli": {"latency": {"metric": "x_seconds", "threshold": "1s"}}}],
    ...     "classes": [{"name": "doc", "match": {"prompt_tokens": {"min": 3000}},
    ...                  "targets": {"ttft": "20s"}}, {"name": "chat"}]})
    >>> [(g.threshold, g.classes, [m.render() for m in g.matchers])
    ...  for g in groups(spec, spec.slos[0])]
    [(20.0, ('doc',), ['class="doc"']), (1.0, ('chat',), ['class!~"doc"'])]
"""

from __future__ import annotations

from dataclasses import dataclass

from governor.contracts.metrics.service import LABEL_CLASS
from governor.contracts.promql import Matcher, eq, format_number, not_regex, one_of
from governor.slo.class_fields import own_class
from governor.slo.model import SLO, LatencySLI, SloSpec


@dataclass(frozen=True)
class Group:
    threshold: float
    classes: tuple[str, ...]
    matchers: tuple[Matcher, ...]  # select these classes' series (none: every class)


def applies(spec: SloSpec, slo: SLO) -> bool:
    """Per-class thresholds and series exist for this SLO: the spec declares classes, and the
    SLO is a latency SLO that does not pick a class with its own selector."""
    return spec.classes.declared and isinstance(slo.sli, LatencySLI) and not own_class(slo)


def thresholds(spec: SloSpec, slo: SLO) -> dict[str, float]:
    """Class name → its threshold for this (latency) SLO."""
    assert isinstance(slo.sli, LatencySLI)
    return spec.classes.thresholds(slo.name, slo.sli.threshold_seconds)


def groups(spec: SloSpec, slo: SLO) -> tuple[Group, ...]:
    """The classes grouped by threshold, in class order; the default class's group last."""
    by_class = thresholds(spec, slo)
    default = by_class[spec.classes.default.name]
    others: dict[float, list[str]] = {}
    for name, threshold in by_class.items():
        if threshold != default:
            others.setdefault(threshold, []).append(name)
    named = [Group(t, tuple(names), (eq(LABEL_CLASS, names[0]) if len(names) == 1
                                     else one_of(LABEL_CLASS, names),))
             for t, names in others.items()]
    rest = tuple(name for name, t in by_class.items() if t == default)
    listed = [name for group in named for name in group.classes]
    last = Group(default, rest, (not_regex(LABEL_CLASS, one_of(LABEL_CLASS, listed).value),)
                 if listed else ())
    return (*named, last)


def describe(spec: SloSpec, slo: SLO) -> str:
    """``doc ≤ 20s, chat ≤ 1s``: each class's threshold, for annotations and boards."""
    return ", ".join(f"{name} ≤ {format_number(t)}s" for name, t in thresholds(spec, slo).items())


def own_threshold_classes(spec: SloSpec, slo: SLO) -> tuple[Matcher, ...]:
    """Matchers selecting the classes judged at the SLO's own threshold (none without classes).

    What the controller and its fast alert read: a class with a threshold of its own (documents
    allowed 20 s to a first token) would otherwise make them chase a miss that is none.
    """
    if not applies(spec, slo):
        return ()
    assert isinstance(slo.sli, LatencySLI)
    own = [g for g in groups(spec, slo) if g.threshold == slo.sli.threshold_seconds]
    return own[0].matchers if own else ()
