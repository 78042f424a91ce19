"""The controller's plain data: limits, observations, per-target state and decisions.

Everything here is a frozen dataclass or an enum; the law (:mod:`governor.controller.law`) is a
pure function over them, and :mod:`governor.controller.state` turns them into JSON and back.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Final

from governor.contracts.batching import BatchingLimits, BatchingReport
from governor.contracts.batching import Param as Param  # the knobs, as the controller names them
from governor.contracts.metrics.controller import (
    SCALE_CAPACITY,
    SCALE_NOT_OVERLOADED,
    SCALE_OVERLOAD,
    SCALE_WITHIN_TOLERANCE,
)
from governor.contracts.stages import FIRST_TOKEN
from governor.slo.autoscaling_fields import MAX_REPLICAS

# The admin API's shapes, under the names the law speaks: the limits of one target, and what its
# GET reports (the limits in force with their floor and ceiling).
Limits = BatchingLimits
TargetLimits = BatchingReport


class Action(enum.StrEnum):
    HOLD = "hold"
    TIGHTEN = "tighten"
    RELAX = "relax"
    UNDO = "undo"


class Reason(enum.StrEnum):
    """Why the law decided what it did; each value is a label of ``decisions_total``."""

    MISSING_DATA = "missing_data"  # an input is absent or NaN: never act blind
    COOLDOWN = "cooldown"  # the last change is not yet visible in the observation window
    WITHIN_SLO = "within_slo"  # inside the dead band: no reason to move
    WAITING_FOR_STABILITY = "waiting_for_stability"  # under the SLO, but not for long enough
    ITL_BREACH = "itl_breach"  # inter-token latency tail above its SLO: cut the budget
    ITL_AT_RISK = "itl_at_risk"  # under the SLO's quantile, but spikes over the SLO already
    # cost requests their own quantile: cut the budget to bring the spikes under it
    DECODE_SLOW = "decode_slow"  # the median step is slow without prefill pressure: cut seqs
    NOT_IN_ENGINE = "not_in_engine"  # the breach sits in the service's own stages (the
    # tokenizer, a slow reader), which no batching limit moves: hold
    NON_MONOTONIC = "non_monotonic"  # a cut made the tail worse; a deeper cut clears the spikes
    CUT_MADE_WORSE = "cut_made_worse"  # a cut made the tail worse and cannot be deepened: undo
    RELAX_BREACHED = "relax_breached"  # a relaxation brought the breach back: undo it
    TTFT_REGRESSION = "ttft_regression"  # a cut broke time to first token: give half of it back
    TTFT_BREACH = "ttft_breach"  # time to first token above its SLO with decode margin: relax
    PREEMPTIONS = "preemptions"  # the engine preempts requests: fewer sequences
    KV_PRESSURE = "kv_pressure"  # the KV cache is nearly full: fewer sequences
    STABLE = "stable"  # under the SLO with margin for the stabilisation window: relax a step
    QUEUE_GROWING = "queue_growing"  # never relax while the waiting queue grows
    RELAX_BLOCKED = "relax_blocked"  # a relaxation was undone here at this load, or the model
    # predicts it would breach
    OUTSIDE_BATCHING = "outside_batching"  # the verdict names a cause no batching limit fixes
    # (a throttled, shared or faulty GPU, a saturated link, the service's own stages): hold
    AWAITING_VERDICT = "awaiting_verdict"  # a new inter-token breach the rules have yet to judge
    CAPACITY = "capacity"  # the verdict names demand or the GPU's saturation by the engine's own
    # work: hold the limits and raise the scale-out signal
    AT_FLOOR = "at_floor"  # breaching, but both knobs are at their floors
    AT_CEILING = "at_ceiling"  # nothing left to relax
    TTFT_GUARD = "ttft_guard"  # a budget cut would starve prefill (TTFT); seqs are at floor
    GOODPUT_REGRESSION = "goodput_regression"  # a cut cost more first tokens or queue than it
    # bought on decode: undo it
    GOODPUT_GUARD = "goodput_guard"  # breaching, but a cut here was undone for costing goodput
    OVERLOAD = "overload"  # the queue grows whatever the limits: hold the best limits seen
    BACKLOG = "backlog"  # overloaded, and the backlog holds every first token past its SLO:
    # the budget that prefills fastest drains it soonest
    START_LIMITS = "start_limits"  # the first pass for a target without state: the limits
    # of --start-limits (governor recommend's), within its floor and ceiling


# ScaleAdvice reasons (values of the ``reason`` label of ``desired_replicas``).
NOT_OVERLOADED = SCALE_NOT_OVERLOADED
OVERLOADED = SCALE_OVERLOAD
WITHIN_TOLERANCE = SCALE_WITHIN_TOLERANCE
CAPACITY_VERDICT = SCALE_CAPACITY


class ChangeKind(enum.StrEnum):
    TIGHTEN = "tighten"
    RELAX = "relax"
    UNDO = "undo"


@dataclass(frozen=True, slots=True)
class Target:
    """An inference instance: its Prometheus ``instance`` label and its base URL."""

    name: str
    url: str


@dataclass(frozen=True, slots=True)
class SloTargets:
    """The thresholds the law keeps, from ``slo.yaml``.

    ``itl_quantile`` 0.99 with ``itl_seconds`` 0.12 reads "99% of inter-token latencies are at
    most 120 ms"; the law compares the observed 0.99 quantile to 0.12 s.
    """

    itl_seconds: float
    itl_quantile: float
    ttft_seconds: float | None = None
    ttft_quantile: float = 0.99


@dataclass(frozen=True, slots=True)
class Observation:
    """One target's recent behaviour, as Prometheus reports it (``None``: no data).

    The tails are the SLO quantiles (``SloTargets.itl_quantile``), over the short window unless
    named ``_long``.
    """

    itl_tail_seconds: float | None
    itl_median_seconds: float | None
    itl_tail_long_seconds: float | None = None
    itl_mean_seconds: float | None = None
    # The 0.999 quantile over the long window: the height of prefill steps once they are at
    # least 0.1% of steps (the P99 shows them only above 1%).
    itl_spike_seconds: float | None = None
    ttft_tail_seconds: float | None = None
    prompt_tokens_per_second: float | None = None
    generation_tokens_per_second: float | None = None
    requests_running: float | None = None
    requests_waiting: float | None = None
    waiting_growth_per_second: float | None = None
    kv_cache_usage_ratio: float | None = None
    preemptions_per_second: float | None = None
    # Good events at the SLO thresholds (the histograms have buckets there), short window:
    # first tokens per second within the TTFT threshold, first tokens per second in all (the
    # rate requests start being served), and the share of inter-token gaps within the ITL
    # threshold. Together they estimate goodput (see :mod:`governor.controller.law.goodput`).
    ttft_good_per_second: float | None = None
    ttft_per_second: float | None = None
    itl_good_ratio: float | None = None
    # Where the service's requests spend their time: median seconds per request in each stage
    # (governor.contracts.stages, by label value) over the short window and the long one.
    stage_seconds: Mapping[str, float] = field(default_factory=dict)
    stage_seconds_long: Mapping[str, float] = field(default_factory=dict)
    # The tail of the engine's stages before the first token, short window: at most how long
    # each one takes at the quantile that makes their sum bound the TTFT SLO's
    # (governor.controller.queries.engine_stage_quantile), the top of the bucket holding it.
    stage_tail_seconds: Mapping[str, float] = field(default_factory=dict)
    # The engine's own inter-token gaps (vLLM's histogram, the engine's clock), the worst
    # rank's: at most how long at the ITL SLO's quantile over the short window, and at the
    # spikes' quantile (0.999) over the long one. ``None`` where the SLI is that histogram.
    itl_engine_tail_seconds: float | None = None
    itl_engine_spike_seconds: float | None = None
    # Under data parallelism (two ranks or more, by vLLM's ``engine`` label): the rank whose
    # numbers these are, the worst one (governor.controller.ranks), and each rank's inter-token
    # tail. ``None`` and empty with one engine, or series that name no rank.
    rank: str | None = None
    rank_itl_tails: Mapping[str, float | None] = field(default_factory=dict)
    # The verdict of the generated rules for the decode SLO and the TTFT SLO while they burn on
    # this target: each cause's share of the breach (governor.contracts.causes). Empty while the
    # SLO does not burn, or where the rules are not loaded.
    itl_causes: Mapping[str, float] = field(default_factory=dict)
    ttft_causes: Mapping[str, float] = field(default_factory=dict)
    # The GPU's conditions on the target's node as the rules record them, whether or not an SLO
    # burns yet: gpu_throttled, gpu_shared, interconnect → how much slower the steps run;
    # gpu_fault → events in the window.
    gpu_conditions: Mapping[str, float] = field(default_factory=dict)
    # The generated rules' burn ratio of the decode SLO on this target (its error ratio over
    # the short window, over the error budget): present wherever the rules judge the target,
    # burning or not. ``None`` where they are not loaded, or see too few events.
    itl_verdict_burn: float | None = None
    # The target's deadline gate (governor serve --deadlines, or the gate in front of stock
    # vLLM): the slack in force (``None``: no gate reports one) and the requests it refuses at
    # arrival per second, by deadline or bound, over the short window.
    deadline_slack: float | None = None
    admission_refused_per_second: float | None = None
    # vLLM's own bound on the prompt tokens in prefill (max_num_queued_tokens), as the gate in
    # front of stock vLLM reports it: ``None`` where the target has none to move (no gate, or a
    # vLLM before 0.32), +Inf while it is unbounded.
    vllm_max_num_queued_tokens: float | None = None
    # The readings refused where they entered (governor.controller.observe: outside the admin
    # API's contract, or past any measurement): field → why. A refused reading is ``None``
    # above, and the law neither moves its knob nor forgets the value it would hand back.
    refused: Mapping[str, str] = field(default_factory=dict)

    @property
    def ttft_engine_tail_seconds(self) -> float | None:
        """At most how long the engine's stages before the first token take together at the
        TTFT SLO's quantile: the sum of :attr:`stage_tail_seconds` (``None`` without a reading
        of each of them)."""
        tails = [_finite(self.stage_tail_seconds.get(stage.value))
                 for stage in FIRST_TOKEN.engine]
        return None if None in tails else sum(tail for tail in tails if tail is not None)

    def as_inputs(self) -> dict[str, float | None]:
        """The observation as the audit log prints it (NaN shown as ``None``); the stages as
        each one's growth from the long window to the short one, and the engine's stages
        before the first token as their tail together; each rank's tail."""
        inputs = {f.name: _finite(getattr(self, f.name)) for f in fields(self)
                  if f.name not in MAPPED_FIELDS}
        inputs[TTFT_ENGINE_TAIL_INPUT] = self.ttft_engine_tail_seconds
        for stage, seconds in sorted(self.stage_seconds.items()):
            before = self.stage_seconds_long.get(stage)
            inputs[f"{STAGE_GROWTH_INPUT}.{stage}"] = \
                None if before is None else _finite(seconds - before)
        for rank, tail in self.rank_itl_tails.items():
            inputs[f"{RANK_TAIL_INPUT}.{rank}"] = _finite(tail)
        for name in sorted(CAUSE_FIELDS):
            for cause, share in sorted(getattr(self, name).items()):
                inputs[f"{name}.{cause}"] = _finite(share)
        return inputs

    def ranks(self) -> dict[str, object] | None:
        """The judged rank and every rank's tail, as the audit line and /status show them
        (``None``: one engine)."""
        if self.rank is None:
            return None
        return {"judged": self.rank, "of": len(self.rank_itl_tails),
                "itl_tail_seconds": {r: _finite(t) for r, t in self.rank_itl_tails.items()}}


# The observation's fields that map stages to seconds (the others are single numbers).
STAGE_FIELDS = frozenset(("stage_seconds", "stage_seconds_long", "stage_tail_seconds"))
STAGE_GROWTH_INPUT = "stage_growth_seconds"
TTFT_ENGINE_TAIL_INPUT = "ttft_engine_tail_seconds"
# The fields that say which data-parallel rank the numbers are, and each rank's tail.
RANK_FIELDS = frozenset(("rank", "rank_itl_tails"))
RANK_TAIL_INPUT = "itl_tail_seconds.rank"
# The fields that carry the verdict: cause → share of the breach.
CAUSE_FIELDS = frozenset(("itl_causes", "ttft_causes", "gpu_conditions"))
# The readings refused by the contract's bounds: field → why.
REFUSED_FIELD = "refused"
MAPPED_FIELDS = STAGE_FIELDS | RANK_FIELDS | CAUSE_FIELDS | {REFUSED_FIELD}
# The two readings the law keeps in its memory and puts back to the target (each checked
# against the admin API's contract where it enters, governor.controller.observe.BOUNDED): the
# gate's deadline slack and vLLM's own bound on queued prompt tokens.
SLACK_FIELD: Final = "deadline_slack"
QUEUED_TOKENS_FIELD: Final = "vllm_max_num_queued_tokens"


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def finite(value: float | None) -> float | None:
    """``value`` if it is a real number, else ``None`` (NaN and ±Inf count as missing)."""
    return _finite(value)


@dataclass(frozen=True, slots=True)
class Probe:
    """A change whose effect the next observation after the cooldown must confirm."""

    kind: ChangeKind
    param: Param
    before: Limits
    after: Limits
    at: float
    itl_tail_before: float
    ttft_tail_before: float | None
    # What the change is judged against besides the tail (``None``: not observed, or written
    # by a controller that did not record it): the estimated good share of demand, the share
    # of first tokens within the TTFT SLO, and the waiting queue.
    good_share_before: float | None = None
    ttft_share_before: float | None = None
    waiting_before: float | None = None
    prompt_rate_before: float | None = None


@dataclass(frozen=True, slots=True)
class LimitsScore:
    """What the law saw while ``limits`` were in force: an average of the estimated goodput
    (good requests/s), its share of demand, and the demand, last updated ``at``."""

    limits: Limits
    good_per_second: float
    good_share: float
    demand_per_second: float
    at: float
    samples: int = 1


def replicas_for(demand: float, served: float) -> float:
    """The demand in replicas' worth of what one replica served (``served`` > 0), at most the
    most replicas a spec may name: a replica that served next to nothing (an engine stalled, a
    first second of data) asks for the largest fleet anyone can run, not for 10**9 replicas."""
    return min(demand / served, float(MAX_REPLICAS))


@dataclass(frozen=True, slots=True)
class ScaleAdvice:
    """How many replicas this target's demand needs, by what it served (HPA's
    ``ceil(current * metric / target)`` with one replica per target); 1 while not overloaded."""

    replicas: int
    reason: str
    demand_per_second: float | None = None
    served_per_second: float | None = None

    @property
    def replicas_needed(self) -> float:
        """The demand in replicas' worth, not rounded: ``demand / served`` while overloaded,
        else ``replicas``. The scale-out gauge carries it, so that the sum over the targets,
        rounded up once by the autoscaler (HPA's ``ceil(current * metric / target)`` over the
        whole fleet), counts every replica's capacity: two replicas overloaded by half ask for
        three, where each rounded up alone would ask for four."""
        served, demand = self.served_per_second, self.demand_per_second
        if self.reason != OVERLOADED or not served or demand is None:
            return float(self.replicas)
        return replicas_for(demand, served)


@dataclass(frozen=True, slots=True)
class Avoid:
    """Values of ``param`` in ``[low, high]`` the law will not move into while load stays high.

    Recorded when a change into that range was undone; it expires at ``until`` or as soon as the
    load (prompt tokens/s for the budget, running requests for seqs) falls well below ``load``.
    """

    param: Param
    low: int
    high: int
    until: float
    load: float

    def blocks(self, value: int) -> bool:
        return self.low <= value <= self.high


@dataclass(frozen=True, slots=True)
class TargetState:
    """What the controller remembers about one target across reconciles and restarts."""

    limits: Limits | None = None  # what the controller last set (to notice external changes)
    last_change_at: float | None = None
    last_breach_at: float | None = None
    # When the inter-token trouble in progress began (a breach after a quiet spell).
    breach_began_at: float | None = None
    probe: Probe | None = None
    avoid: tuple[Avoid, ...] = ()
    # Seconds of step time per prefill token, learnt from breaches (controller/law/spike.py).
    prefill_seconds_per_token: float | None = None
    # Goodput observed per limits (the few most recent), to hold the best under overload.
    ledger: tuple[LimitsScore, ...] = ()
    # Since when the queue has grown at the limits in force (``None``: it does not).
    queue_growing_since: float | None = None
    # Since when the law judges the target overloaded (no limits meet both SLOs).
    overload_since: float | None = None
    # The budget in force before the law raised it to drain a backlog (``None``: no drain), so
    # that it hands that budget back as the backlog ends.
    drain_from: int | None = None
    # The deadline slack in force before the law lowered it for a budget cut (``None``: the
    # law holds no lowered slack), and when it lowered it, to hand it back.
    slack_from: float | None = None
    slack_since: float | None = None
    # vLLM's max_num_queued_tokens before the law set it (``None``: unbounded), while the law
    # holds it set (``queued_tokens_held``), to hand it back when the overload ends.
    queued_tokens_held: bool = False
    queued_tokens_from: int | None = None


@dataclass(frozen=True, slots=True)
class AdmissionChange:
    """A move of the target's deadline slack (``PUT /admin/admission``), and why."""

    before: float
    after: float
    explanation: str


@dataclass(frozen=True, slots=True)
class QueuedTokensChange:
    """A move of vLLM's own ``max_num_queued_tokens`` (``PUT /admin/admission``; ``None``:
    unbounded), and why."""

    before: int | None
    after: int | None
    explanation: str


@dataclass(frozen=True, slots=True)
class Decision:
    """The law's verdict for one target, explainable from itself alone."""

    action: Action
    reason: Reason
    before: Limits
    after: Limits
    explanation: str
    state: TargetState  # the state to keep once ``after`` is in force
    inputs: Mapping[str, float | None] = field(default_factory=dict)
    scale: ScaleAdvice = field(default_factory=lambda: ScaleAdvice(1, NOT_OVERLOADED))
    # The admission knob: a new deadline slack for the target's gate (``None``: leave it).
    admission: AdmissionChange | None = None
    # vLLM's own bound on the prompt tokens in prefill (``None``: leave it).
    queued_tokens: QueuedTokensChange | None = None

    @property
    def changes(self) -> bool:
        return self.before != self.after
