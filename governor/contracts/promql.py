"""PromQL, built in one place: selectors, range functions, aggregations and the idioms on top.

Nothing here evaluates PromQL. Rules, boards and the controller's queries build every expression
from these pieces, so quoting, durations and numbers read the same everywhere::

    >>> rate(Selector("x_total", (eq("job", "a"),)), "5m")
    'rate(x_total{job="a"}[5m])'
    >>> histogram_quantile(0.99, "x_seconds", (eq("job", "a"),), "5m", by=("instance",))
    'histogram_quantile(0.99, sum by (le, instance) (rate(x_seconds_bucket{job="a"}[5m])))'

It also validates what a user may put into ``slo.yaml`` (a counter selector such as
``governor_requests_total{code=~"5.."}``) so that the generated rules can never be broken, or
extended with arbitrary PromQL, by a spec::

    >>> parse_selector('governor_requests_total{code=~"5.."}').render()
    'governor_requests_total{code=~"5.."}'
    >>> format_duration(5400), parse_duration("1h30m")
    ('1h30m', Decimal('5400'))
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Final, TypeAlias

from prometheus_client.utils import floatToGoString

METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

_UNITS: dict[str, Decimal] = {
    "ms": Decimal("0.001"), "s": Decimal(1), "m": Decimal(60), "h": Decimal(3600),
    "d": Decimal(86400), "w": Decimal(604800), "y": Decimal(31536000),
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
# Days, not weeks: "28d" and "7d" read as SLO periods are usually written.
_FORMAT_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


def parse_duration(text: str) -> Decimal:
    """``"30d"``, ``"1h30m"``, ``"120ms"``, ``"0.5s"`` → seconds, exactly (no float noise)."""
    stripped = text.strip()
    position, total = 0, Decimal(0)
    for match in _DURATION_PART.finditer(stripped):
        if match.start() != position:
            break
        total += Decimal(match.group(1)) * _UNITS[match.group(2)]
        position = match.end()
    if not stripped or position != len(stripped):
        raise ValueError(f"not a duration: {text!r} (try 30d, 1h30m, 120ms)")
    return total


def format_duration(seconds: int) -> str:
    """Whole seconds → the shortest Prometheus duration: 90 → ``1m30s``, 2592000 → ``30d``."""
    if seconds <= 0:
        raise ValueError(f"duration must be positive: {seconds}")
    parts = []
    rest = seconds
    for unit, size in _FORMAT_UNITS:
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def format_number(value: Decimal | float | int) -> str:
    """A number as PromQL and YAML should show it: ``0.0144``, ``14.4``, ``1`` (never ``1e-3``)."""
    decimal = value if isinstance(value, Decimal) else Decimal(repr(value))
    if decimal == decimal.to_integral_value():
        return str(decimal.quantize(Decimal(1)))
    return format(decimal.normalize(), "f")


def exposition_float(value: float) -> str:
    """A float as prometheus_client (so the service and vLLM) writes it: ``le="1.0"``."""
    text: str = floatToGoString(value)  # type: ignore[no-untyped-call]
    return text


def quote(value: str) -> str:
    """A PromQL double-quoted string literal."""
    escaped = (
        value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
        .replace("\t", "\\t")
    )
    return f'"{escaped}"'


@dataclass(frozen=True)
class Matcher:
    label: str
    op: str  # one of = != =~ !~
    value: str

    def render(self) -> str:
        return f"{self.label}{self.op}{quote(self.value)}"

    def matches(self, value: str) -> bool:
        """Prometheus semantics: a missing label is the empty string; regexes are anchored."""
        if self.op == "=":
            return value == self.value
        if self.op == "!=":
            return value != self.value
        found = re.fullmatch(self.value, value, flags=re.DOTALL) is not None
        return found if self.op == "=~" else not found


def eq(label: str, value: str) -> Matcher:
    return Matcher(label, "=", value)


def ne(label: str, value: str) -> Matcher:
    return Matcher(label, "!=", value)


def regex(label: str, pattern: str) -> Matcher:
    return Matcher(label, "=~", pattern)


def not_regex(label: str, pattern: str) -> Matcher:
    return Matcher(label, "!~", pattern)


_RE2_SPECIAL = re.compile(r"([\\.+*?()|\[\]{}^$])")


def one_of(label: str, values: Sequence[str]) -> Matcher:
    """``label=~"a|b"``: any of these values, each matched literally."""
    return regex(label, "|".join(_RE2_SPECIAL.sub(r"\\\1", value) for value in values))


def equal_to(labels: Mapping[str, str]) -> tuple[Matcher, ...]:
    """One ``=`` matcher per label, sorted by name: ``{"b": "2", "a": "1"}`` → a, then b."""
    return tuple(eq(label, value) for label, value in sorted(labels.items()))


@dataclass(frozen=True)
class Selector:
    """An instant-vector selector: a series name and its label matchers, in order."""

    metric: str
    matchers: tuple[Matcher, ...] = ()

    def render(self, extra: tuple[Matcher, ...] = ()) -> str:
        matchers = (*self.matchers, *extra)
        if not matchers:
            return self.metric
        return self.metric + "{" + ", ".join(m.render() for m in matchers) + "}"

    def where(self, *matchers: Matcher) -> Selector:
        """The same selector with more matchers."""
        return Selector(self.metric, (*self.matchers, *matchers))

    def __str__(self) -> str:
        return self.render()


_MATCHER = re.compile(
    r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(,|$)', re.DOTALL
)
_NOT_RE2 = re.compile(r"\(\?(?:=|!|<=|<!|P=)|\\[1-9]")
_UNQUOTE = {"\\": "\\", '"': '"', "n": "\n", "r": "\r", "t": "\t"}


def _unquote(body: str) -> str:
    out, index = [], 0
    while index < len(body):
        char = body[index]
        if char == "\\":
            escaped = body[index + 1]
            if escaped not in _UNQUOTE:
                raise ValueError(f"unsupported escape \\{escaped} in a label value")
            out.append(_UNQUOTE[escaped])
            index += 2
        else:
            out.append(char)
            index += 1
    return "".join(out)


def _parse_matchers(body: str) -> tuple[Matcher, ...]:
    matchers: list[Matcher] = []
    position = 0
    while position < len(body) and body[position:].strip():
        match = _MATCHER.match(body, position)
        if match is None:
            raise ValueError(f"cannot read a label matcher at {body[position:][:30]!r}")
        label, op, raw, _ = match.groups()
        value = _unquote(raw)
        if op in ("=~", "!~"):
            if _NOT_RE2.search(value):
                raise ValueError(
                    f"label {label}: {value!r} uses lookaround or backreferences, which "
                    "Prometheus (RE2) does not support"
                )
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"label {label}: bad regular expression {value!r}: {exc}") from exc
        matchers.append(Matcher(label, op, value))
        position = match.end()
    return tuple(matchers)


def parse_selector(text: str) -> Selector:
    """A plain instant-vector selector, ``name`` or ``name{label op "value", …}``, nothing else.

    Functions, ranges, offsets and operators are refused: the generator adds those itself.
    """
    stripped = text.strip()
    name_match = METRIC_NAME.match(stripped)
    if name_match is None:
        raise ValueError(f"expected a metric name at the start of {text!r}")
    metric, rest = name_match.group(0), stripped[name_match.end():].strip()
    if not rest:
        return Selector(metric)
    if not (rest.startswith("{") and rest.endswith("}")):
        raise ValueError(
            f"{text!r} is not a plain selector: write name{{label=\"value\"}} without "
            "functions, ranges or operators"
        )
    matchers = _parse_matchers(rest[1:-1])
    for matcher in matchers:
        if matcher.label == "__name__":
            raise ValueError("the metric name goes before the braces, not in a __name__ matcher")
    return Selector(metric, matchers)


def to_decimal(value: float | int | str) -> Decimal:
    """A number exactly as the user wrote it: 99.9 → Decimal('99.9'), not 99.9000000000000056…"""
    try:
        return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    except InvalidOperation as exc:
        raise ValueError(f"not a number: {value!r}") from exc


# ---- expressions ---------------------------------------------------------------------------------
Vector: TypeAlias = Selector | str  # a selector, or an expression already built

LE: Final = "le"


def format_seconds(seconds: int) -> str:
    """A window in plain seconds, ``30s``, ``300s`` (the controller's windows read that way)."""
    return f"{seconds}s"


def _range(function: str, vector: Vector, window: str) -> str:
    return f"{function}({vector}[{window}])"


def rate(vector: Vector, window: str) -> str:
    return _range("rate", vector, window)


def increase(vector: Vector, window: str) -> str:
    return _range("increase", vector, window)


def deriv(vector: Vector, window: str) -> str:
    return _range("deriv", vector, window)


def changes(vector: Vector, window: str) -> str:
    return _range("changes", vector, window)


def sum_over_time(vector: Vector, window: str) -> str:
    return _range("sum_over_time", vector, window)


def max_over_time(vector: Vector, window: str) -> str:
    return _range("max_over_time", vector, window)


def offset(vector: Vector, window: str) -> str:
    """The vector as it was ``window`` ago."""
    return f"{vector} offset {window}"


def copy_label(expr: Vector, source: str, target: str) -> str:
    """``label_replace``: ``target`` set to ``source``'s value (where it has one)."""
    return f'label_replace({expr}, {quote(target)}, "$1", {quote(source)}, "(.+)")'


def aggregate(operator: str, by: Sequence[str], expr: Vector) -> str:
    """``sum by (a, b) (expr)``, or ``sum(expr)`` over everything when ``by`` is empty."""
    return f"{operator} by ({', '.join(by)}) ({expr})" if by else f"{operator}({expr})"


def sum_by(by: Sequence[str], expr: Vector) -> str:
    return aggregate("sum", by, expr)


def max_by(by: Sequence[str], expr: Vector) -> str:
    return aggregate("max", by, expr)


def le_matcher(threshold: float) -> Matcher:
    r"""The ``le`` bucket of a threshold. prometheus_client (the service's, vLLM's) writes
    integral edges as ``1.0`` and Prometheus 3 normalises them to ``1``; the regex takes both::

        >>> le_matcher(0.12).render(), le_matcher(1.0).render()
        ('le="0.12"', 'le=~"1|1\\\\.0"')
    """
    text = format_number(threshold)
    if "." in text:
        return eq(LE, text)
    return regex(LE, f"{text}|{text}\\.0")


def histogram_quantile(q: float | Decimal, histogram: str, matchers: tuple[Matcher, ...],
                       window: str, by: Sequence[str] = ()) -> str:
    """The ``q``-quantile of a classic histogram (its base name) over ``window``, per ``by``.

    The buckets are summed by ``le`` and ``by``; ``le`` goes first unless ``by`` places it.
    """
    groups = tuple(by) if LE in by else (LE, *by)
    buckets = rate(Selector(histogram + "_bucket", matchers), window)
    return f"histogram_quantile({format_number(q)}, {sum_by(groups, buckets)})"


def ratio_of_rates(numerator: Vector, denominator: Vector, window: str,
                   by: Sequence[str] = ()) -> str:
    return f"{sum_by(by, rate(numerator, window))}\n/\n{sum_by(by, rate(denominator, window))}"


def mean(histogram: str, matchers: tuple[Matcher, ...], window: str,
         by: Sequence[str] = ()) -> str:
    """The mean observation over ``window``: the rate of the sum over the rate of the count."""
    return ratio_of_rates(Selector(histogram + "_sum", matchers),
                          Selector(histogram + "_count", matchers), window, by)


def new_or_increased(counter: Selector, by: Sequence[str], window: str) -> str:
    """Counter events: an increase within ``window``, or a series absent ``window`` ago.

    increase() needs two samples, so a label set's first event (a series that appears at 1) is
    invisible to it; the ``unless … offset`` half catches exactly that case.
    """
    return (f"{sum_by(by, increase(counter, window))} > 0\nor\n"
            f"{sum_by(by, f'{counter} unless {counter} offset {window}')} > 0")
