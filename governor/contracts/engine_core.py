"""What Governor's engine-core method reports of one vLLM engine, declared once for both sides.

:mod:`governor.vllm.plugin` answers inside vLLM's engine-core process; the frontend
(``governor serve``'s vLLM engine, the admin route of stock ``vllm serve``) reads the answer. It
crosses vLLM's process boundary as plain data, so each side goes through this module: the engine
with :meth:`EngineCoreReport.to_dict`, the frontend with :meth:`EngineCoreReport.from_dict`::

    >>> report = EngineCoreReport(pid=4242, dp_rank=0, retuning=RetuningReport(
    ...     "active", BatchingLimits(8, 512), BatchingLimits(16, 2048), admission_cap=8,
    ...     num_running=3, steps_since_change=12, largest_step_tokens_since_change=512))
    >>> EngineCoreReport.from_dict(report.to_dict()) == report
    True
    >>> rank_report(report.to_dict())
    {'dp_rank': 0, 'pid': 4242, 'strategy': 'active', 'max_num_seqs': 8, \
'max_num_batched_tokens': 512, 'admission_cap': 8, 'num_running': 3}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from governor.contracts.batching import BatchingLimits

# The start-up limits, each under its own name beside the limits in force.
CEILING_PREFIX: Final = "ceiling_"

# What each data-parallel rank reports of itself in an admin answer's ``ranks`` list: which
# rank, and what it has in force.
RANK_FIELDS: Final = ("dp_rank", "pid", "strategy", "max_num_seqs", "max_num_batched_tokens",
                      "admission_cap", "num_running")


@dataclass(frozen=True, slots=True)
class RetuningReport:
    """One engine core's batching limits as Governor's plugin moves them."""

    # How the running-request cap is moved: "active" or "running" (governor.vllm.knobs).
    strategy: str
    current: BatchingLimits
    # The start-up limits: neither ever goes above them.
    ceiling: BatchingLimits
    # Above max_num_seqs while the running strategy drains a surplus.
    admission_cap: int
    num_running: int
    # Since the last change: engine steps, and the most tokens one of them scheduled.
    steps_since_change: int
    largest_step_tokens_since_change: int

    def to_dict(self) -> dict[str, Any]:
        ceiling = {CEILING_PREFIX + name: value for name, value in self.ceiling.as_dict().items()}
        return {"strategy": self.strategy, **self.current.as_dict(), **ceiling,
                "admission_cap": self.admission_cap, "num_running": self.num_running,
                "steps_since_change": self.steps_since_change,
                "largest_step_tokens_since_change": self.largest_step_tokens_since_change}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> RetuningReport:
        """The retuning fields of an answer; :class:`ValueError` when one is missing or wrong."""
        counts = _integers(raw, ("admission_cap", "num_running", "steps_since_change",
                                 "largest_step_tokens_since_change"))
        ceiling = {name[len(CEILING_PREFIX):]: raw.get(name) for name in raw
                   if name.startswith(CEILING_PREFIX)}
        return cls(_text(raw, "strategy"), BatchingLimits.from_dict(raw),
                   BatchingLimits.from_dict(ceiling), **counts)


@dataclass(frozen=True, slots=True)
class EngineCoreReport:
    """One engine's answer: which process and data-parallel rank it is, and its retuning
    state, or why it cannot be retuned (``retuning`` None, ``reason`` set)."""

    pid: int
    dp_rank: int
    retuning: RetuningReport | None
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The answer as it crosses the process boundary."""
        identity = {"supported": self.retuning is not None, "pid": self.pid,
                    "dp_rank": self.dp_rank}
        if self.retuning is None:
            return identity | {"reason": self.reason}
        return identity | self.retuning.to_dict()

    @classmethod
    def from_dict(cls, raw: object) -> EngineCoreReport:
        """An answer as the engine sent it; :class:`ValueError` when it is not one."""
        if not isinstance(raw, Mapping):
            raise ValueError(f"an engine-core report must be an object, got {type(raw).__name__}")
        pid, dp_rank = _integers(raw, ("pid", "dp_rank")).values()
        if raw.get("supported") is True:
            return cls(pid, dp_rank, RetuningReport.from_dict(raw))
        if raw.get("supported") is False:
            return cls(pid, dp_rank, None, _text(raw, "reason"))
        raise ValueError(f"'supported' must be true or false, got {raw.get('supported')!r}")

    def rank(self) -> dict[str, Any]:
        """This engine's entry in an admin answer's ``ranks`` list."""
        answer = self.to_dict()
        return {name: answer[name] for name in RANK_FIELDS if name in answer}


def rank_report(answer: object) -> dict[str, Any]:
    """One engine's entry in the ``ranks`` list, from its plugin's answer (``{"error": …}`` when
    it is not a report)."""
    try:
        return EngineCoreReport.from_dict(answer).rank()
    except ValueError:
        return {"error": "no report"}


def _integers(raw: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, int]:
    found = {name: raw.get(name) for name in names}
    wrong = [name for name, value in found.items()
             if not isinstance(value, int) or isinstance(value, bool)]
    if wrong:
        raise ValueError(f"an engine-core report needs integer {', '.join(wrong)}")
    return {name: int(value) for name, value in found.items() if isinstance(value, int)}


def _text(raw: Mapping[str, Any], name: str) -> str:
    value = raw.get(name)
    if not isinstance(value, str):
        raise ValueError(f"an engine-core report needs a string {name}, got {value!r:.80}")
    return value
