"""The admin API's body, ``GET``/``PUT /admin/batching``: what every server and the controller
agree on, declared once.

A report (the answer to both methods) carries the limits in force and the range a change may
take; a ``PUT`` names either limit or both, and the one it leaves out keeps its value::

    GET /admin/batching
    200 {"max_num_seqs": 256, "max_num_batched_tokens": 8192,
         "floor": {"max_num_seqs": 1, "max_num_batched_tokens": 256},
         "ceiling": {"max_num_seqs": 256, "max_num_batched_tokens": 8192}}

    >>> report = BatchingReport.from_dict({
    ...     "max_num_seqs": 256, "max_num_batched_tokens": 8192,
    ...     "floor": {"max_num_seqs": 1, "max_num_batched_tokens": 256},
    ...     "ceiling": {"max_num_seqs": 256, "max_num_batched_tokens": 8192}})
    >>> requested({"max_num_batched_tokens": 2048}, report)
    BatchingLimits(max_num_seqs=256, max_num_batched_tokens=2048)

``governor serve``, the route Governor adds to stock ``vllm serve`` and the controller's actuator
all read and write these shapes through this module.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from governor.contracts.metrics.service import PARAM_MAX_NUM_BATCHED_TOKENS, PARAM_MAX_NUM_SEQS


class Param(enum.StrEnum):
    """vLLM's two continuous-batching knobs, named as the admin API and the ``param`` label of
    the service's and the controller's series name them."""

    MAX_NUM_SEQS = PARAM_MAX_NUM_SEQS
    MAX_NUM_BATCHED_TOKENS = PARAM_MAX_NUM_BATCHED_TOKENS


FIELDS: Final = tuple(p.value for p in Param)

# What a server answers an admin call it cannot authorize (401, ``authentication_error``).
DISABLED_MESSAGE: Final = "the admin API is disabled (no GOVERNOR_ADMIN_TOKEN)"
UNAUTHORIZED_MESSAGE: Final = "a valid bearer token is required"
UNAUTHORIZED_CODE: Final = "invalid_api_key"


@dataclass(frozen=True, slots=True)
class BatchingLimits:
    """vLLM's two batching knobs: the running-request cap and the per-step token budget."""

    max_num_seqs: int
    max_num_batched_tokens: int

    def get(self, param: Param) -> int:
        return self.max_num_seqs if param is Param.MAX_NUM_SEQS else self.max_num_batched_tokens

    def with_value(self, param: Param, value: int) -> BatchingLimits:
        return replace(self, **{param.value: value})

    def within(self, floor: BatchingLimits, ceiling: BatchingLimits) -> bool:
        return all(floor.get(p) <= self.get(p) <= ceiling.get(p) for p in Param)

    def as_dict(self) -> dict[str, int]:
        return {p.value: self.get(p) for p in Param}

    @classmethod
    def from_dict(cls, raw: object) -> BatchingLimits:
        """Both limits from a JSON object; :class:`ValueError` unless both are integers from 1
        to :data:`MAX_LIMIT`."""
        if not isinstance(raw, Mapping):
            raise ValueError(f"limits must be an object, got {type(raw).__name__}")
        values = {name: raw.get(name) for name in FIELDS}
        valid = {name: v for name, v in values.items() if isinstance(v, int) and _is_int(v)
                 and 0 < v <= MAX_LIMIT}
        if len(valid) != len(FIELDS):
            raise ValueError(f"limits must be integers from 1 to {MAX_LIMIT}, got "
                             f"{_short(values)}")
        return cls(**valid)


# The largest limit any party accepts: vLLM keeps both in 32-bit integers, and the controller's
# state file holds nothing larger. A server's report past it is refused, never stored.
MAX_LIMIT: Final = 2**31 - 1


# The lowest limits a server lets the admin API set unless told otherwise: one running request,
# and a token budget that still prefills a chat prompt in a few steps.
DEFAULT_FLOOR: Final = BatchingLimits(max_num_seqs=1, max_num_batched_tokens=256)


@dataclass(frozen=True, slots=True)
class BatchingReport:
    """What ``GET /admin/batching`` reports: the limits in force and the range allowed."""

    current: BatchingLimits
    floor: BatchingLimits
    ceiling: BatchingLimits

    def as_dict(self) -> dict[str, Any]:
        return {**self.current.as_dict(), "floor": self.floor.as_dict(),
                "ceiling": self.ceiling.as_dict()}

    @classmethod
    def from_dict(cls, raw: object) -> BatchingReport:
        """A report as a server sent it; :class:`ValueError` when it is not one: each limit
        an integer from 1 to :data:`MAX_LIMIT`, the floor at most the ceiling, and the limits
        in force between them (what a server enforces on every ``PUT``)."""
        if not isinstance(raw, Mapping):
            raise ValueError(f"a report must be an object, got {type(raw).__name__}")
        report = cls(BatchingLimits.from_dict(raw), BatchingLimits.from_dict(raw.get("floor")),
                     BatchingLimits.from_dict(raw.get("ceiling")))
        if any(report.floor.get(p) > report.ceiling.get(p) for p in Param):
            raise ValueError(f"the floor {report.floor.as_dict()} lies above the ceiling "
                             f"{report.ceiling.as_dict()}")
        if not report.current.within(report.floor, report.ceiling):
            raise ValueError(f"the limits in force {report.current.as_dict()} lie outside "
                             f"[{report.floor.as_dict()}, {report.ceiling.as_dict()}]")
        return report


class BodyError(ValueError):
    """A ``PUT`` body that cannot be applied: 400 when it is malformed, 422 out of range."""

    def __init__(self, message: str, *, param: str | None = None, status: int = 400,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.message, self.param, self.status, self.code = message, param, status, code


def changes(body: object, floor: BatchingLimits, ceiling: BatchingLimits) -> dict[Param, int]:
    """The limits a ``PUT`` body names, each checked against its floor and ceiling (pure;
    :class:`BodyError` when the body cannot be applied). A limit it leaves out is absent."""
    if not isinstance(body, Mapping):
        raise BodyError("the body must be a JSON object")
    unknown = sorted(str(key) for key in set(body) - set(FIELDS))
    if unknown:
        raise BodyError(f"unknown fields {_short(unknown)}; expected {list(FIELDS)}",
                        param=unknown[0][:64])
    if not any(name in body for name in FIELDS):
        raise BodyError(f"name at least one of {list(FIELDS)}")
    named: dict[Param, int] = {}
    for param in Param:
        if param.value not in body:
            continue
        value = body[param.value]
        if not _is_int(value):
            raise BodyError(f"'{param.value}' must be an integer", param=param.value)
        low, high = floor.get(param), ceiling.get(param)
        if not low <= value <= high:
            raise BodyError(f"'{param.value}' must be within [{low}, {high}], got {_number(value)}",
                            param=param.value, status=422, code="out_of_range")
        named[param] = value
    return named


def requested(body: object, report: BatchingReport) -> BatchingLimits:
    """The limits a ``PUT`` body asks for: :func:`changes`, merged with ``report``'s current
    limits.

    Merging reads the current limits, so a server must hold its own lock from here until the
    change is in force, or a concurrent ``PUT`` of the other field would be undone.
    """
    wanted = report.current
    for param, value in changes(body, report.floor, report.ceiling).items():
        wanted = wanted.with_value(param, value)
    return wanted


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: int) -> str:
    # Python refuses to print integers of over 4300 digits; a body may hold one.
    return str(value) if abs(value) < 10**18 else ("a larger number" if value > 0 else
                                                   "a smaller number")


def _short(value: object) -> str:
    try:
        text = repr(value)
    except ValueError:  # an integer of over 4300 digits
        return "(a value too large to print)"
    return text if len(text) <= 200 else text[:200] + "…"
