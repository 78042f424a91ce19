"""The law's view of one target at one moment, and the arithmetic its rules share.

Private to the decision law (:mod:`.decide`, :mod:`.relax` and the rules beside them): a
:class:`Context` bundles the SLO, the tunables, the observation, the target's limits and state, and
the time, and builds the law's verdicts (holds and changes) with their explanations.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, replace

from governor.controller.law import goodput, spike
from governor.controller.law.tuning import LawConfig
from governor.controller.model import (
    Action,
    Avoid,
    ChangeKind,
    Decision,
    Limits,
    Observation,
    Param,
    Probe,
    Reason,
    SloTargets,
    TargetLimits,
    TargetState,
    finite,
)

BUDGET = Param.MAX_NUM_BATCHED_TOKENS
SEQS = Param.MAX_NUM_SEQS
_MEDIAN = 0.5


@dataclass(frozen=True, slots=True)
class Context:
    slo: SloTargets
    tuning: LawConfig  # the law's tunables
    obs: Observation
    target: TargetLimits
    state: TargetState
    now: float

    # -- readings ------------------------------------------------------------------------------
    @property
    def limits(self) -> Limits:
        return self.target.current

    @property
    def tail(self) -> float | None:
        return finite(self.obs.itl_tail_seconds)

    @property
    def median(self) -> float | None:
        return finite(self.obs.itl_median_seconds)

    @property
    def ttft(self) -> float | None:
        return finite(self.obs.ttft_tail_seconds)

    @property
    def prompt_rate(self) -> float | None:
        return finite(self.obs.prompt_tokens_per_second)

    @property
    def itl_breach(self) -> bool:
        return self.tail is not None and self.tail > self.slo.itl_seconds

    @property
    def itl_at_risk(self) -> bool:
        """Under the SLO's quantile, but spikes over the SLO already cost requests: their share
        of gaps passed ``at_risk_share`` of the allowance, and the P99.9 is over the SLO. A
        request near a document's prefill sees several of those spikes among a few hundred
        gaps, so its own P99 fails while the P99 of all gaps still passes."""
        good, spike_height = finite(self.obs.itl_good_ratio), finite(self.obs.itl_spike_seconds)
        if self.itl_breach or good is None or spike_height is None:
            return False
        allowance = 1.0 - self.slo.itl_quantile
        return 1.0 - good > self.tuning.at_risk_share * allowance and \
            spike_height > self.slo.itl_seconds

    @property
    def itl_trouble(self) -> bool:
        """A breach of the inter-token SLO, or spikes that already cost requests theirs."""
        return self.itl_breach or self.itl_at_risk

    @property
    def preempting(self) -> bool:
        """The engine preempts requests and its KV cache is still full. The rate is the long
        window's: with room in the cache now, it is not preempting any more."""
        preemptions, kv = finite(self.obs.preemptions_per_second), \
            finite(self.obs.kv_cache_usage_ratio)
        return preemptions is not None and preemptions > self.tuning.preemptions_per_second_max \
            and (kv is None or kv > self.tuning.kv_relax_max_ratio)

    @property
    def ttft_breach(self) -> bool:
        return (self.slo.ttft_seconds is not None and self.ttft is not None
                and self.ttft > self.slo.ttft_seconds)

    @property
    def good(self) -> float | None:
        """Estimated good requests per second (``None``: no first-token reading)."""
        obs = self.obs
        first = finite(obs.ttft_good_per_second) if self.slo.ttft_seconds is not None \
            else finite(obs.ttft_per_second)
        if first is None:
            return None
        return goodput.good_per_second(ttft_good=first, itl_good_ratio=finite(
            obs.itl_good_ratio), quantile=self.slo.itl_quantile)

    @property
    def itl_pass_share(self) -> float | None:
        """Estimated share of requests whose own inter-token quantile meets the SLO (``None``:
        no reading of the share of gaps within it)."""
        good = finite(self.obs.itl_good_ratio)
        return None if good is None else goodput.itl_pass_share(good, self.slo.itl_quantile)

    @property
    def demand(self) -> float | None:
        """Requests per second arriving: first tokens served plus the queue's growth."""
        served = finite(self.obs.ttft_per_second)
        if served is None:
            return None
        return goodput.demand_per_second(ttft_all=served,
                                         waiting_growth=finite(self.obs.waiting_growth_per_second))

    @property
    def good_share(self) -> float | None:
        good, demand = self.good, self.demand
        return None if good is None or demand is None else goodput.share(good, demand)

    @property
    def ttft_share(self) -> float | None:
        """Share of first tokens within the TTFT SLO (``None``: no TTFT SLO or no first token)."""
        good, served = finite(self.obs.ttft_good_per_second), finite(self.obs.ttft_per_second)
        if self.slo.ttft_seconds is None or good is None or not served:
            return None
        return min(1.0, good / served)

    @property
    def first_tokens_late(self) -> bool:
        """The median first token misses the TTFT SLO (fewer than half meet it): a backlog past
        the SLO, where how fast prefill runs decides when first tokens are in time again."""
        share = self.ttft_share
        return share is not None and share < _MEDIAN

    @property
    def waiting(self) -> float | None:
        return finite(self.obs.requests_waiting)

    @property
    def queue_growing(self) -> bool:
        """A backlog that keeps growing: the engine serves less than arrives at these limits."""
        growth, waiting = finite(self.obs.waiting_growth_per_second), self.waiting
        return (growth is not None and growth > self.tuning.queue_growth_per_second
                and waiting is not None and waiting >= self.tuning.queue_min_waiting)

    @property
    def window_is_clean(self) -> bool:
        """The short window holds only data from the limits in force."""
        last = self.state.last_change_at
        return last is None or self.now - last >= (self.tuning.observation_window_seconds
                                                   + self.tuning.scrape_interval_seconds)

    @property
    def cost(self) -> float:
        """Step time per prefill token: what was learnt, but never below the configured floor.

        Both readings (the tail of a breach, the mean against the median) come out low when
        the engine hides part of a chunk under the decode step's memory time; a cut planned on
        them lands near the SLO instead of at the aim. The floor is the measured cost of the
        deployment's model and GPU; learning can only raise it.
        """
        return max(self.learnt_cost, self.spike_cost or 0.0)

    @property
    def learnt_cost(self) -> float:
        """What was learnt from the mean against the median, never below the configured floor;
        without the P99.9's reading, which the tallest steps' own decode load inflates."""
        return max(self.tuning.prefill_seconds_per_token_prior,
                   self.state.prefill_seconds_per_token or 0.0)

    @property
    def spike_cost(self) -> float | None:
        """The cost the tallest frequent steps (the P99.9) imply at the budget in force: a step
        carries at most a budget's worth of prefill, so it is a lower bound, holds and mixed
        step overheads included. Unlike the learnt average it cannot be washed out by readings
        of the mean, so a relaxation stops where those steps would near the SLO again."""
        height = finite(self.obs.itl_spike_seconds)
        last = self.state.last_change_at
        # Only once the long window holds nothing from before the last change: steps of a
        # larger budget would otherwise be charged to this one.
        if height is None or self.median is None or (
                last is not None and self.now - last < self.tuning.long_window_seconds):
            return None
        return spike.learn_cost(height, self.median, self.limits.max_num_batched_tokens)

    def noting_breach(self, new_itl_breach: bool = False) -> Context:
        """The breach noted in the state (``new_itl_breach``: inter-token trouble after a quiet
        spell, which begins now)."""
        if not (self.itl_trouble or self.ttft_breach):
            return self
        state = replace(self.state, last_breach_at=self.now)
        if new_itl_breach:
            state = replace(state, breach_began_at=self.now)
        return replace(self, state=state)

    def learning(self) -> Context:
        """Fold this observation's reading of the prefill cost into the state (an average)."""
        reading = cost_reading(self)
        if reading is None:
            return self
        old = self.state.prefill_seconds_per_token
        cost = reading if old is None else 0.5 * old + 0.5 * reading
        return replace(self, state=replace(self.state, prefill_seconds_per_token=cost))

    @property
    def ttft_pressed(self) -> bool:
        """Time to first token has no margin left: nothing may slow admission or prefill."""
        return (self.slo.ttft_seconds is not None and self.ttft is not None
                and self.ttft > self.tuning.relax_margin * self.slo.ttft_seconds)

    def in_cooldown(self) -> bool:
        last = self.state.last_change_at
        return last is not None and self.now - last < self.tuning.cooldown_seconds

    def cooldown_text(self) -> str:
        # Never a negative age: a moment ahead of now was read as now (law/timestamps.py).
        age = max(0.0, self.now - (self.state.last_change_at or self.now))
        return f"last change {age:.0f}s ago; its effect is not fully in the window for " \
               f"another {self.tuning.cooldown_seconds - age:.0f}s"

    def describe(self) -> str:
        q = pct(self.slo.itl_quantile)
        text = (f"ITL {q} {ms(self.tail)} (SLO {ms(self.slo.itl_seconds)}), "
                f"median {ms(self.median)}")
        if self.obs.rank is not None:  # data parallelism: the numbers are the worst rank's
            text = f"rank {self.obs.rank} of {len(self.obs.rank_itl_tails)}: {text}"
        if self.slo.ttft_seconds is not None:
            text += f", TTFT {pct(self.slo.ttft_quantile)} {ms(self.ttft)} " \
                    f"(SLO {ms(self.slo.ttft_seconds)})"
        if self.good is not None and self.demand is not None:
            text += f", goodput ~{self.good:.2f}/{self.demand:.2f} req/s"
        if self.waiting is not None:
            text += f", {self.waiting:.0f} waiting"
        return text

    # -- verdicts ------------------------------------------------------------------------------
    def inputs(self, state: TargetState) -> dict[str, float | None]:
        return {**self.obs.as_inputs(),
                "prefill_seconds_per_token": state.prefill_seconds_per_token}

    def hold(self, reason: Reason, text: str) -> Decision:
        text = f"hold: {text}" if self.tail is None else f"hold: {text}; {self.describe()}"
        return Decision(Action.HOLD, reason, self.limits, self.limits, text, self.state,
                        self.inputs(self.state))

    def change(
        self, action: Action, reason: Reason, param: Param, value: int, text: str, *,
        kind: ChangeKind, avoid: tuple[Avoid, ...] = (), state: TargetState | None = None,
    ) -> Decision:
        base = state or self.state
        after = self.limits.with_value(param, value)
        probe = Probe(kind, param, self.limits, after, self.now, self.tail or 0.0, self.ttft,
                      self.good_share, self.ttft_share, self.waiting, self.prompt_rate)
        new_state = replace(base, limits=after, last_change_at=self.now, probe=probe,
                            avoid=base.avoid + avoid)
        explanation = (f"{action.value} {param.value} {self.limits.get(param)} → {value}: {text}; "
                       f"{self.describe()}")
        return Decision(action, reason, self.limits, after, explanation, new_state,
                        self.inputs(new_state))

    def avoid(self, param: Param, low: int, high: int) -> tuple[Avoid, ...]:
        load = load_of(self.obs, param)
        if load is None or high < low:
            return ()
        return (Avoid(param, low, high, self.now + self.tuning.avoid_seconds, load),)

    def blocked(self, param: Param, value: int) -> bool:
        return any(a.param is param and a.blocks(value) for a in self.state.avoid)




def cost_reading(ctx: Context) -> float | None:
    """Step time per prefill token read off the mean inter-token latency, when prefill shows.

    Needs a visible prefill effect (the mean at least 10% over the median), or the difference
    is noise.
    """
    mean, median, rate = finite(ctx.obs.itl_mean_seconds), ctx.median, ctx.prompt_rate
    if mean is None or median is None or not rate or mean < 1.1 * median:
        return None
    return spike.cost_from_mean(mean, median, rate)


def below_avoided(ctx: Context, param: Param, value: int, lowest: int) -> int | None:
    """``value``, or the nearest value under it that no avoided range blocks (≥ ``lowest``)."""
    candidate = value
    while candidate >= lowest:
        blocking = [a for a in ctx.state.avoid if a.param is param and a.blocks(candidate)]
        if not blocking:
            return candidate
        candidate = min(a.low for a in blocking) - 1
        if param is BUDGET:
            candidate = quantize(ctx, candidate)
    return None


def quantize(ctx: Context, value: float) -> int:
    """Round a budget down to the quantum (never to zero)."""
    q = ctx.tuning.budget_quantum
    return max(q, int(value // q) * q)


def quantize_up(ctx: Context, value: float) -> int:
    if not math.isfinite(value):
        return sys.maxsize
    q = ctx.tuning.budget_quantum
    return math.ceil(value / q) * q


def load_of(obs: Observation, param: Param) -> float | None:
    if param is BUDGET:
        return finite(obs.prompt_tokens_per_second)
    return finite(obs.requests_running)


def forget(
    state: TargetState, limits: Limits, obs: Observation, law: LawConfig, now: float
) -> TargetState:
    """Drop what no longer holds: a probe someone else's change made moot, expired avoids."""
    if state.limits is not None and state.limits != limits:
        # The limits moved under us (an operator, a restarted engine): the last change's verdict
        # and the budget a drain would hand back no longer describe this engine.
        state = replace(state, limits=limits, probe=None, drain_from=None)
    kept = tuple(a for a in state.avoid if a.until > now and not load_fell(a, obs, law))
    return replace(state, avoid=kept) if kept != state.avoid else state


def load_fell(avoid: Avoid, obs: Observation, law: LawConfig) -> bool:
    load = load_of(obs, avoid.param)
    return load is not None and load < law.avoid_load_drop * avoid.load


def ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1000:.0f} ms"


def pct(quantile: float) -> str:
    return f"p{quantile * 100:g}"

