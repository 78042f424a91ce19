"""The admin API's admission body, ``GET``/``PUT /admin/admission``: the bound a controller moves
live, declared once for every server and the controller.

A report carries the bound in force (the deadline slack, and the static bound on prompt tokens
ahead, ``null`` when there is none), each class's deadline at that slack, and what the deadline
gate measures; a ``PUT`` names any of the fields, and one it leaves out keeps its value. In front
of a vLLM that has its own bound on the prompt tokens in prefill (``max_num_queued_tokens``, vLLM
0.32 and later, checked in each API process), the report carries it too (``null``: unbounded) and
a ``PUT`` may move it; elsewhere the field is absent and a ``PUT`` naming it is refused 422::

    GET /admin/admission
    200 {"deadline_slack": 1.0, "max_tokens_ahead": null,
         "deadlines": {"doc": 20.0, "chat": 1.0},
         "prefill_tokens_per_second": 38211.5, "backlog_prompt_tokens": 9120}

    >>> requested({"deadline_slack": 1.5}, AdmissionBound(1.0, None)).as_dict()
    {'deadline_slack': 1.5, 'max_tokens_ahead': None}
    >>> requested({"max_tokens_ahead": None}, AdmissionBound(1.0, 32768)).max_tokens_ahead
    >>> requested({"max_num_queued_tokens": 8192},
    ...           AdmissionBound(1.0, None, vllm_queued_tokens=True)).max_num_queued_tokens
    8192
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from governor.contracts.batching import BodyError

SLACK: Final = "deadline_slack"
TOKENS_AHEAD: Final = "max_tokens_ahead"
# vLLM's own bound (``--max-num-queued-tokens``), where the server's vLLM has one to move.
QUEUED_TOKENS: Final = "max_num_queued_tokens"
FIELDS: Final = (SLACK, TOKENS_AHEAD, QUEUED_TOKENS)
# The range a slack may take: above it every deadline is minutes long, which is no deadline;
# below it a deadline is a hundredth of its target, shorter than a prefill: every request refused.
MIN_SLACK: Final = 0.01
MAX_SLACK: Final = 100.0
MAX_TOKENS_AHEAD: Final = 10**12
# The largest max_num_queued_tokens any party accepts (a server's PUT, the controller reading a
# target's gauge or answer, its state file): the gate's own bound's range.
MAX_QUEUED_TOKENS: Final = MAX_TOKENS_AHEAD


def slack_within(value: float) -> bool:
    """Whether ``value`` is a deadline slack every party accepts (a server at start or through
    its admin API, the controller reading a gate, its state file): within [:data:`MIN_SLACK`,
    :data:`MAX_SLACK`] (NaN and the infinities are not).

    >>> slack_within(0.7), slack_within(1e30), slack_within(1e-300), slack_within(float("nan"))
    (True, False, False, False)
    """
    return MIN_SLACK <= value <= MAX_SLACK


def slack_text(text: str) -> float | None:
    """A slack typed on a command line or in an environment variable, or ``None`` where it is
    not a number :func:`slack_within` accepts.

    >>> slack_text("0.7"), slack_text("0"), slack_text("lots")
    (0.7, None, None)
    """
    try:
        value = float(text)
    except ValueError:
        return None
    return value if slack_within(value) else None


def slack_range() -> str:
    """The range :func:`slack_within` accepts, as the errors name it."""
    return f"[{MIN_SLACK:g}, {MAX_SLACK:g}]"


def queued_tokens_within(value: float) -> bool:
    """Whether ``value`` is a bound on vLLM's queued tokens every party accepts: a whole number
    from 1 to :data:`MAX_QUEUED_TOKENS` (0 would refuse every request: vLLM refuses once the
    tokens in prefill reach the bound).

    >>> queued_tokens_within(8192), queued_tokens_within(8192.5), queued_tokens_within(1e30)
    (True, False, False)
    """
    return 1 <= value <= MAX_QUEUED_TOKENS and value == int(value)


@dataclass(frozen=True, slots=True)
class AdmissionBound:
    """What a controller moves: each deadline's factor on its class's first-token target, the
    static bound on prompt tokens ahead (None: none), and, where the server's vLLM has it
    (``vllm_queued_tokens``), vLLM's bound on the prompt tokens in prefill (None: none)."""

    deadline_slack: float
    max_tokens_ahead: int | None
    max_num_queued_tokens: int | None = None
    vllm_queued_tokens: bool = False

    def as_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {SLACK: self.deadline_slack, TOKENS_AHEAD: self.max_tokens_ahead}
        if self.vllm_queued_tokens:
            found[QUEUED_TOKENS] = self.max_num_queued_tokens
        return found


@dataclass(frozen=True, slots=True)
class AdmissionReport:
    """What ``GET /admin/admission`` reports."""

    bound: AdmissionBound
    deadlines: Mapping[str, float]  # class → seconds, at the slack in force
    prefill_tokens_per_second: float | None  # None: not measured yet
    backlog_prompt_tokens: int

    def as_dict(self) -> dict[str, Any]:
        return {**self.bound.as_dict(), "deadlines": dict(self.deadlines),
                "prefill_tokens_per_second": self.prefill_tokens_per_second,
                "backlog_prompt_tokens": self.backlog_prompt_tokens}


def requested(body: object, current: AdmissionBound) -> AdmissionBound:
    """The bound a ``PUT`` body asks for, merged with ``current`` (pure; :class:`BodyError`
    when it cannot be applied: 400 malformed, 422 out of range)."""
    if not isinstance(body, Mapping):
        raise BodyError("the body must be a JSON object")
    unknown = sorted(str(key)[:64] for key in set(body) - set(FIELDS))
    if unknown:
        raise BodyError(f"unknown fields {unknown[:8]}; expected {list(FIELDS)}",
                        param=unknown[0])
    if not any(name in body for name in FIELDS):
        raise BodyError(f"name at least one of {list(FIELDS)}")
    wanted = current
    if SLACK in body:
        wanted = replace(wanted, deadline_slack=_slack(body[SLACK]))
    if TOKENS_AHEAD in body:
        wanted = replace(wanted, max_tokens_ahead=_tokens_ahead(body[TOKENS_AHEAD]))
    if QUEUED_TOKENS in body:
        wanted = replace(wanted, max_num_queued_tokens=_queued_tokens(body[QUEUED_TOKENS],
                                                                      current))
    return wanted


def _slack(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BodyError(f"'{SLACK}' must be a number", param=SLACK)
    try:
        slack = float(value)
    except OverflowError:  # an integer too large for a float
        slack = math.inf
    if not slack_within(slack):
        raise BodyError(f"'{SLACK}' must be within {slack_range()}", param=SLACK, status=422,
                        code="out_of_range")
    return slack


def _tokens_ahead(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BodyError(f"'{TOKENS_AHEAD}' must be an integer or null", param=TOKENS_AHEAD)
    if not 0 <= value <= MAX_TOKENS_AHEAD:
        raise BodyError(f"'{TOKENS_AHEAD}' must be within [0, {MAX_TOKENS_AHEAD}]",
                        param=TOKENS_AHEAD, status=422, code="out_of_range")
    return value


def _queued_tokens(value: object, current: AdmissionBound) -> int | None:
    if not current.vllm_queued_tokens:
        raise BodyError(f"'{QUEUED_TOKENS}' cannot be moved here: it is vLLM's own bound (vLLM "
                        "0.32 and later), moved in front of stock vllm serve only",
                        param=QUEUED_TOKENS, status=422, code="unsupported")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BodyError(f"'{QUEUED_TOKENS}' must be an integer or null", param=QUEUED_TOKENS)
    if not queued_tokens_within(value):
        raise BodyError(f"'{QUEUED_TOKENS}' must be within [1, {MAX_QUEUED_TOKENS}] or null",
                        param=QUEUED_TOKENS, status=422, code="out_of_range")
    return value
