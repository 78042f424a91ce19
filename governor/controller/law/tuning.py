"""The decision law's tunables, with their defaults and the reasons for them, in one place."""

from __future__ import annotations

from dataclasses import dataclass, fields


class LawConfigError(ValueError):
    """Every problem with a :class:`LawConfig` at once, one ``"field: what"`` per line."""

    def __init__(self, errors: tuple[str, ...]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


@dataclass(frozen=True, slots=True)
class LawConfig:
    """How :func:`governor.controller.law.decide.decide` moves the knobs.

    The defaults have the shape of feedback control on a shared resource (TCP's additive
    increase, multiplicative decrease; an autoscaler's stabilisation window): tighten at once
    and multiplicatively, relax additively after a stabilisation window with margin, one change
    per cooldown, and a cooldown longer than the observation window so that each verdict sees
    only data from after the change (docs/controller.md).
    """

    # The short PromQL window the tails are computed over.
    observation_window_seconds: float = 30.0
    # The long one (the long-window tail, the P99.9 of the spikes, the queue's slope).
    long_window_seconds: float = 300.0
    # Prometheus's scrape interval (the generated prometheus.yml's): a change shows in the
    # window only after the next scrape.
    scrape_interval_seconds: float = 15.0
    # One change per cooldown; must cover window + scrape so verification sees only new data.
    cooldown_seconds: float = 60.0
    # No relaxation until this long without a breach (HPA's scale-down stabilisation).
    stabilisation_seconds: float = 300.0
    # Relax only while the tail (short and long windows) is below this fraction of the SLO.
    relax_margin: float = 0.8
    # A budget cut aims the prefill spike at this fraction of the SLO.
    aim_fraction: float = 0.75
    # A multiplicative budget cut keeps between these fractions of the current budget.
    min_cut_factor: float = 0.25
    max_cut_factor: float = 0.9
    # Cut used when the spike model has nothing to go on.
    default_cut_factor: float = 0.5
    seqs_cut_factor: float = 0.75
    budget_relax_step: int = 512
    seqs_relax_step: int = 16
    # Budgets are multiples of this (vLLM's step sizes are not sensitive below it).
    budget_quantum: int = 64
    # A change made things better or worse only beyond ±this fraction (noise in the quantile).
    verify_tolerance: float = 0.1
    # The median inter-token latency above this fraction of the SLO means slow decode steps.
    decode_slow_fraction: float = 0.5
    # Prefill work above this fraction of the GPU's time is "prefill pressure".
    prefill_pressure_fraction: float = 0.2
    # Step time per prefill token the law never plans below (Llama-3-8B on an H200,
    # docs/h200-measurements.md: ~25 µs per prompt token in a mixed step); it learns upward from
    # what it observes.
    prefill_seconds_per_token_prior: float = 25e-6
    # A budget cut keeps prefill capacity at least this multiple of the prompt arrival rate.
    # Modest, because the goodput verdict after the cut is the real net, and because the
    # capacity model (median ITL + cost * budget per step) is pessimistic: the median ITL
    # includes delivery, not just the step's fixed part (the H200 preset prefills ~38k tokens/s
    # at 3072 where the model says ~36k). At 1.5 a prompt rate past two thirds of capacity
    # forbade every cut, which left a prefill-heavy phase breaching at 8192 for minutes.
    ttft_headroom: float = 1.1
    kv_high_ratio: float = 0.95
    kv_relax_max_ratio: float = 0.8
    preemptions_per_second_max: float = 0.05
    # How long a value that had to be undone stays off limits, unless the load falls below
    # ``avoid_load_drop`` times the load it was recorded at.
    avoid_seconds: float = 1800.0
    avoid_load_drop: float = 0.7
    # A cut is undone when the estimated good share of demand falls by more than this fraction
    # of itself while time to first token or the queue got worse (what it cost in first tokens
    # outweighed what it bought on decode).
    goodput_tolerance: float = 0.1
    # The waiting queue grows when its slope (long window) exceeds this many requests per
    # second with at least ``queue_min_waiting`` requests waiting.
    queue_growth_per_second: float = 0.05
    queue_min_waiting: float = 4.0
    # Overload: the queue has grown this long at the limits in force, an SLO is missed, and
    # neither a cut nor a relaxation is open (see governor.controller.law.overload).
    overload_seconds: float = 120.0
    # After a budget cut behind a deadline gate that refuses, the law lowers the gate's slack
    # for this long: the gate's measured prefill rate (a half-minute average) has followed
    # the cut by then (governor.controller.law.admission).
    admission_catch_up_seconds: float = 60.0
    # Under overload, a backlog holds every request past its first-token SLO once fewer than
    # this share of first tokens meet it: no request starting now can be good whatever decode
    # does, and only how fast the backlog drains brings goodput back.
    backlog_ttft_share: float = 0.1
    # Per-limits goodput remembered (the most recent), and how close the demand must be for
    # two of them to compare.
    ledger_size: int = 8
    ledger_demand_band: float = 0.3
    # Spikes taller than the SLO cost requests their own P99 before they reach the P99 of all
    # gaps: the law cuts once the share of slow gaps passes this fraction of the allowance
    # (1 - quantile) while the P99.9 shows spikes over the SLO. At 1 that share is the breach
    # itself: no early cut.
    at_risk_share: float = 0.5
    # HPA's tolerance: no scale-out advice while demand is within this fraction of what the
    # replica serves.
    scale_tolerance: float = 0.1

    def __post_init__(self) -> None:
        errors = [*self._positive(), *self._fractions(), *self._ordering()]
        if errors:
            raise LawConfigError(tuple(errors))

    def _positive(self) -> list[str]:
        names = [f.name for f in fields(self) if f.name not in _FRACTIONS | {"at_risk_share"}]
        return [f"{n}: must be positive, got {getattr(self, n)!r}" for n in names
                if not getattr(self, n) > 0]

    def _fractions(self) -> list[str]:
        errors = [f"{n}: must be in (0, 1), got {getattr(self, n)!r}" for n in _FRACTIONS
                  if not 0 < getattr(self, n) < 1]
        if not 0 < self.at_risk_share <= 1:
            errors.append(f"at_risk_share: must be in (0, 1], got {self.at_risk_share!r}")
        return errors

    def _ordering(self) -> list[str]:
        errors = []
        if self.cooldown_seconds <= self.observation_window_seconds + self.scrape_interval_seconds:
            errors.append(
                "cooldown_seconds: must exceed observation_window_seconds + "
                f"scrape_interval_seconds ({self.observation_window_seconds:g} + "
                f"{self.scrape_interval_seconds:g}), got {self.cooldown_seconds:g}: a verdict "
                "would otherwise still see data from before the change"
            )
        if not self.min_cut_factor <= self.default_cut_factor <= self.max_cut_factor:
            errors.append("default_cut_factor: must lie within [min_cut_factor, max_cut_factor]")
        if self.aim_fraction > self.relax_margin:
            errors.append("aim_fraction: must not exceed relax_margin, or a cut lands in a "
                          "region the law would relax out of")
        return errors


_FRACTIONS = frozenset({
    "relax_margin", "aim_fraction", "min_cut_factor", "max_cut_factor", "default_cut_factor",
    "seqs_cut_factor", "verify_tolerance", "decode_slow_fraction", "prefill_pressure_fraction",
    "kv_high_ratio", "kv_relax_max_ratio", "avoid_load_drop", "goodput_tolerance",
    "ledger_demand_band", "scale_tolerance", "backlog_ttft_share",
})
