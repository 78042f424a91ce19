"""Synthetic series for unit tests: they must match the user's selectors exactly as Prometheus
would, or the generated promtool tests would test nothing."""

from __future__ import annotations

import pytest

from governor.alerts.synth import SynthesisError, split_events, value_for
from governor.contracts.promql import Selector, parse_selector


def selects(selector: Selector, labels: dict[str, str]) -> bool:
    return all(m.matches(labels.get(m.label, "")) for m in selector.matchers)


@pytest.mark.parametrize(
    ("errors", "total"),
    [
        ('x_total{code=~"5.."}', "x_total"),
        ('x_total{code=~"5..|429", route="/v1/chat"}', 'x_total{route=~"/v1/.*"}'),
        ('x_total{code!~"2..|3..|4.."}', 'x_total{job="api"}'),
        ('x_total{reason=~"[^a-c]+"}', 'x_total{reason!=""}'),
        ('x_total{kind=~"(foo|bar)_[0-9]{2}"}', "x_total"),
        ('x_total{status="error", code=~"5.+"}', 'x_total{status=~"error|ok"}'),
        ('x_total{a=~"\\\\d+\\\\.\\\\d"}', "x_total"),
    ],
)
def test_bad_events_match_both_selectors_and_good_events_only_total(
    errors: str, total: str
) -> None:
    e, t = parse_selector(errors), parse_selector(total)
    bad, good = split_events(e, t)
    assert selects(e, dict(bad.labels))
    assert selects(t, dict(bad.labels))
    assert selects(t, dict(good.labels))
    assert not selects(e, dict(good.labels))
    assert bad.labels != good.labels


@pytest.mark.parametrize(
    ("errors", "total"),
    [("x_total", 'x_total{a="b"}'), ('x_total{a="b"}', 'x_total{a="c"}')],
    ids=["errors select everything", "contradictory selectors"],
)
def test_impossible_selectors_are_a_clear_error(errors: str, total: str) -> None:
    with pytest.raises(SynthesisError):
        split_events(parse_selector(errors), parse_selector(total))


def test_a_value_satisfies_every_matcher_of_its_label() -> None:
    matchers = parse_selector('x{a=~"5..", a!="500", a!~"50."}').matchers
    value = value_for(matchers)
    assert all(m.matches(value) for m in matchers)
