"""Deadline-aware admission: turn away the request that can no longer be served in time, early.

A request's deadline is its class's time-to-first-token target (times ``slack``, the bound a
controller may move live), counted from its arrival. Its *predicted wait* for its first token
is the prompt tokens ahead of it, and its own, over the measured prefill rate:

* **ahead**: prompt tokens of requests that rank as high or higher (a class of the same or a
  lower priority number) and have no first token yet, whether still in the admission queue or
  already in the engine; a lower class yields to it in both, so its tokens are not counted;
* **prefill rate**: prompt tokens brought to their first token per second during which the engine
  had any prompt pending, averaged over the last ``window_seconds`` (exponentially). Under load
  that is the rate at which the engine works off its backlog, whatever holds it back (the token
  budget, running slots, KV cache); at light load it reads low, but then little is ahead.

The gate is then simple, and never takes back what it let in:

1. At arrival a request is refused (``Judgement.admit`` false; the service answers 429 with
   ``Retry-After``) when its predicted wait exceeds what is left of its deadline: it would be
   late, and its prefill would make later requests late too. Or when more than
   ``max_tokens_ahead`` prompt tokens are ahead (a static bound, off unless set). A request with
   nothing ahead is never refused, however long its prompt: waiting could not bring its first
   token sooner.
2. A request that waits in the admission queue is shed once its deadline has passed, before it
   reaches the engine (:meth:`DeadlineGate.deadline_left` is when).
3. A class without a TTFT target has no deadline: never refused or shed by it, its tokens still
   count ahead of the classes it outranks. Before any prefill has been measured nothing is
   refused either: no evidence, no refusal.
4. Calibration, at the quantile :data:`DEFAULT_CALIBRATION_QUANTILE` unless
   ``calibration_quantile`` says another (``None``: off): a request admitted near its deadline
   comes in late whenever the prompts ahead of it prefill slower than the averaged rate says. The
   gate keeps, for the recent first tokens whose prediction was at least ``calibration_near`` of
   what was left of their deadline, how late each came against its prediction (actual over
   predicted, before calibration, so the factor does not chase itself), and scales every
   prediction by that quantile of them, between 1 (it never loosens the gate) and
   ``max_correction``.

Pure: every call is given the time (any monotonic clock, in seconds); a clock that stands still
or steps back adds nothing. The service drives it on asyncio, the benchmark in virtual time::

    >>> gate: DeadlineGate[str] = DeadlineGate((ClassDeadline("chat", ttft_seconds=1.0),))
    >>> gate.judge("chat", 8000, now=0.0).admit           # no rate measured yet: admitted
    True
    >>> gate.track("a", "chat", 8000, now=0.0, waiting=False)
    >>> gate.first_token("a", now=1.0)                    # 8000 tokens in a second of prefill
    WaitSample(name='chat', predicted_seconds=None, actual_seconds=1.0)
    >>> gate.rate
    8000.0
    >>> for key in "bcd":
    ...     gate.track(key, "chat", 8000, now=1.0, waiting=False)
    >>> late = gate.judge("chat", 500, now=1.0)           # 24000 tokens ahead, and its 500
    >>> late.admit, late.first_token_seconds, late.retry_after_seconds
    (False, 3.0625, 3)
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

from governor.contracts.admission import slack_range, slack_within
from governor.contracts.metrics.service import REASON_DEADLINE, REASON_TOKENS_AHEAD
from governor.slo.model import LatencySLI, SloSpec
from governor.slo.roles import ROLE_TTFT, pick

K = TypeVar("K")

# The calibration's quantile unless told otherwise: on every committed workload and the stress
# set it kept the admitted requests' first-token P99 within the SLO at 0.99-1.13x the goodput of
# no calibration (docs/overload.md, "Calibrating the prediction").
DEFAULT_CALIBRATION_QUANTILE = 0.9

@dataclass(frozen=True, slots=True)
class ClassDeadline:
    """A request class as the gate sees it: its rank and its first-token target."""

    name: str
    priority: int = 0  # lower ranks higher, as in vLLM and the admission policy
    ttft_seconds: float | None = None  # None: no deadline

    def __post_init__(self) -> None:
        if self.ttft_seconds is not None and not (
                math.isfinite(self.ttft_seconds) and self.ttft_seconds > 0):
            raise ValueError(f"class {self.name!r}: the TTFT target must be a positive number "
                             f"of seconds, got {self.ttft_seconds!r}")


@dataclass(frozen=True, slots=True)
class DeadlineSettings:
    # A class's deadline is this times its TTFT target: the knob a controller moves live.
    slack: float = 1.0
    # The prefill rate is an exponential average over about this long.
    window_seconds: float = 30.0
    # Seconds of (decayed) prefill measured before a prediction is trusted.
    min_busy_seconds: float = 0.5
    # A static bound on the prompt tokens ahead (vLLM's max_num_queued_tokens); None: none.
    max_tokens_ahead: int | None = None
    # The longest Retry-After a refusal suggests.
    max_retry_after_seconds: int = 60
    # Calibration (None: off): predictions are scaled by this quantile of how late the recent
    # first tokens came against their own prediction (actual / predicted, at least 1), over the
    # requests admitted near their deadline (predicted at least ``calibration_near`` of it).
    calibration_quantile: float | None = DEFAULT_CALIBRATION_QUANTILE
    calibration_near: float = 0.5
    calibration_samples: int = 256  # the most recent first tokens it reads
    calibration_min_samples: int = 20  # fewer: no correction
    max_correction: float = 2.0

    def __post_init__(self) -> None:
        errors = []
        # One range wherever a slack enters: at start, through the admin API, in the controller.
        if not slack_within(self.slack):
            errors.append(f"slack must be within {slack_range()}, got {self.slack!r}")
        if not (math.isfinite(self.window_seconds) and self.window_seconds > 0):
            errors.append(f"window_seconds must be positive, got {self.window_seconds!r}")
        if not (math.isfinite(self.min_busy_seconds) and self.min_busy_seconds >= 0):
            errors.append(f"min_busy_seconds must not be negative, got {self.min_busy_seconds!r}")
        if self.max_tokens_ahead is not None and self.max_tokens_ahead < 0:
            errors.append(f"max_tokens_ahead must not be negative, got {self.max_tokens_ahead}")
        if self.max_retry_after_seconds < 1:
            errors.append("max_retry_after_seconds must be at least 1")
        q = self.calibration_quantile
        if q is not None and not (math.isfinite(q) and 0 < q <= 1):
            errors.append(f"calibration_quantile must be in (0, 1], got {q!r}")
        if not (math.isfinite(self.calibration_near) and 0 <= self.calibration_near <= 1):
            errors.append(f"calibration_near must be in [0, 1], got {self.calibration_near!r}")
        if not 1 <= self.calibration_min_samples <= self.calibration_samples:
            errors.append("calibration_min_samples must be between 1 and calibration_samples")
        if not (math.isfinite(self.max_correction) and self.max_correction >= 1):
            errors.append(f"max_correction must be at least 1, got {self.max_correction!r}")
        if errors:
            raise ValueError("invalid deadline settings: " + "; ".join(errors))


@dataclass(frozen=True, slots=True)
class Judgement:
    """The gate's verdict on an arriving request, and what it was based on."""

    admit: bool
    reason: str = ""  # why it was refused: REASON_DEADLINE or REASON_TOKENS_AHEAD
    tokens_ahead: int = 0
    deadline_seconds: float | None = None  # left of its deadline at the decision; None: none
    wait_seconds: float | None = None  # predicted prefill of the tokens ahead; None: no rate
    first_token_seconds: float | None = None  # …and of its own: its predicted wait, judged
    retry_after_seconds: int = 1  # a refusal's Retry-After
    correction: float = 1.0  # the calibration's factor in the two predictions above


@dataclass(frozen=True, slots=True)
class WaitSample:
    """An admitted request's first token: the wait predicted at its admission, and the real one
    (both from the decision to the first token; the prediction is None without a rate)."""

    name: str
    predicted_seconds: float | None
    actual_seconds: float


class PrefillMeter:
    """Prompt tokens brought to their first token, per second the engine had any pending.

    Both sums decay with ``window_seconds``, so the rate follows the engine (a budget changed,
    a slowed GPU) within about a window and forgets an idle spell.
    """

    __slots__ = ("_at", "_busy", "_tokens", "window_seconds")

    def __init__(self, window_seconds: float) -> None:
        self.window_seconds = window_seconds
        self._tokens = 0.0
        self._busy = 0.0
        self._at: float | None = None

    def advance(self, now: float, busy: bool) -> None:
        """Time passes to ``now``; the engine had prompts pending all along if ``busy``."""
        if self._at is None or not now > self._at:  # also NaN: nothing happened
            if self._at is None and math.isfinite(now):
                self._at = now
            return
        elapsed = now - self._at
        decay = math.exp(-elapsed / self.window_seconds)
        # The span just ended weighs as its tokens will (counted at its end, undecayed), so a
        # steady rate reads exactly.
        self._tokens *= decay
        self._busy = self._busy * decay + (elapsed if busy else 0.0)
        self._at = now

    def prefilled(self, tokens: int) -> None:
        self._tokens += tokens

    def rate(self, min_busy_seconds: float) -> float | None:
        """Tokens per second; None until ``min_busy_seconds`` of prefill and a token measured."""
        if self._busy < max(min_busy_seconds, 1e-9) or self._tokens <= 0:
            return None
        return self._tokens / self._busy


@dataclass(slots=True)
class _Request:
    name: str
    tokens: int
    decided_at: float
    predicted_seconds: float | None
    waiting: bool
    raw_seconds: float | None = None  # the prediction before calibration
    deadline_seconds: float | None = None  # what was left of its deadline when admitted


@dataclass(slots=True)
class _Class:
    limit: ClassDeadline
    queued: int = 0  # prompt tokens waiting for admission
    pending: int = 0  # prompt tokens in the engine without a first token
    outranked_by: tuple[str, ...] = field(default=())  # classes ranking as high or higher


class DeadlineGate(Generic[K]):
    """The deadline policy and the backlog it reads, for one server.

    ``K`` is whatever stands for an admitted request (a future, a request id); the gate follows
    it from :meth:`track` to its first token (:meth:`first_token`) or its end (:meth:`forget`).
    """

    def __init__(self, classes: Sequence[ClassDeadline],
                 settings: DeadlineSettings | None = None) -> None:
        names = [c.name for c in classes]
        if not names or len(set(names)) != len(names):
            raise ValueError(f"request classes must be named uniquely: {names}")
        self.settings = settings or DeadlineSettings()
        self._classes = {c.name: _Class(c) for c in classes}
        for state in self._classes.values():
            state.outranked_by = tuple(c.name for c in classes
                                       if c.priority <= state.limit.priority)
        self._meter = PrefillMeter(self.settings.window_seconds)
        self._requests: dict[K, _Request] = {}
        self._pending = 0  # prompt tokens in the engine without a first token, every class
        self._lateness: deque[float] = deque(maxlen=self.settings.calibration_samples)
        self._correction = 1.0

    # ---- the bound a controller moves ------------------------------------------------------

    def set_slack(self, slack: float) -> None:
        """Every class's deadline becomes ``slack`` times its TTFT target, from now on."""
        self.settings = replace(self.settings, slack=slack)

    def set_max_tokens_ahead(self, tokens: int | None) -> None:
        self.settings = replace(self.settings, max_tokens_ahead=tokens)

    # ---- reading ---------------------------------------------------------------------------

    @property
    def rate(self) -> float | None:
        """The measured prefill rate (prompt tokens per second), None until measured."""
        return self._meter.rate(self.settings.min_busy_seconds)

    @property
    def correction(self) -> float:
        """The factor predictions are scaled by: the calibration's quantile of how late recent
        first tokens near their deadline came against their prediction, within
        ``[1, max_correction]``; 1 while calibration is off or has too few samples."""
        return self._correction

    @property
    def pending_tokens(self) -> int:
        """Prompt tokens in the engine without a first token yet."""
        return self._pending

    @property
    def queued_tokens(self) -> int:
        """Prompt tokens waiting for admission."""
        return sum(c.queued for c in self._classes.values())

    def tokens_ahead(self, name: str) -> int:
        """Prompt tokens ahead of a request of class ``name`` arriving now."""
        state = self._class(name)
        return sum(self._classes[n].queued + self._classes[n].pending
                   for n in state.outranked_by)

    def deadlines(self) -> dict[str, float]:
        """Each class's deadline in seconds at the slack in force (a class without is left
        out)."""
        found = {name: self.deadline(name) for name in self._classes}
        return {name: seconds for name, seconds in found.items() if seconds is not None}

    def deadline(self, name: str) -> float | None:
        """Class ``name``'s deadline in seconds from arrival (None: it has none)."""
        target = self._class(name).limit.ttft_seconds
        return None if target is None else self.settings.slack * target

    def deadline_left(self, name: str, waited: float) -> float | None:
        """What is left of the deadline of a request of class ``name`` that arrived ``waited``
        seconds ago (negative: passed; None: no deadline)."""
        deadline = self.deadline(name)
        return None if deadline is None else deadline - max(0.0, waited)

    # ---- the decision ----------------------------------------------------------------------

    def judge(self, name: str, tokens: int, now: float, *, waited: float = 0.0) -> Judgement:
        """Admit or refuse a request of ``tokens`` prompt tokens of class ``name``, which
        arrived ``waited`` seconds before ``now`` (its reading and tokenizing)."""
        _check_tokens(tokens)
        self._advance(now)
        ahead = self.tokens_ahead(name)
        left = self.deadline_left(name, waited)
        rate = self.rate
        correction = self.correction
        wait = None if rate is None else ahead / rate * correction
        first = None if rate is None else (ahead + tokens) / rate * correction
        settings = self.settings
        judged = Judgement(True, "", ahead, left, wait, first, correction=correction)
        if ahead == 0:
            return judged
        bound = settings.max_tokens_ahead
        if bound is not None and ahead > bound:
            # As long as the excess takes to prefill (a second when nothing is measured).
            excess = (ahead - bound) / rate if rate else 1.0
            return replace(judged, admit=False, reason=REASON_TOKENS_AHEAD,
                           retry_after_seconds=self._retry_after(excess))
        if first is not None and left is not None and first > left:
            deadline = self.deadline(name) or 0.0
            # A retry is a new request with a whole deadline: it fits once the backlog ahead has
            # drained to a deadline's worth (arrivals meanwhile are the client's jitter's job).
            return replace(judged, admit=False, reason=REASON_DEADLINE,
                           retry_after_seconds=self._retry_after(first - deadline))
        return judged

    def _retry_after(self, seconds: float) -> int:
        top = self.settings.max_retry_after_seconds
        if not seconds < top:  # also NaN
            return top
        return max(1, math.ceil(seconds))

    # ---- the requests it let in ------------------------------------------------------------

    def track(self, key: K, name: str, tokens: int, now: float, *, waiting: bool,
              judgement: Judgement | None = None) -> None:
        """An admitted request: waiting in the admission queue, or in the engine already."""
        _check_tokens(tokens)
        if key in self._requests:
            raise ValueError(f"request {key!r} is tracked already")
        self._advance(now)
        state = self._class(name)
        predicted = judgement.first_token_seconds if judgement is not None else None
        raw = None if predicted is None or judgement is None else predicted / judgement.correction
        self._requests[key] = _Request(name, tokens, now, predicted, waiting, raw,
                                       None if judgement is None else judgement.deadline_seconds)
        if waiting:
            state.queued += tokens
        else:
            state.pending += tokens
            self._pending += tokens

    def start(self, key: K, now: float) -> None:
        """A waiting request reached the engine."""
        request = self._requests.get(key)
        if request is None or not request.waiting:
            return
        self._advance(now)
        state = self._classes[request.name]
        state.queued -= request.tokens
        state.pending += request.tokens
        self._pending += request.tokens
        request.waiting = False

    def recount(self, key: K, tokens: int, now: float) -> None:
        """A tracked request's prompt is ``tokens`` long after all: the engine's count, where
        the gate judged on an estimate made before the engine's tokenizer ran."""
        _check_tokens(tokens)
        request = self._requests.get(key)
        if request is None:
            return
        self._advance(now)
        state = self._classes[request.name]
        change = tokens - request.tokens
        if request.waiting:
            state.queued += change
        else:
            state.pending += change
            self._pending += change
        request.tokens = tokens

    def first_token(self, key: K, now: float) -> WaitSample | None:
        """A request's first token: its prompt is prefilled. None if it was not tracked (or its
        first token was counted already)."""
        request = self._requests.get(key)
        if request is None or request.waiting:
            return None
        self._advance(now)
        self._drop(key, request)
        self._meter.prefilled(request.tokens)
        actual = max(0.0, now - request.decided_at)
        self._learn(request, actual)
        return WaitSample(request.name, request.predicted_seconds, actual)

    def _learn(self, request: _Request, actual: float) -> None:
        """Keep how late a first token admitted near its deadline came against the prediction
        before calibration (the calibrated one would chase its own correction)."""
        raw, left = request.raw_seconds, request.deadline_seconds
        if raw is None or left is None or not raw > 0 or left <= 0:
            return
        settings = self.settings
        q = settings.calibration_quantile
        if q is None or raw < settings.calibration_near * left:
            return
        self._lateness.append(actual / raw)
        if len(self._lateness) >= settings.calibration_min_samples:
            ordered = sorted(self._lateness)
            at = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
            self._correction = min(settings.max_correction, max(1.0, ordered[at]))

    def forget(self, key: K, now: float) -> None:
        """A request left before its first token (shed, timed out, failed, its client gone);
        nothing happens if it is not tracked."""
        request = self._requests.get(key)
        if request is None:
            return
        self._advance(now)
        self._drop(key, request)

    def _drop(self, key: K, request: _Request) -> None:
        del self._requests[key]
        state = self._classes[request.name]
        if request.waiting:
            state.queued -= request.tokens
        else:
            state.pending -= request.tokens
            self._pending -= request.tokens

    def _advance(self, now: float) -> None:
        self._meter.advance(now, self._pending > 0)

    def _class(self, name: str) -> _Class:
        try:
            return self._classes[name]
        except KeyError:
            raise ValueError(f"no request class {name!r} in the deadline gate") from None


def _check_tokens(tokens: int) -> None:
    if tokens < 0:
        raise ValueError(f"a prompt cannot have {tokens} tokens")


def class_deadlines(spec: SloSpec, ttft_slo: str | None = None
                    ) -> tuple[ClassDeadline, ...]:
    """Each of the spec's classes with its priority and its threshold for the first-token SLO:
    the spec's ``role: ttft`` SLO (``ttft_slo`` None), none (``""``: no class has a deadline),
    or the latency SLO named (which must exist)."""
    targets = first_token_targets(spec, ttft_slo)
    return tuple(ClassDeadline(c.name, c.priority, targets.get(c.name))
                 for c in spec.classes.classes)


def first_token_targets(spec: SloSpec, ttft_slo: str | None = None) -> Mapping[str, float]:
    """Class name → its first-token target in seconds, read off the first-token SLO (as
    :func:`class_deadlines` picks it); a name that is no latency SLO is a ``ValueError``."""
    slo = pick(spec, ROLE_TTFT, ttft_slo)
    if slo is None:
        return {}
    assert isinstance(slo.sli, LatencySLI)  # roles and pick() admit latency SLOs only
    return spec.classes.thresholds(slo.name, slo.sli.threshold_seconds)
