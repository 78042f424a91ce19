"""Request classes: which generation requests belong together, and what each class is owed.

A spec's ``classes`` are tried in order and a request takes the first whose ``match`` it meets;
the last class has no ``match`` and takes every request no other class took (the default). A
class carries a vLLM priority (lower is served first), optional admission limits (requests of
the class in flight at once, and waiting at once) and its own latency thresholds for the spec's
latency SLOs::

    >>> classes = RequestClasses((
    ...     RequestClass("doc", (Match(min_prompt_tokens=3000),
    ...                          Match(headers=(("x-governor-class", ("doc",)),))),
    ...                  priority=10, max_in_flight=8, max_queue=16,
    ...                  thresholds=(("time-to-first-token", 20.0),)),
    ...     RequestClass("chat")), declared=True)
    >>> classes.classify("/v1/chat/completions", {}, 5000).name
    'doc'
    >>> classes.classify("/v1/completions", {"x-governor-class": "doc"}, 12).name
    'doc'
    >>> classes.classify("/v1/chat/completions", {}, 200).name
    'chat'

A spec without ``classes`` has one class, ``default``, with priority 0 and no limit of its own,
so a service reading it behaves as it did before classes existed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from governor.contracts.metrics.service import DEFAULT_CLASS

MAX_CLASSES: Final = 16
MAX_ALTERNATIVES: Final = 8
MAX_HEADERS: Final = 8
MAX_HEADER_VALUES: Final = 16
MAX_HEADER_VALUE_LENGTH: Final = 256
MAX_PRIORITY: Final = 1_000_000  # either way; vLLM takes any integer
MAX_IN_FLIGHT: Final = 1_000_000
MAX_PROMPT_TOKENS: Final = 100_000_000
# A class chosen by one of these would put a credential into slo.yaml.
SECRET_HEADERS: Final = frozenset({"authorization", "proxy-authorization", "cookie"})


@dataclass(frozen=True, slots=True)
class Match:
    """One way into a class: every condition given holds. Header names are lower case;
    ``headers`` must look names up that way (aiohttp's headers do, in any case)."""

    min_prompt_tokens: int | None = None
    max_prompt_tokens: int | None = None
    routes: tuple[str, ...] = ()  # any of these routes
    headers: tuple[tuple[str, tuple[str, ...]], ...] = ()  # each header holds one of its values

    def matches(self, route: str, headers: Mapping[str, str], prompt_tokens: int) -> bool:
        if self.min_prompt_tokens is not None and prompt_tokens < self.min_prompt_tokens:
            return False
        if self.max_prompt_tokens is not None and prompt_tokens > self.max_prompt_tokens:
            return False
        if self.routes and route not in self.routes:
            return False
        return all(headers.get(name) in values for name, values in self.headers)

    def describe(self) -> str:
        """``prompt ≥ 3000 tokens``, ``x-governor-class: doc``: every condition, joined by and."""
        parts = []
        if self.min_prompt_tokens is not None or self.max_prompt_tokens is not None:
            low, high = self.min_prompt_tokens, self.max_prompt_tokens
            parts.append(f"prompt {low} to {high} tokens" if low is not None and high is not None
                         else f"prompt ≥ {low} tokens" if low is not None
                         else f"prompt ≤ {high} tokens")
        if self.routes:
            parts.append(" or ".join(self.routes))
        parts += [f"{name}: {' or '.join(values)}" for name, values in self.headers]
        return " and ".join(parts)


@dataclass(frozen=True, slots=True)
class RequestClass:
    name: str
    match: tuple[Match, ...] = ()  # any one suffices; () only for the last class: everything
    priority: int = 0  # vLLM's: lower values are scheduled first
    max_in_flight: int | None = None  # None: only the service's own limit applies
    # Requests of the class waiting at once; more are refused at once (429) rather than left to
    # wait out the queue timeout (None: only the service's own queue bound applies).
    max_queue: int | None = None
    # Latency threshold (seconds) per SLO name, where this class differs from the SLO's own.
    thresholds: tuple[tuple[str, float], ...] = ()
    description: str = ""

    def describe_match(self) -> str:
        """What puts a request in this class; the default class takes the rest."""
        return ", or ".join(m.describe() for m in self.match) or "every other request"

    def threshold(self, slo: str, default: float) -> float:
        """This class's threshold for the SLO named ``slo``, whose own is ``default``."""
        return next((seconds for name, seconds in self.thresholds if name == slo), default)


@dataclass(frozen=True, slots=True)
class RequestClasses:
    """The classes in match order, the default last; ``declared``: the spec lists them."""

    classes: tuple[RequestClass, ...] = (RequestClass(DEFAULT_CLASS),)
    declared: bool = False

    def __post_init__(self) -> None:
        if not self.classes or self.classes[-1].match:
            raise ValueError("the last request class is the default and has no match")

    @property
    def default(self) -> RequestClass:
        return self.classes[-1]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.classes)

    def get(self, name: str) -> RequestClass:
        for request_class in self.classes:
            if request_class.name == name:
                return request_class
        raise KeyError(f"no request class named {name!r} (the spec has: {', '.join(self.names)})")

    def classify(self, route: str, headers: Mapping[str, str], prompt_tokens: int
                 ) -> RequestClass:
        """The first class one of whose matches the request meets; the default otherwise."""
        for request_class in self.classes:
            if any(m.matches(route, headers, prompt_tokens) for m in request_class.match):
                return request_class
        return self.default

    def candidates(self, route: str, headers: Mapping[str, str], fewest: int = 0,
                   most: int = MAX_PROMPT_TOKENS) -> tuple[str, ...]:
        """Every class a request on ``route`` with ``headers`` can fall in, whatever its prompt's
        length (in match order): what is known of it before its body is read; with ``fewest``
        and ``most``, for a prompt of that many tokens or any number between.

        >>> classes = RequestClasses((RequestClass("doc", (Match(min_prompt_tokens=3000),
        ...                                                Match(headers=(("x-c", ("doc",)),)))),
        ...                           RequestClass("chat")), declared=True)
        >>> classes.candidates("/v1/completions", {}), classes.candidates("/", {"x-c": "doc"})
        (('doc', 'chat'), ('doc',))
        >>> classes.candidates("/", {}, 1000, 2400), classes.candidates("/", {}, 2000, 3000)
        (('chat',), ('doc', 'chat'))
        """
        # classify() is constant between the matches' token bounds: trying each bound and its
        # neighbour finds every class a length can give.
        points = {fewest, most}
        for request_class in self.classes:
            for m in request_class.match:
                for bound in (m.min_prompt_tokens, m.max_prompt_tokens):
                    if bound is not None:
                        points.update(n for n in (bound - 1, bound, bound + 1)
                                      if fewest <= n <= most)
        found = {self.classify(route, headers, n).name for n in points}
        return tuple(name for name in self.names if name in found)

    def thresholds(self, slo: str, default: float) -> dict[str, float]:
        """Every class's threshold for one SLO: class name → seconds."""
        return {c.name: c.threshold(slo, default) for c in self.classes}
