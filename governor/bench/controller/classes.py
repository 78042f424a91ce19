"""Request classes in the controller benchmark: how a run treats them, and its score per class.

A workload's requests are classified by the spec's classes exactly as the service classifies
them (route, headers, prompt length); the benchmark sends every request as a chat completion
without headers, so here a class is told by prompt length. A run either applies the classes
(``--classes spec``: each class's vLLM priority under the priority policy, and the service's
admission with the per-class limits, through the shared pure policy) or runs the service as it
is without classes (``--classes one``: one class, first come first served, through the same
admission queue) — scored per class either way, each class against its own thresholds::

    plan = ClassPlan.of(spec, itl_slo="inter-token-latency", apply=True)
    scores = class_scores(plan, sim, ids, names, outcomes, keeper, window=20.0, end=2400.0, ...)
    scores["chat"].attainment, scores["doc"].turned_away
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from governor.admission.policy import AdmissionPolicy, ClassLimit
from governor.bench.controller.admission import TURNED_AWAY, Gatekeeper, Limits, deadlines_of
from governor.bench.controller.scoring import (
    RequestOutcome,
    attainment,
    goodput,
    windows_from_times,
)
from governor.bench.controller.workload import Arrival
from governor.contracts.endpoints import CHAT_COMPLETIONS_PATH
from governor.contracts.metrics.service import DEFAULT_CLASS
from governor.inference.engines.settings import SchedulingPolicy
from governor.inference.engines.sim.virtual import VirtualSim
from governor.slo.classes import RequestClass, RequestClasses
from governor.slo.spec import LatencySLI, SloSpec


@dataclass(frozen=True, slots=True)
class ClassTargets:
    itl_seconds: float
    ttft_seconds: float | None


@dataclass(frozen=True)
class ClassPlan:
    classes: RequestClasses
    targets: Mapping[str, ClassTargets]
    limits: Limits = field(default_factory=Limits.service_defaults)
    apply: bool = True  # False: the service without classes (one class, FCFS)
    ttft_seconds: float | None = None  # the first-token SLO's own threshold

    @classmethod
    def of(cls, spec: SloSpec, *, itl_slo: str, ttft_slo: str | None, apply: bool,
           limits: Limits | None = None) -> ClassPlan:
        """The spec's classes, each with its thresholds for the decode and first-token SLOs."""
        itl = _threshold(spec, itl_slo)
        ttft = _threshold(spec, ttft_slo) if ttft_slo else None
        targets = {c.name: ClassTargets(
            c.threshold(itl_slo, itl), None if ttft is None or ttft_slo is None
            else c.threshold(ttft_slo, ttft)) for c in spec.classes.classes}
        return cls(spec.classes, targets, limits or Limits.service_defaults(), apply,
                   None if ttft_slo is None else ttft)

    @property
    def scheduling_policy(self) -> SchedulingPolicy:
        return "priority" if self.apply else "fcfs"

    def classify(self, arrival: Arrival) -> RequestClass:
        """The class a request log recorded, where the spec declares it; else the spec's rules'
        verdict on a chat completion of its prompt length."""
        if arrival.recorded_class in self.classes.names:
            return self.classes.get(arrival.recorded_class)
        return self.classes.classify(CHAT_COMPLETIONS_PATH, {}, arrival.prompt_tokens)

    def observed(self, name: str, itl_seconds: float,
                 ttft_seconds: float | None) -> tuple[bool, bool]:
        """Whether the controller's (inter-token, first-token) queries read a request of class
        ``name``: with classes applied they read only the classes judged at the SLO's own
        threshold; without, the service labels every request alike and they read all."""
        if not self.apply:
            return True, True
        own = self.targets[name]
        return own.itl_seconds == itl_seconds, own.ttft_seconds == ttft_seconds

    def priority(self, name: str) -> int:
        return self.classes.get(name).priority if self.apply else 0

    def gatekeeper(self, class_of: Mapping[str, str], tokens_of: Mapping[str, int] | None = None,
                   *, slack: float | None = None,
                   max_tokens_ahead: int | None = None,
                   calibration: float | None = None) -> Gatekeeper:
        """The service's admission: the classes' own limits, or one class for all; with
        ``slack``, each class's first-token deadline (its own TTFT target), with
        ``max_tokens_ahead`` a static bound on the prompt tokens ahead."""
        if self.apply:
            policy = AdmissionPolicy.of(self.classes, self.limits.max_in_flight,
                                        self.limits.max_queue)
            targets = {name: t.ttft_seconds for name, t in self.targets.items()}
            return Gatekeeper(policy, self.limits.queue_timeout_seconds, class_of, tokens_of,
                              deadlines_of(targets, slack=slack,
                                           max_tokens_ahead=max_tokens_ahead,
                                           calibration=calibration))
        policy = AdmissionPolicy(self.limits.max_in_flight, self.limits.max_queue,
                                 (ClassLimit(DEFAULT_CLASS),))
        # One class for all, judged by the SLO's own threshold.
        return Gatekeeper(policy, self.limits.queue_timeout_seconds,
                          dict.fromkeys(class_of, DEFAULT_CLASS), tokens_of,
                          deadlines_of({DEFAULT_CLASS: self.ttft_seconds}, slack=slack,
                                       max_tokens_ahead=max_tokens_ahead,
                                       calibration=calibration))


def _threshold(spec: SloSpec, name: str) -> float:
    sli = spec.slo(name).sli
    if not isinstance(sli, LatencySLI):
        raise ValueError(f"SLO {name!r} is not a latency SLO")
    return sli.threshold_seconds


@dataclass(frozen=True, slots=True)
class ClassScore:
    requests: int
    served: int
    turned_away: Mapping[str, int]  # reason (shed, queue_full, queue_timeout) → requests
    attainment: float  # windows meeting the class's own thresholds (NaN: none served)
    goodput: float  # requests/s within the class's own thresholds
    ttft_p99: float  # of the requests served (admission wait included)
    itl_p99: float  # over every inter-token gap of the class
    queued: int = 0  # requests that waited for an admission slot (served or not)
    queued_ttft_p99: float = math.nan  # of those that waited and were served

    def as_dict(self) -> dict[str, Any]:
        def rounded(value: float, digits: int) -> float | None:
            return None if math.isnan(value) else round(value, digits)

        return {"requests": self.requests, "served": self.served,
                "turned_away": dict(self.turned_away),
                "attainment": rounded(self.attainment, 4),
                "goodput_rps": round(self.goodput, 3),
                "ttft_p99_s": rounded(self.ttft_p99, 3), "itl_p99_s": rounded(self.itl_p99, 4),
                "queued": self.queued, "queued_ttft_p99_s": rounded(self.queued_ttft_p99, 3)}


def class_scores(plan: ClassPlan, sim: VirtualSim, ids: Sequence[str], names: Sequence[str],
                 outcomes: Sequence[RequestOutcome], keeper: Gatekeeper, *, window: float,
                 end: float, itl_q: float, ttft_q: float) -> dict[str, ClassScore]:
    scores = {}
    for request_class in plan.classes.classes:
        name = request_class.name
        members = [i for i, n in enumerate(names) if n == name]
        records = [sim.record(ids[i]) for i in members]
        served = [r for r in records if r.request_id not in keeper.turned_away]
        targets = plan.targets[name]
        windows = windows_from_times(((r.arrival_time, r.token_times) for r in served),
                                     width=window, end=end, itl_q=itl_q, ttft_q=ttft_q)
        gaps = [np.diff(np.asarray(r.token_times)) for r in served if len(r.token_times) > 1]
        away = [keeper.turned_away[r.request_id] for r in records
                if r.request_id in keeper.turned_away]
        scores[name] = ClassScore(
            len(members), len(served), {reason: away.count(reason) for reason in TURNED_AWAY},
            attainment(windows, itl_slo=targets.itl_seconds, ttft_slo=targets.ttft_seconds)
            if served else math.nan,
            goodput([outcomes[i] for i in members], start=0.0, end=end,
                    itl_slo=targets.itl_seconds, ttft_slo=targets.ttft_seconds),
            _quantile([r.time_to_first_token for r in served if r.token_times], ttft_q),
            _quantile(np.concatenate(gaps) if gaps else [], itl_q),
            sum(r.request_id in keeper.queued for r in records),
            _quantile([r.time_to_first_token for r in served
                       if r.token_times and r.request_id in keeper.queued], ttft_q),
        )
    return scores


def _quantile(values: Sequence[float] | np.ndarray, q: float) -> float:
    data = np.asarray(values, dtype=float)
    return float(np.quantile(data, q)) if data.size else math.nan


class _Scored(Protocol):
    name: str
    classes: dict[str, ClassScore]


def class_report(plan: ClassPlan, runs: Mapping[str, _Scored]) -> dict[str, Any]:
    """The summary's ``classes`` entry: how classes were run, and each run's score per class."""
    return {
        "mode": "spec" if plan.apply else "one",
        "admission": {"max_in_flight": plan.limits.max_in_flight,
                      "max_queue": plan.limits.max_queue,
                      "queue_timeout_s": plan.limits.queue_timeout_seconds},
        "classes": {c.name: {"priority": c.priority if plan.apply else 0,
                             "max_in_flight": c.max_in_flight if plan.apply else None,
                             "itl_s": plan.targets[c.name].itl_seconds,
                             "ttft_s": plan.targets[c.name].ttft_seconds}
                    for c in plan.classes.classes},
        "runs": {key: {name: score.as_dict() for name, score in run.classes.items()}
                 for key, run in runs.items()},
    }


def class_table(plan: ClassPlan, runs: Mapping[str, _Scored]) -> None:
    """Per run and class: served, turned away, attainment and goodput against its thresholds."""
    rows: list[tuple[str, ...]] = [("policy", "class", "served", "full", "deadline", "ahead",
                                    "shed", "late", "timeout", "queued", "its ttft p99",
                                    "attain", "goodput/s", "ttft p99", "itl p99")]
    for run in runs.values():
        for name, s in run.classes.items():
            rows.append((run.name, name, f"{s.served}/{s.requests}",
                         *(str(s.turned_away[reason]) for reason in TURNED_AWAY),
                         str(s.queued), _seconds(s.queued_ttft_p99),
                         "—" if math.isnan(s.attainment) else f"{s.attainment:.1%}",
                         f"{s.goodput:.2f}", _seconds(s.ttft_p99), _seconds(s.itl_p99)))
    width = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    mode = "applied" if plan.apply else "one class (the service without classes)"
    print(f"request classes: {mode}", file=sys.stderr)
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, width, strict=True)), file=sys.stderr)


def _seconds(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:.3g}s"
