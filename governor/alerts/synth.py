"""Label sets that do (or do not) match a selector, for synthetic unit-test series.

A ratio SLI's errors and total are user-written selectors such as
``governor_requests_total{code=~"5.."}``. To test its alerts, promtool needs concrete series: one
that both selectors match (bad events) and, when both count the same metric, one that only
``total`` matches (good events). This module finds such label values by construction, then
checks every candidate with the matchers' own semantics, so a wrong guess can never slip through.

>>> from governor.contracts.promql import parse_selector
>>> bad, good = split_events(parse_selector('x_total{code=~"5.."}'), parse_selector('x_total'))
>>> bad.render(), good.render()
('x_total{code="500"}', 'x_total{code="200"}')
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from governor.contracts.promql import Matcher, Selector, eq

_FILLERS = ("0", "a", "x", "A", "_", "-", "/")
_ESCAPES = {"d": "0", "w": "a", "s": " ", "D": "a", "W": "-", "S": "a"}


class SynthesisError(ValueError):
    """No series can satisfy the selectors as asked (they are contradictory, or too clever)."""


@dataclass(frozen=True)
class Series:
    metric: str
    labels: tuple[tuple[str, str], ...]

    def render(self) -> str:
        return Selector(self.metric, tuple(eq(name, value) for name, value in self.labels)).render()


def _class_member(body: str, filler: str) -> str:
    """A character in the bracket expression ``body`` (without the brackets)."""
    if body.startswith("^"):
        excluded = body[1:]
        for candidate in (filler, *_FILLERS, "z", "9"):
            if candidate not in excluded:
                return candidate
        return "~"
    if body.startswith("\\") and len(body) > 1:
        return _ESCAPES.get(body[1], body[1])
    return body[0]


def _example(pattern: str, filler: str) -> str:
    """A string the regular expression probably matches: first alternatives, minimum repeats."""
    depth, start = 0, 0
    for index, char in enumerate(pattern):  # keep only the first top-level alternative
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0 and (index == 0 or pattern[index - 1] != "\\"):
            return _example(pattern[start:index], filler)
    out: list[str] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        piece, index = _atom(pattern, index, filler)
        if char in "^$":
            continue
        repeat, index = _quantifier(pattern, index)
        out.append(piece * repeat)
    return "".join(out)


def _atom(pattern: str, index: int, filler: str) -> tuple[str, int]:
    char = pattern[index]
    if char == "\\" and index + 1 < len(pattern):
        escaped = pattern[index + 1]
        return _ESCAPES.get(escaped, escaped), index + 2
    if char == "[":
        end = pattern.find("]", index + 2)
        end = len(pattern) if end < 0 else end
        return _class_member(pattern[index + 1:end], filler), end + 1
    if char == "(":
        depth, end = 0, index
        for end in range(index, len(pattern)):
            depth += {"(": 1, ")": -1}.get(pattern[end], 0)
            if depth == 0:
                break
        inner = pattern[index + 1:end]
        inner = inner[2:] if inner.startswith("?:") else inner
        return _example(inner, filler), end + 1
    if char == ".":
        return filler, index + 1
    return ("" if char in "^$" else char), index + 1


def _quantifier(pattern: str, index: int) -> tuple[int, int]:
    if index >= len(pattern):
        return 1, index
    char = pattern[index]
    if char in "*?":
        return 0, index + 1 + (pattern[index + 1:index + 2] == "?")
    if char == "+":
        return 1, index + 1 + (pattern[index + 1:index + 2] == "?")
    if char == "{":
        end = pattern.find("}", index)
        if end > 0:
            low = pattern[index + 1:end].split(",")[0]
            if low.isdigit():
                return int(low), end + 1
    return 1, index


def _candidates(matchers: Sequence[Matcher]) -> Iterator[str]:
    for matcher in matchers:
        if matcher.op == "=":
            yield matcher.value
        elif matcher.op == "=~":
            for filler in _FILLERS:
                yield _example(matcher.value, filler)
    # Empty last: Prometheus treats an empty value as an absent label.
    yield from ("200", "ok", "synthetic", *_FILLERS, "500", "")
    for matcher in matchers:  # something that differs from every excluded value
        yield matcher.value + "_"


def value_for(matchers: Sequence[Matcher]) -> str:
    """A label value every matcher accepts (the label's matchers, from all selectors)."""
    for candidate in _candidates(matchers):
        if all(m.matches(candidate) for m in matchers):
            return candidate
    shown = ", ".join(m.render() for m in matchers)
    raise SynthesisError(f"no label value satisfies {shown}")


def _labels(matchers: Sequence[Matcher]) -> dict[str, str]:
    by_label: dict[str, list[Matcher]] = {}
    for matcher in matchers:
        by_label.setdefault(matcher.label, []).append(matcher)
    return {label: value_for(group) for label, group in sorted(by_label.items())}


def _series(metric: str, labels: dict[str, str]) -> Series:
    return Series(metric, tuple(sorted(labels.items())))


def matching(*selectors: Selector) -> Series:
    """A series every selector (all on one metric) matches."""
    return _series(selectors[0].metric, _labels([m for s in selectors for m in s.matchers]))


def split_events(errors: Selector, total: Selector) -> tuple[Series, Series]:
    """``(bad, good)`` on one metric: ``bad`` matches both selectors, ``good`` only ``total``."""
    bad = matching(errors, total)
    for flipped in errors.matchers:
        # A good series breaks one of the errors selector's matchers and keeps total's.
        broken = Matcher(flipped.label, _negate(flipped.op), flipped.value)
        same_label = [m for m in total.matchers if m.label == flipped.label]
        try:
            value = value_for([broken, *same_label])
        except SynthesisError:
            continue
        labels = dict(bad.labels)
        labels[flipped.label] = value
        if _selects(total, labels) and not _selects(errors, labels):
            return bad, _series(total.metric, labels)
    raise SynthesisError(
        f"every series that {total.render()} selects is also selected by {errors.render()}: "
        "there is no room for good events"
    )


def _selects(selector: Selector, labels: dict[str, str]) -> bool:
    return all(m.matches(labels.get(m.label, "")) for m in selector.matchers)


def _negate(op: str) -> str:
    return {"=": "!=", "!=": "=", "=~": "!~", "!~": "=~"}[op]
