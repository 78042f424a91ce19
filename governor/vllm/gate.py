"""Deadline-aware admission in front of stock ``vllm serve``: ``governor serve``'s deadline gate,
fed from what vLLM's API server knows of its own requests.

Off unless ``GOVERNOR_ADMISSION_SLO_FILE`` names a spec (vLLM builds the middleware and the
endpoint plugin with no arguments, so the settings come from the environment, as the admin
route's do)::

    GOVERNOR_ADMISSION_SLO_FILE=/etc/governor/slo.yaml   # classes and the first-token SLO
    GOVERNOR_ADMISSION_TTFT_SLO=ttft                     # optional: that SLO by name
    GOVERNOR_ADMISSION_DEADLINE_SLACK=1.0                # optional: deadline = slack * target
    GOVERNOR_ADMISSION_MAX_TOKENS_AHEAD=32768            # optional: a static bound as well

The decision is :class:`~governor.admission.deadline.DeadlineGate`'s, unchanged: a request is
refused (429, ``Retry-After``) when the prompt tokens ahead of it, and its own, over the
measured prefill rate, outlast its class's first-token deadline. What is ahead, and the rate,
come from vLLM's own bookkeeping of this API server's requests (:mod:`.backlog`), synchronised
by :meth:`GenerationGate.sync`: a request the gate let in counts ahead from its admission, with
its prompt estimated (:mod:`.prompts`); as vLLM takes it in, its count becomes vLLM's; its
first token, as vLLM's output processor sees it, feeds the prefill rate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from governor.admission.deadline import (
    DEFAULT_CALIBRATION_QUANTILE,
    ClassDeadline,
    DeadlineGate,
    DeadlineSettings,
    Judgement,
    WaitSample,
    class_deadlines,
)
from governor.slo.classes import RequestClasses
from governor.slo.model import SpecError
from governor.slo.spec import load_spec
from governor.vllm.backlog import EngineRequest

SPEC_ENV: Final = "GOVERNOR_ADMISSION_SLO_FILE"
TTFT_SLO_ENV: Final = "GOVERNOR_ADMISSION_TTFT_SLO"
SLACK_ENV: Final = "GOVERNOR_ADMISSION_DEADLINE_SLACK"
TOKENS_AHEAD_ENV: Final = "GOVERNOR_ADMISSION_MAX_TOKENS_AHEAD"
CALIBRATION_ENV: Final = "GOVERNOR_ADMISSION_DEADLINE_CALIBRATION"
MAX_BODY_ENV: Final = "GOVERNOR_ADMISSION_MAX_BODY_BYTES"
# The most of a generation request's body the gate reads before it answers 413: a prompt of
# vLLM's longest contexts as text, or as token ids, with room (images inline may need more).
DEFAULT_MAX_BODY_BYTES: Final = 32 * 1024 * 1024


class GateConfigError(ValueError):
    """Settings the gate cannot run with: vLLM must not start with a gate other than asked."""


@dataclass(frozen=True)
class GateSettings:
    classes: RequestClasses
    deadlines: tuple[ClassDeadline, ...]
    deadline: DeadlineSettings = field(default_factory=DeadlineSettings)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> GateSettings | None:
        """The gate's settings, or None when it is off (no spec named); every problem at once
        in one :class:`GateConfigError`."""
        path = env.get(SPEC_ENV, "").strip()
        if not path:
            return None
        problems: list[str] = []
        slack = _number(env, SLACK_ENV, problems)
        bound = _whole(env, TOKENS_AHEAD_ENV, problems)
        calibration = _calibration(env, problems)
        body_bytes = _whole(env, MAX_BODY_ENV, problems, "bytes")
        if body_bytes is not None and body_bytes < 1:
            problems.append(f"{MAX_BODY_ENV} must be at least 1 byte, got {body_bytes}")
        try:
            spec = load_spec(path)
            deadlines = class_deadlines(spec, env.get(TTFT_SLO_ENV, "").strip() or None)
        except (OSError, SpecError, ValueError) as exc:
            problems.append(f"{SPEC_ENV}={path}: {str(exc).strip()}")
        if problems:
            raise GateConfigError("Governor's admission gate: " + "; ".join(problems))
        try:
            settings = DeadlineSettings(slack=1.0 if slack is None else slack,
                                        max_tokens_ahead=bound,
                                        calibration_quantile=calibration)
        except ValueError as exc:
            raise GateConfigError(f"Governor's admission gate: {exc}") from None
        return cls(spec.classes, flattened(deadlines), settings,
                   DEFAULT_MAX_BODY_BYTES if body_bytes is None else body_bytes)


def flattened(deadlines: Sequence[ClassDeadline]) -> tuple[ClassDeadline, ...]:
    """Every class at one rank. ``governor serve`` hands each class's priority to vLLM with the
    request; in front of stock vLLM the gate does not touch the body, so vLLM schedules every
    class as its clients ask (first come, first served by default), and every prompt in it is
    ahead of a newcomer, whatever its class."""
    return tuple(replace(d, priority=0) for d in deadlines)


def _calibration(env: Mapping[str, str], problems: list[str]) -> float | None:
    """The calibration's quantile: the default when unset, ``None`` for ``off``."""
    text = env.get(CALIBRATION_ENV, "").strip()
    if text.lower() == "off":
        return None
    value = _number(env, CALIBRATION_ENV, problems)
    return DEFAULT_CALIBRATION_QUANTILE if value is None and not text else value


def _number(env: Mapping[str, str], name: str, problems: list[str]) -> float | None:
    text = env.get(name, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        problems.append(f"{name} must be a positive number, got {text[:40]!r}")
        return None
    return value


def _whole(env: Mapping[str, str], name: str, problems: list[str], unit: str = "tokens"
           ) -> int | None:
    text = env.get(name, "").strip()
    if not text:
        return None
    if len(text) > 12 or not text.isdigit():
        problems.append(f"{name} must be a whole number of {unit}, got {text[:40]!r}")
        return None
    return int(text)


@dataclass(slots=True)
class _Admitted:
    name: str
    entered: bool = False  # seen in vLLM (its count replaced the estimate)
    done: bool = False  # its first token counted, or it left without one


class GenerationGate:
    """One API server's gate: judges arrivals, follows what it let in through vLLM's states.

    Pure apart from the states it is handed: the clock is every call's ``now``::

        judgement = gate.judge("chat", 812, now, waited=0.004)
        if judgement.admit:
            gate.admit(key, "chat", 812, judgement, now)   # then the request goes to vLLM
        samples = gate.sync(read_states(engine_client), now)   # often; and at every arrival
        gate.disconnected(key, read_states(engine_client), now)   # its client went away
        gate.finish(key, read_states(engine_client), now)  # its response is over

    A request counts ahead from its admission: vLLM tokenizing it is part of its wait.
    """

    def __init__(self, deadlines: Sequence[ClassDeadline],
                 settings: DeadlineSettings | None = None) -> None:
        self.deadline: DeadlineGate[str] = DeadlineGate(deadlines, settings)
        self._admitted: dict[str, _Admitted] = {}

    def __contains__(self, key: str) -> bool:
        return key in self._admitted

    def judge(self, name: str, tokens: int, now: float, *, waited: float) -> Judgement:
        return self.deadline.judge(name, tokens, now, waited=waited)

    def admit(self, key: str, name: str, tokens: int, judgement: Judgement, now: float) -> None:
        """Count a request the gate let in ahead of later ones, on its estimated prompt."""
        self.deadline.track(key, name, tokens, now, waiting=False, judgement=judgement)
        self._admitted[key] = _Admitted(name)

    def sync(self, requests: Sequence[EngineRequest], now: float) -> list[WaitSample]:
        """Bring the backlog in line with vLLM's states: the prompts vLLM has counted, and the
        first tokens that came; returns the predicted and actual wait of each first token.

        A request that left vLLM between two reads, after it was seen there, was finished: its
        prompt was prefilled (one aborted by its client's going away is dropped before vLLM
        learns of it, by :meth:`disconnected`)."""
        found: dict[str, tuple[int, bool]] = {}
        for request in requests:
            tokens, prefilling = found.get(request.key, (0, False))
            found[request.key] = (tokens + request.prompt_tokens,
                                  prefilling or request.prefilling)
        samples: list[WaitSample] = []
        for key, admitted in self._admitted.items():
            state = found.get(key)
            if admitted.done or (state is None and not admitted.entered):
                continue
            if state is not None and not admitted.entered:
                self.deadline.recount(key, state[0], now)
                admitted.entered = True
            if state is None or not state[1]:
                admitted.done = True
                sample = self.deadline.first_token(key, now)
                if sample is not None:
                    samples.append(sample)
        return samples

    def disconnected(self, key: str, requests: Sequence[EngineRequest],
                     now: float) -> list[WaitSample]:
        """The client went away; vLLM, told next, aborts the request if it is still running. One
        still without its first token leaves the backlog unmeasured."""
        samples = self.sync(requests, now)
        admitted = self._admitted.get(key)
        if admitted is not None and not admitted.done:
            admitted.done = True
            self.deadline.forget(key, now)
        return samples

    def finish(self, key: str, requests: Sequence[EngineRequest],
               now: float) -> list[WaitSample]:
        """The request's response is over. One vLLM never showed (refused by vLLM itself, or in
        and out between two reads) leaves the backlog unmeasured: no evidence of its prefill."""
        samples = self.sync(requests, now)
        if self._admitted.pop(key, None) is not None:
            self.deadline.forget(key, now)  # nothing, if its first token was counted
        return samples
