"""PromQL syntax helpers: durations, numbers, strings and the plain selectors a spec may hold."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from governor.contracts.promql import (
    Matcher,
    format_duration,
    format_number,
    parse_duration,
    parse_selector,
    quote,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30d", 2592000), ("4w", 2419200), ("1h30m", 5400), ("120ms", Decimal("0.12")),
     ("0.5s", Decimal("0.5")), (" 5m ", 300), ("1y", 31536000)],
)
def test_durations_parse_exactly(text: str, seconds: Decimal | int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5", "m", "5x", "1h 30m", "-5m", "1.5.5s", "5m5", "1M"])
def test_malformed_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(90, "1m30s"), (2592000, "30d"), (604800, "7d"), (3600, "1h"), (86401, "1d1s")],
)
def test_durations_format_in_the_largest_units(seconds: int, text: str) -> None:
    assert format_duration(seconds) == text


@given(st.integers(min_value=1, max_value=10**9))
def test_formatted_durations_parse_back(seconds: int) -> None:
    assert parse_duration(format_duration(seconds)) == seconds


@pytest.mark.parametrize(
    ("value", "text"),
    [(Decimal("0.0144"), "0.0144"), (0.001, "0.001"), (14.4, "14.4"), (1.0, "1"),
     (Decimal("1E-5"), "0.00001"), (2592000, "2592000"), (Decimal("6.000"), "6")],
)
def test_numbers_never_use_exponents_or_float_noise(value: Decimal | float, text: str) -> None:
    assert format_number(value) == text


def test_quoted_strings_escape_what_promql_needs() -> None:
    assert quote('a"b\\c\nd') == '"a\\"b\\\\c\\nd"'


@pytest.mark.parametrize(
    ("text", "rendered"),
    [
        ("governor_requests_total", "governor_requests_total"),
        ('x{code=~"5.."}', 'x{code=~"5.."}'),
        ('x{ a = "b" , c!~"d|e", f!="" , }', 'x{a="b", c!~"d|e", f!=""}'),
        ('vllm:num_preemptions_total{engine="0"}', 'vllm:num_preemptions_total{engine="0"}'),
        ('x{a="quote \\" and comma, brace }"}', 'x{a="quote \\" and comma, brace }"}'),
        ("x{}", "x"),
    ],
)
def test_plain_selectors_parse_to_a_canonical_form(text: str, rendered: str) -> None:
    assert parse_selector(text).render() == rendered


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("rate(x[5m])", "not a plain selector"),
        ("x[5m]", "not a plain selector"),
        ("x offset 5m", "not a plain selector"),
        ('x{a="b"} or vector(1)', "not a plain selector"),
        ('{__name__="x"}', "expected a metric name"),
        ('x{a=b}', "cannot read a label matcher"),
        ("x{a='b'}", "cannot read a label matcher"),
        ('x{a="b"', "not a plain selector"),
        ('x{a=~"[z-a]"}', "bad regular expression"),
        ('x{a="\\q"}', "unsupported escape"),
        ('x{a=~"(a)\\\\1"}', "lookaround or backreferences"),
        ("", "expected a metric name"),
    ],
)
def test_anything_but_a_plain_selector_is_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_selector(text)


@pytest.mark.parametrize(
    ("matcher", "value", "matches"),
    [
        (Matcher("code", "=~", "5.."), "500", True),
        (Matcher("code", "=~", "5.."), "5000", False),  # anchored, as in Prometheus
        (Matcher("code", "!~", "5.."), "200", True),
        (Matcher("code", "!=", ""), "", False),  # a missing label is the empty string
        (Matcher("code", "=", "200"), "200", True),
    ],
)
def test_matchers_follow_prometheus_semantics(matcher: Matcher, value: str, matches: bool) -> None:
    assert matcher.matches(value) is matches


@given(st.text(max_size=30))
def test_any_label_value_survives_quoting(value: str) -> None:
    selector = parse_selector(f"x{{a={quote(value)}}}")
    assert selector.matchers == (Matcher("a", "=", value),)
