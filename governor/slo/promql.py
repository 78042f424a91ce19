"""The bits of PromQL syntax the spec and the generators need: durations, names, strings and
plain selectors.

Nothing here evaluates PromQL. It validates what a user may put into ``slo.yaml`` (a counter
selector such as ``governor_requests_total{code=~"5.."}``) so that the generated rules can never
be broken, or extended with arbitrary PromQL, by a spec, and it formats numbers and durations
the same way every time::

    >>> parse_selector('governor_requests_total{code=~"5.."}').render()
    'governor_requests_total{code=~"5.."}'
    >>> format_duration(5400), parse_duration("1h30m")
    ('1h30m', Decimal('5400'))
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

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


@dataclass(frozen=True)
class Selector:
    metric: str
    matchers: tuple[Matcher, ...] = ()

    def render(self, extra: tuple[Matcher, ...] = ()) -> str:
        matchers = (*self.matchers, *extra)
        if not matchers:
            return self.metric
        return self.metric + "{" + ", ".join(m.render() for m in matchers) + "}"


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
