"""One run of the benchmark in virtual time: the sim engine, Prometheus's view of it, and a policy.

A policy is either static limits or the controller's own pure law
(``governor.controller.law.decide.decide``) fed what it would read from Prometheus at that
moment: the scrapes up to then, through the same PromQL windows the controller queries, with the
fast alert evaluated and delivered as Alertmanager would. Decisions take effect in the engine
``actuation_seconds`` later, like a ``PUT``. With request classes (``Scenario.classes``) the
requests pass through the service's admission policy first and carry their class's vLLM
priority (:mod:`governor.bench.controller.classes`), and the run is scored per class too.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from governor.bench.controller.admission import Gatekeeper
from governor.bench.controller.classes import ClassPlan, ClassScore, ClassTargets, class_scores
from governor.bench.controller.monitoring import (
    AlertState,
    Histogram,
    Pipeline,
    Scrapes,
    cumulative_counts,
)
from governor.bench.controller.request_logs import Traffic
from governor.bench.controller.scoring import (
    Episode,
    OverloadEpisode,
    RequestOutcome,
    WindowScore,
    episodes,
    overload_episodes,
    request_tail,
    series_episodes,
    windows_from_times,
)
from governor.bench.controller.workload import Arrival
from governor.contracts.declaration import Metric
from governor.contracts.metrics import service
from governor.contracts.metrics.service import (
    DEFAULT_CLASS,
    REASON_DEADLINE,
    REASON_TOKENS_AHEAD,
)
from governor.controller.law.decide import decide
from governor.controller.law.tuning import LawConfig
from governor.controller.model import (
    Decision,
    Limits,
    Observation,
    SloTargets,
    TargetLimits,
    TargetState,
)
from governor.controller.queries import SPIKE_QUANTILE
from governor.inference.engines.base import BatchingLimits
from governor.inference.engines.settings import EngineSettings
from governor.inference.engines.sim.presets import get_preset
from governor.inference.engines.sim.virtual import VirtualSim
from governor.slo.classes import RequestClasses

PROMPT, GENERATION, PREEMPTIONS = "prompt_tokens", "generation_tokens", "preemptions"
ITL_SUM, ITL_COUNT = "itl_sum", "itl_count"
RUNNING, WAITING, KV = "running", "waiting", "kv"
REFUSED, SLACK = "refused", "slack"
# The gate's refusals the controller reads (governor_admission_rejections_total by reason): at
# arrival, by deadline or bound, as the law's admission knob counts them.
_REFUSALS = (REASON_DEADLINE, REASON_TOKENS_AHEAD)


@dataclass(frozen=True, slots=True)
class Scenario:
    workload: Traffic
    seed: int
    slo: SloTargets
    law: LawConfig
    pipeline: Pipeline
    preset: str = "llama-3-8b@h200"
    window_seconds: float = 20.0  # attainment windows
    short_window_seconds: float = 30.0
    long_window_seconds: float = 300.0
    actuation_seconds: float = 0.1
    # The service's admin floor (``governor serve``'s defaults).
    floor: Limits = field(default_factory=lambda: _service_floor(EngineSettings()))
    # Request classes and the service's admission in front of the engine (None: neither, the
    # engine takes every request as it arrives).
    classes: ClassPlan | None = None
    # The SLIs' histograms as the spec's servers expose them: what Prometheus stores, so the
    # resolution the controller reads the tails at.
    itl_histogram: Histogram = field(
        default_factory=lambda: _histogram(service.INTER_TOKEN_LATENCY))
    ttft_histogram: Histogram = field(
        default_factory=lambda: _histogram(service.TIME_TO_FIRST_TOKEN))


@dataclass(frozen=True, slots=True)
class Admission:
    """The gate a run puts in front of the engine, beside the service's admission queue (the
    request classes' own limits with ``Scenario.classes``, else one class under ``governor
    serve``'s defaults): first-token deadlines at ``slack`` times each class's target, a static
    bound on the prompt tokens ahead, or both (:mod:`governor.admission.deadline`)."""

    slack: float | None = None
    max_tokens_ahead: int | None = None
    # The deadlines' calibration quantile (DeadlineSettings.calibration_quantile); None: off.
    calibration: float | None = None


@dataclass(frozen=True, slots=True)
class Trace:
    """A decision the controller took (holds are not traced), and what woke it."""

    at: float
    decision: Decision
    trigger: str  # "resync" | "alert"


@dataclass
class PolicyRun:
    name: str
    controlled: bool
    start_limits: Limits
    windows: list[WindowScore]
    outcomes: list[RequestOutcome]
    limits: list[tuple[float, Limits]]
    traces: list[Trace]
    # (t, the short-window tail the controller's query returns), every resync interval
    observed: list[tuple[float, float]]
    episodes: list[Episode]  # breach → recovery as the controller's query shows them
    alert_episodes: list[Episode]  # …as the fast alert's expression shows them
    notifications: list[float]  # when Alertmanager's webhook reached the controller
    duration: float
    classes: dict[str, ClassScore] = field(default_factory=dict)  # with Scenario.classes
    # Spans the law judged overloaded, with the replicas it advised (controller runs only).
    overloads: list[OverloadEpisode] = field(default_factory=list)
    admission: Admission | None = None
    # Requests the admission queue never ran, by reason (with classes or an admission gate).
    turned_away: dict[str, int] = field(default_factory=dict)
    # The deadline gate's (predicted, actual) wait for the first token, where it predicted.
    waits: list[tuple[float, float]] = field(default_factory=list)
    # (t, the deadline slack in force from then), with deadlines (the law moves it).
    slacks: list[tuple[float, float]] = field(default_factory=list)


def _histogram(metric: Metric) -> Histogram:
    return Histogram(metric.name, metric.buckets)


def _service_floor(settings: EngineSettings) -> Limits:
    return Limits(settings.min_num_seqs, settings.min_num_batched_tokens)


def ceiling(scenario: Scenario) -> Limits:
    preset = get_preset(scenario.preset)
    return Limits(preset.max_num_seqs, preset.max_num_batched_tokens)


def run(scenario: Scenario, arrivals: list[Arrival], *, name: str,
        static: Limits | None = None, admission: Admission | None = None) -> PolicyRun:
    """Run the whole workload under ``static`` limits, or under the controller when ``None``;
    behind ``admission``'s gate when one is given."""
    top = ceiling(scenario)
    start = static or top
    plan = scenario.classes
    if plan is None and admission is not None:
        plan = _one_class(scenario)
    ids = [f"{a.kind[0]}{i}" for i, a in enumerate(arrivals)]
    names = [plan.classify(a).name for a in arrivals] if plan else []
    gate = admission or Admission()
    keeper = plan.gatekeeper(
        dict(zip(ids, names, strict=True)),
        {rid: a.prompt_tokens for rid, a in zip(ids, arrivals, strict=True)},
        slack=gate.slack, max_tokens_ahead=gate.max_tokens_ahead,
        calibration=gate.calibration) if plan else None
    sim = _sim(scenario, start, keeper)
    for i, (rid, a) in enumerate(zip(ids, arrivals, strict=True)):
        sim.submit(arrival=a.at, prompt=a.prompt_tokens, output_tokens=a.output_tokens,
                   request_id=rid, priority=plan.priority(names[i]) if plan else 0)
    slo = scenario.slo
    observed = {rid: plan.observed(name, slo.itl_seconds, slo.ttft_seconds)
                for rid, name in zip(ids, names, strict=True)} if plan else {}
    loop = _Loop(scenario, sim, ids, arrivals, controlled=static is None,
                 bounds=(scenario.floor, top), observed_classes=observed,
                 keeper=keeper if gate.slack is not None else None)
    loop.drive()
    sim.run_until_idle()
    outcomes = _outcomes(scenario, sim, ids, arrivals)
    by_class = class_scores(
        scenario.classes, sim, ids, names, outcomes, keeper, window=scenario.window_seconds,
        end=scenario.workload.duration_seconds, itl_q=scenario.slo.itl_quantile,
        ttft_q=scenario.slo.ttft_quantile) if scenario.classes and keeper else {}
    away = list(keeper.turned_away.values()) if keeper else []
    return PolicyRun(name, static is None, start, _windows(scenario, sim, ids), outcomes,
               loop.limits, loop.traces, loop.observed,
               series_episodes(loop.observed, scenario.slo.itl_seconds),
               episodes(loop.alert.episodes), loop.alert.notifications,
               scenario.workload.duration_seconds, by_class,
               overload_episodes(loop.advice, scenario.workload.duration_seconds),
               admission, {reason: away.count(reason) for reason in sorted(set(away))},
               keeper.waits if keeper else [], loop.slacks)


def _one_class(scenario: Scenario) -> ClassPlan:
    """``governor serve`` without classes: one class, its default queue, the SLOs' thresholds."""
    slo = scenario.slo
    return ClassPlan(RequestClasses(), {DEFAULT_CLASS: ClassTargets(slo.itl_seconds,
                                                                    slo.ttft_seconds)},
                     apply=False, ttft_seconds=slo.ttft_seconds)


def _sim(scenario: Scenario, start: Limits, keeper: Gatekeeper | None) -> VirtualSim:
    preset = get_preset(scenario.preset)
    if keeper is None:
        return VirtualSim(preset, limits=_batching(start), seed=scenario.seed,
                          record_token_times=True)
    policy = scenario.classes.scheduling_policy if scenario.classes else "fcfs"
    return VirtualSim(preset, limits=_batching(start), seed=scenario.seed,
                      record_token_times=True, policy=policy, gate=keeper.arrive,
                      on_first_token=keeper.first_token, on_finish=keeper.finished)


def _batching(limits: Limits) -> BatchingLimits:
    return BatchingLimits(limits.max_num_seqs, limits.max_num_batched_tokens)


@dataclass
class _Loop:
    scenario: Scenario
    sim: VirtualSim
    ids: list[str]
    arrivals: list[Arrival]
    controlled: bool
    bounds: tuple[Limits, Limits]
    # request id → (read by the inter-token queries?, by the first-token ones?); absent: both
    observed_classes: Mapping[str, tuple[bool, bool]] = field(default_factory=dict)
    # The deadline gate whose slack the law moves (None: no deadline gate).
    keeper: Gatekeeper | None = None
    # (t, the slack in force from then), with a gate
    slacks: list[tuple[float, float]] = field(default_factory=list)
    scrapes: Scrapes = field(init=False)
    alert: AlertState = field(init=False)
    state: TargetState = field(default_factory=TargetState)
    limits: list[tuple[float, Limits]] = field(default_factory=list)
    traces: list[Trace] = field(default_factory=list)
    observed: list[tuple[float, float]] = field(default_factory=list)
    # (t, overloaded?, replicas advised), every pass
    advice: list[tuple[float, bool, int]] = field(default_factory=list)
    _events: list[tuple[float, int, str]] = field(default_factory=list)
    _seq: int = 0
    _next_pass: float = math.inf
    _slack_puts: list[tuple[float, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        p = self.scenario.pipeline
        self.scrapes = Scrapes(self.scenario.itl_histogram.edges,
                               self.scenario.ttft_histogram.edges)
        self.alert = AlertState(p, self.scenario.slo.itl_seconds, self.scenario.slo.itl_quantile)
        self._collector = _Collector(self.sim, self.ids, self.arrivals, self.scrapes,
                                     self.observed_classes, self.keeper)
        if self.keeper is not None:
            self.slacks.append((0.0, self.keeper.gate.settings.slack))
        self.limits.append((0.0, _limits(self.sim)))
        end = self.scenario.workload.duration_seconds
        # The stack is up before the first request: Prometheus holds a scrape of the idle
        # engine, so the first scrape under load already gives a rate (as it would in service).
        self._push(0.0, "scrape")
        self._every(p.scrape_interval_seconds, end, "scrape")
        self._every(p.evaluation_interval_seconds, end, "evaluate")
        self._every(p.resync_seconds, end, "observe")
        if self.controlled:
            self._schedule_pass(p.resync_seconds)

    def _every(self, interval: float, end: float, kind: str) -> None:
        for k in range(1, int(end / interval) + 1):
            self._push(k * interval, kind)

    def _push(self, at: float, kind: str) -> None:
        heapq.heappush(self._events, (at, self._seq, kind))
        self._seq += 1

    def _schedule_pass(self, at: float) -> None:
        self._next_pass = at
        self._push(at, "resync")

    def drive(self) -> None:
        end = self.scenario.workload.duration_seconds
        handlers: dict[str, Callable[[float], None]] = {
            "scrape": self._collector.scrape, "evaluate": self._evaluate,
            "observe": self._observe,
            "resync": self._resync, "alert": self._on_alert, "slack": self._put_slack,
        }
        while self._events and self._events[0][0] <= end:
            at, _, kind = heapq.heappop(self._events)
            self.sim.run_until(at)
            handlers[kind](at)
        self.sim.run_until(end)

    def _observe(self, at: float) -> None:
        self.observed.append((at, self.scrapes.quantile(
            self.scenario.slo.itl_quantile, "itl", at, self.scenario.short_window_seconds)))

    def _evaluate(self, at: float) -> None:
        delivered = self.alert.evaluate(self.scrapes, at)
        if delivered is not None and self.controlled:
            self._push(delivered, "alert")

    def _resync(self, at: float) -> None:
        if at == self._next_pass:  # not a periodic pass the loop has since moved past
            self._pass(at, "resync")

    def _on_alert(self, at: float) -> None:
        self._pass(at, "alert")

    def _set_slack(self, slack: float, at: float) -> None:
        """The slack in force from ``at`` (a ``PUT /admin/admission``): the gate judges every
        arrival from then on by it, as the service's would."""
        self._slack_puts.append((at, slack))
        self._push(at, "slack")

    def _put_slack(self, at: float) -> None:
        keeper = self.keeper
        assert keeper is not None
        _, slack = self._slack_puts.pop(0)
        keeper.gate.set_slack(slack)
        self.slacks.append((at, slack))

    def _pass(self, at: float, trigger: str) -> None:
        """One reconcile, as the real loop runs it; the next periodic one is a resync later."""
        floor, top = self.bounds
        current = TargetLimits(_limits(self.sim), floor, top)
        decision = decide(self.scenario.slo, self.scenario.law, observe(self.scenario,
                          self.scrapes, at), current, self.state, at)
        self.state = decision.state
        self.advice.append((at, decision.state.overload_since is not None,
                            decision.scale.replicas))
        if decision.changes:
            self.sim.set_limits(_batching(decision.after),
                                at=at + self.scenario.actuation_seconds)
            self.limits.append((at + self.scenario.actuation_seconds, decision.after))
        if decision.admission is not None and self.keeper is not None:
            self._set_slack(decision.admission.after, at + self.scenario.actuation_seconds)
        if decision.changes or decision.admission is not None:
            self.traces.append(Trace(at, decision, trigger))
        self._schedule_pass(at + self.scenario.pipeline.resync_seconds)


def _limits(sim: VirtualSim) -> Limits:
    return Limits(sim.limits.max_num_seqs, sim.limits.max_num_batched_tokens)


def observe(scenario: Scenario, scrapes: Scrapes, at: float) -> Observation:
    """What ``governor.controller.queries`` would return at ``at`` — the same windows and
    aggregations. The simulated engine is one engine (``engine="0"``, as the sim labels its
    series), so the observation names no data-parallel rank (``governor.controller.ranks``)."""
    slo, short, long = scenario.slo, scenario.short_window_seconds, scenario.long_window_seconds
    return Observation(
        itl_tail_seconds=scrapes.quantile(slo.itl_quantile, "itl", at, short),
        itl_median_seconds=scrapes.quantile(0.5, "itl", at, short),
        itl_tail_long_seconds=scrapes.quantile(slo.itl_quantile, "itl", at, long),
        itl_spike_seconds=scrapes.quantile(SPIKE_QUANTILE, "itl", at, long),
        itl_mean_seconds=_ratio(scrapes.rate(ITL_SUM, at, short),
                                scrapes.rate(ITL_COUNT, at, short)),
        ttft_tail_seconds=scrapes.quantile(slo.ttft_quantile, "ttft", at, short),
        prompt_tokens_per_second=scrapes.rate(PROMPT, at, short),
        generation_tokens_per_second=scrapes.rate(GENERATION, at, short),
        requests_running=scrapes.gauge(RUNNING, at),
        requests_waiting=scrapes.gauge(WAITING, at),
        waiting_growth_per_second=scrapes.deriv(WAITING, at, long),
        kv_cache_usage_ratio=scrapes.gauge(KV, at),
        preemptions_per_second=scrapes.rate(PREEMPTIONS, at, long),
        # Without a TTFT SLO the controller sends no TTFT query at all.
        ttft_good_per_second=(scrapes.bucket_rate("ttft", slo.ttft_seconds, at, short)
                              if slo.ttft_seconds is not None else None),
        ttft_per_second=(scrapes.bucket_rate("ttft", math.inf, at, short)
                         if slo.ttft_seconds is not None else None),
        itl_good_ratio=_ratio(scrapes.bucket_rate("itl", slo.itl_seconds, at, short),
                              scrapes.bucket_rate("itl", math.inf, at, short)),
        # Only a deadline gate exposes its slack; without one both read as absent.
        deadline_slack=_present(scrapes.gauge(SLACK, at)),
        admission_refused_per_second=(scrapes.rate(REFUSED, at, short)
                                      if _present(scrapes.gauge(SLACK, at)) else None),
    )


def _present(value: float) -> float | None:
    return value if math.isfinite(value) and value > 0 else None


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else math.nan


class _Collector:
    """Scrapes the engine: new inter-token and first-token samples since the last scrape."""

    def __init__(self, sim: VirtualSim, ids: list[str], arrivals: list[Arrival],
                 scrapes: Scrapes, observed: Mapping[str, tuple[bool, bool]],
                 keeper: Gatekeeper | None = None) -> None:
        self._sim, self._ids, self._arrivals, self._scrapes = sim, ids, arrivals, scrapes
        self._keeper = keeper
        self._observed = observed  # classes the controller's queries do not read are skipped
        self._next = 0  # index of the first request not yet arrived
        self._active: dict[str, int] = {}  # request id → tokens already counted
        self._itl = np.zeros(len(scrapes.itl_edges) + 1)
        self._ttft = np.zeros(len(scrapes.ttft_edges) + 1)
        self._itl_sum = 0.0

    def scrape(self, at: float) -> None:
        while self._next < len(self._ids) and self._arrivals[self._next].at <= at:
            self._active[self._ids[self._next]] = 0
            self._next += 1
        itl: list[float] = []
        ttft: list[float] = []
        for rid, counted in list(self._active.items()):
            record = self._sim.record(rid)
            times = record.token_times
            upto = bisect_right(times, at)
            if upto > counted:
                reads_itl, reads_ttft = self._observed.get(rid, (True, True))
                if counted == 0 and reads_ttft:
                    ttft.append(times[0] - record.arrival_time)
                if reads_itl:
                    itl.extend(np.diff(times[max(counted - 1, 0):upto]).tolist())
                self._active[rid] = upto
            if record.finish_reason is not None and upto == len(times):
                del self._active[rid]
        self._itl_sum += float(np.sum(itl))
        self._itl += np.diff(cumulative_counts(np.asarray(itl), self._scrapes.itl_edges),
                             prepend=0.0)
        self._ttft += np.diff(cumulative_counts(np.asarray(ttft), self._scrapes.ttft_edges),
                              prepend=0.0)
        counters, last = self._sim.counters, self._sim.steps[-1] if self._sim.steps else None
        keeper = self._keeper
        refused = 0.0 if keeper is None else float(
            sum(1 for r in keeper.turned_away.values() if r in _REFUSALS))
        self._scrapes.add(
            at, np.cumsum(self._itl), np.cumsum(self._ttft),
            {PROMPT: float(counters.prompt_tokens), GENERATION: float(counters.generation_tokens),
             PREEMPTIONS: float(counters.preemptions), ITL_SUM: self._itl_sum,
             ITL_COUNT: float(np.sum(self._itl)), REFUSED: refused},
            {RUNNING: float(last.num_running) if last else 0.0,
             WAITING: float(last.num_waiting) if last else 0.0,
             KV: float(last.kv_usage) if last else 0.0,
             SLACK: keeper.gate.settings.slack if keeper is not None else 0.0},
        )


def _windows(scenario: Scenario, sim: VirtualSim, ids: list[str]) -> list[WindowScore]:
    """Exact per-window tails over every sample the run emitted (ground truth, not Prometheus)."""
    records = (sim.record(rid) for rid in ids)
    return windows_from_times(((r.arrival_time, r.token_times) for r in records),
                              width=scenario.window_seconds,
                              end=scenario.workload.duration_seconds,
                              itl_q=scenario.slo.itl_quantile, ttft_q=scenario.slo.ttft_quantile)


def _outcomes(scenario: Scenario, sim: VirtualSim, ids: list[str],
              arrivals: list[Arrival]) -> list[RequestOutcome]:
    out = []
    for rid, arrival in zip(ids, arrivals, strict=True):
        record = sim.record(rid)
        times = record.token_times
        ttft = times[0] - record.arrival_time if times else math.nan
        out.append(RequestOutcome(arrival.at, arrival.kind, ttft,
                                  request_tail(times, scenario.slo.itl_quantile),
                                  record.finish_reason is not None))
    return out
