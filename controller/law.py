"""The decision law: ``decide(slo, law, observed, current, state, now) -> Decision``. Pure.

One call per target per reconcile. In order:

1. **Hold on missing data**: no inter-token tail or median, no action.
2. **Cooldown**: one change per cooldown, which outlasts the observation window, so the next
   verdict sees only data from after the change.
3. **Verify the last change** against the first observation after its cooldown. P99 inter-token
   latency is not monotonic in the budget (REFERENCE.md §6), so no direction is assumed:
   a relaxation that brought a breach back is undone; a cut that made the tail worse is deepened
   when the spike model says a deeper cut clears the spikes, and undone otherwise; a cut that broke
   time to first token gives half of itself back. Undone values are avoided while load stays high.
4. **Inter-token breach**: slow decode steps without prefill pressure → cut ``max_num_seqs``;
   otherwise cut the budget multiplicatively to where the learnt spike height sits under the SLO,
   never so low that prefill capacity falls under the prompt arrival rate (the TTFT guard).
5. **Preemptions or a full KV cache** → cut ``max_num_seqs``.
6. **TTFT breach with decode margin** → raise the budget (or the sequence cap if requests wait).
7. **Relax** one additive step, only after the stabilisation window without a breach, with margin
   under the SLO in both windows, never while the queue grows, never into an avoided value, and
   never by more than the tail's distance to the SLO can absorb: a larger budget makes prefill
   steps no more frequent, only taller, by the learnt cost per token.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, replace

from controller import spike
from controller.law_config import LawConfig
from controller.model import (
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
# A waiting queue that grows faster than this (requests per second) is growing.
_QUEUE_GROWTH_EPSILON = 0.01


def decide(
    slo: SloTargets,
    law: LawConfig,
    observed: Observation,
    current: TargetLimits,
    state: TargetState,
    now: float,
) -> Decision:
    """What to do with one target now. ``state`` is what the previous decisions left behind."""
    ctx = _Context(slo, law, observed, current, _forget(state, current.current, observed, law, now),
                   now)
    if ctx.tail is None or ctx.median is None:
        return ctx.hold(Reason.MISSING_DATA, "no inter-token latency tail or median in the window")
    ctx = ctx.noting_breach().learning()
    if ctx.in_cooldown():
        return _early_undo(ctx) or ctx.hold(Reason.COOLDOWN, ctx.cooldown_text())
    if ctx.state.probe is not None:
        verdict = _verify(ctx, ctx.state.probe)
        if verdict is not None:
            return verdict
        ctx = replace(ctx, state=replace(ctx.state, probe=None))
    if ctx.itl_breach:
        return _on_itl_breach(ctx)
    pressure = _on_memory_pressure(ctx)
    if pressure is not None:
        return pressure
    if ctx.ttft_breach:
        return _on_ttft_breach(ctx)
    return _maybe_relax(ctx)


@dataclass(frozen=True, slots=True)
class _Context:
    slo: SloTargets
    law: LawConfig
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
    def ttft_breach(self) -> bool:
        return (self.slo.ttft_seconds is not None and self.ttft is not None
                and self.ttft > self.slo.ttft_seconds)

    @property
    def cost(self) -> float:
        """Step time per prefill token: learnt from breaches, else the configured prior."""
        learnt = self.state.prefill_seconds_per_token
        return learnt if learnt is not None else self.law.prefill_seconds_per_token_prior

    def noting_breach(self) -> _Context:
        if not (self.itl_breach or self.ttft_breach):
            return self
        return replace(self, state=replace(self.state, last_breach_at=self.now))

    def learning(self) -> _Context:
        """Fold this observation's reading of the prefill cost into the state (an average)."""
        reading = _cost_reading(self)
        if reading is None:
            return self
        old = self.state.prefill_seconds_per_token
        cost = reading if old is None else 0.5 * old + 0.5 * reading
        return replace(self, state=replace(self.state, prefill_seconds_per_token=cost))

    @property
    def ttft_pressed(self) -> bool:
        """Time to first token has no margin left: nothing may slow admission or prefill."""
        return (self.slo.ttft_seconds is not None and self.ttft is not None
                and self.ttft > self.law.relax_margin * self.slo.ttft_seconds)

    def in_cooldown(self) -> bool:
        last = self.state.last_change_at
        return last is not None and self.now - last < self.law.cooldown_seconds

    def cooldown_text(self) -> str:
        left = self.law.cooldown_seconds - (self.now - (self.state.last_change_at or self.now))
        return f"last change {self.now - (self.state.last_change_at or self.now):.0f}s ago; " \
               f"its effect is not fully in the window for another {left:.0f}s"

    def describe(self) -> str:
        q = _pct(self.slo.itl_quantile)
        text = (f"ITL {q} {_ms(self.tail)} (SLO {_ms(self.slo.itl_seconds)}), "
                f"median {_ms(self.median)}")
        if self.slo.ttft_seconds is not None:
            text += f", TTFT {_pct(self.slo.ttft_quantile)} {_ms(self.ttft)} " \
                    f"(SLO {_ms(self.slo.ttft_seconds)})"
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
        probe = Probe(kind, param, self.limits, after, self.now, self.tail or 0.0, self.ttft)
        new_state = replace(base, limits=after, last_change_at=self.now, probe=probe,
                            avoid=base.avoid + avoid)
        explanation = (f"{action.value} {param.value} {self.limits.get(param)} → {value}: {text}; "
                       f"{self.describe()}")
        return Decision(action, reason, self.limits, after, explanation, new_state,
                        self.inputs(new_state))

    def avoid(self, param: Param, low: int, high: int) -> tuple[Avoid, ...]:
        load = _load(self.obs, param)
        if load is None or high < low:
            return ()
        return (Avoid(param, low, high, self.now + self.law.avoid_seconds, load),)

    def blocked(self, param: Param, value: int) -> bool:
        return any(a.param is param and a.blocks(value) for a in self.state.avoid)


# -- verification -------------------------------------------------------------------------------
def _early_undo(ctx: _Context) -> Decision | None:
    """A relaxation followed by a breach needs no full cooldown to be judged: it started from a
    tail under the relax margin, so the breach in the window can only come from after it."""
    probe = ctx.state.probe
    if probe is None or probe.kind is not ChangeKind.RELAX or not ctx.itl_breach:
        return None
    return _undo_relax(ctx, probe)


def _verify(ctx: _Context, probe: Probe) -> Decision | None:
    """Judge the last change by the first observation after its cooldown; ``None``: keep it."""
    if probe.kind is ChangeKind.UNDO:
        return None
    tail = ctx.tail or 0.0
    worse = tail > probe.itl_tail_before * (1 + ctx.law.verify_tolerance)
    if probe.kind is ChangeKind.RELAX:
        # Landing in the dead band between the relax margin and the SLO is no failure: the
        # margin check then stops further relaxation. Only a breach undoes it.
        return _undo_relax(ctx, probe) if ctx.itl_breach else None
    if ctx.itl_breach and worse:
        return _cut_made_worse(ctx, probe)
    if ctx.ttft_breach and not ctx.itl_breach and not _was_breach(ctx, probe.ttft_tail_before):
        return _give_back_half(ctx, probe)
    return None


def _was_breach(ctx: _Context, ttft: float | None) -> bool:
    return ttft is not None and ctx.slo.ttft_seconds is not None and ttft > ctx.slo.ttft_seconds


def _undo_relax(ctx: _Context, probe: Probe) -> Decision:
    param = probe.param
    # Everything above the last good value is off limits, not just the value tried: creeping
    # up a quantum at a time would breach again and again.
    good = probe.before.get(param)
    avoid = ctx.avoid(param, good + 1, ctx.target.ceiling.get(param))
    return ctx.change(
        Action.UNDO, Reason.RELAX_BREACHED, param, good,
        f"the relaxation to {probe.after.get(param)} took the tail from "
        f"{_ms(probe.itl_tail_before)} to {_ms(ctx.tail)}; back to {good}, and no relaxing "
        "while the load stays this high",
        kind=ChangeKind.UNDO, avoid=avoid)


def _cut_made_worse(ctx: _Context, probe: Probe) -> Decision:
    """The tail rose after a cut: go deeper past the non-monotonic hump, or go back."""
    if probe.param is BUDGET:
        deeper = _budget_cut(ctx, Reason.NON_MONOTONIC)
        if isinstance(deeper, Decision):
            return deeper
    param = probe.param
    avoid = ctx.avoid(param, probe.after.get(param), probe.before.get(param) - 1)
    return ctx.change(
        Action.UNDO, Reason.CUT_MADE_WORSE, param, probe.before.get(param),
        f"the cut to {probe.after.get(param)} raised the tail from {_ms(probe.itl_tail_before)} "
        f"to {_ms(ctx.tail)} and cannot be deepened; back to {probe.before.get(param)}",
        kind=ChangeKind.UNDO, avoid=avoid)


def _give_back_half(ctx: _Context, probe: Probe) -> Decision:
    param = probe.param
    before, after = probe.before.get(param), probe.after.get(param)
    value = after + (before - after) // 2
    if param is BUDGET:
        value = _quantize(ctx, value)
    value = min(before, max(after + 1, value))
    avoid = ctx.avoid(param, ctx.target.floor.get(param), after)
    return ctx.change(
        Action.UNDO, Reason.TTFT_REGRESSION, param, value,
        f"the cut from {before} to {after} pushed time to first token over its SLO while decode "
        "has margin; giving half of it back",
        kind=ChangeKind.UNDO, avoid=avoid)


# -- tightening ---------------------------------------------------------------------------------
def _on_itl_breach(ctx: _Context) -> Decision:
    median = ctx.median or 0.0
    decode_slow = median > ctx.law.decode_slow_fraction * ctx.slo.itl_seconds
    pressure = spike.prefill_busy_fraction(ctx.prompt_rate or 0.0, ctx.cost)
    if decode_slow and pressure < ctx.law.prefill_pressure_fraction:
        cut = _seqs_cut(ctx, Reason.DECODE_SLOW,
                        f"the median step is slow ({_ms(median)}) with little prefill "
                        f"({pressure:.0%} of the engine's time): too many sequences per step")
        if cut is not None:
            return cut
    budget = _budget_cut(ctx, Reason.ITL_BREACH)
    if isinstance(budget, Decision):
        return budget
    why = "prefill would fall behind the prompt arrival rate" if budget is Reason.TTFT_GUARD \
        else "it is at its floor"
    cut = _seqs_cut(ctx, Reason.ITL_BREACH, f"the budget cannot go lower ({why}); fewer "
                    "sequences shorten every step")
    if cut is not None:
        return cut
    if ctx.ttft_pressed:
        return ctx.hold(Reason.TTFT_GUARD, f"breaching, but the budget cannot go lower ({why}) "
                        "and time to first token has no margin for a lower sequence cap")
    return ctx.hold(budget, f"breaching, but the budget cannot go lower ({why}) and "
                    "max_num_seqs is at its floor")


def _budget_cut(ctx: _Context, reason: Reason) -> Decision | Reason:
    """A budget cut that aims the prefill spikes under the SLO, or the reason there is none."""
    budget = ctx.limits.max_num_batched_tokens
    median, tail = ctx.median or 0.0, ctx.tail or 0.0
    # The tail of a breach bounds the cost from below: the spikes are at least that tall.
    bound = spike.learn_cost(tail, median, budget) if ctx.itl_breach else None
    cost = max(bound or 0.0, ctx.cost)
    model = spike.budget_for_spike(ctx.law.aim_fraction * ctx.slo.itl_seconds, median, cost)
    wanted = model if model is not None else budget * ctx.law.default_cut_factor
    wanted = min(max(wanted, budget * ctx.law.min_cut_factor), budget * ctx.law.max_cut_factor)
    lowest = _lowest_budget(ctx)
    guard = _ttft_min_budget(ctx, cost)
    if lowest >= budget:
        return Reason.AT_FLOOR
    if _quantize_up(ctx, guard) >= budget:
        return Reason.TTFT_GUARD
    value = max(_quantize(ctx, max(wanted, _quantize_up(ctx, guard))), lowest)
    found = _below_avoided(ctx, BUDGET, value, lowest)
    if found is None or found >= budget:
        return Reason.AT_FLOOR
    state = replace(ctx.state, prefill_seconds_per_token=cost)
    text = (f"prefill spikes of ~{_ms(spike.spike_seconds(median, cost, budget))} at "
            f"{cost * 1e6:.1f} µs/token; {found} puts them at "
            f"~{_ms(spike.spike_seconds(median, cost, found))}")
    if guard > wanted:
        text += (f" (held up by the TTFT guard: prefill must keep up with "
                 f"{ctx.prompt_rate or 0.0:.0f} prompt tokens/s)")
    return ctx.change(Action.TIGHTEN, reason, BUDGET, found, text, kind=ChangeKind.TIGHTEN,
                      state=state)


def _cost_reading(ctx: _Context) -> float | None:
    """Step time per prefill token read off the mean inter-token latency, when prefill shows.

    Needs a visible prefill effect (the mean at least 10% over the median), or the difference
    is noise.
    """
    mean, median, rate = finite(ctx.obs.itl_mean_seconds), ctx.median, ctx.prompt_rate
    if mean is None or median is None or not rate or mean < 1.1 * median:
        return None
    return spike.cost_from_mean(mean, median, rate)


def _lowest_budget(ctx: _Context) -> int:
    """The floor, and never below the running decodes (each needs one token of the budget)."""
    running = finite(ctx.obs.requests_running) or 0.0
    q = ctx.law.budget_quantum
    decodes = math.ceil((running + 1) / q) * q
    budget = ctx.limits.max_num_batched_tokens
    return max(ctx.target.floor.max_num_batched_tokens, min(decodes, budget))


def _ttft_min_budget(ctx: _Context, cost: float) -> float:
    """The budget under which prefill would fall behind the prompts (0: no TTFT SLO).

    The learnt cost is a lower bound read off a tail that something else (preemption, a stalled
    host) may have inflated; the guard takes the smaller of it and the prior so that one odd
    tail cannot forbid every cut. The TTFT verdict on the next observation is the real net.
    """
    if ctx.slo.ttft_seconds is None or ctx.prompt_rate is None:
        return 0.0
    plausible = min(cost, ctx.law.prefill_seconds_per_token_prior)
    return spike.min_budget_for_prefill(ctx.prompt_rate, ctx.median or 0.0, plausible,
                                        ctx.law.ttft_headroom)


def _seqs_cut(ctx: _Context, reason: Reason, text: str, *, spare_ttft: bool = True
              ) -> Decision | None:
    """Fewer sequences; with ``spare_ttft``, not while time to first token has no margin
    (a cap under the running count holds new requests back until others finish)."""
    if spare_ttft and ctx.ttft_pressed:
        return None
    seqs = ctx.limits.max_num_seqs
    running = finite(ctx.obs.requests_running)
    # Cut relative to what runs: a cap far above the running count would change nothing.
    base = min(seqs, running) if running is not None and running >= 1 else seqs
    value = max(ctx.target.floor.max_num_seqs, int(base * ctx.law.seqs_cut_factor))
    found = _below_avoided(ctx, SEQS, value, ctx.target.floor.max_num_seqs)
    if found is None or found >= seqs:
        return None
    return ctx.change(Action.TIGHTEN, reason, SEQS, found, text, kind=ChangeKind.TIGHTEN)


def _on_memory_pressure(ctx: _Context) -> Decision | None:
    preemptions = finite(ctx.obs.preemptions_per_second)
    if preemptions is not None and preemptions > ctx.law.preemptions_per_second_max:
        return _seqs_cut(ctx, Reason.PREEMPTIONS,
                         f"{preemptions:.2f} preemptions/s: the KV cache cannot hold every "
                         "sequence", spare_ttft=False)
    kv = finite(ctx.obs.kv_cache_usage_ratio)
    if kv is not None and kv > ctx.law.kv_high_ratio:
        return _seqs_cut(ctx, Reason.KV_PRESSURE, f"KV cache {kv:.0%} full", spare_ttft=False)
    return None


# -- relaxing -----------------------------------------------------------------------------------
def _on_ttft_breach(ctx: _Context) -> Decision:
    if (ctx.tail or 0.0) > ctx.law.relax_margin * ctx.slo.itl_seconds:
        return ctx.hold(Reason.TTFT_BREACH, "time to first token breaches, but decode has no "
                        "margin to give a larger budget")
    budget = ctx.limits.max_num_batched_tokens
    step = max(ctx.law.budget_relax_step, budget // 2)
    raised = _budget_relax(ctx, budget + step)
    if raised is not None:
        return ctx.change(Action.RELAX, Reason.TTFT_BREACH, BUDGET, raised,
                          "time to first token breaches while decode has margin: a larger budget "
                          "prefills faster", kind=ChangeKind.RELAX)
    seqs = _seqs_relax(ctx, queue_bound=True)
    if seqs is not None:
        return ctx.change(Action.RELAX, Reason.TTFT_BREACH, SEQS, seqs,
                          "time to first token breaches while requests wait for a slot",
                          kind=ChangeKind.RELAX)
    return ctx.hold(Reason.TTFT_BREACH, "time to first token breaches, and neither knob can "
                    "rise without risking the inter-token SLO")


def _maybe_relax(ctx: _Context) -> Decision:
    long_tail = finite(ctx.obs.itl_tail_long_seconds)
    if long_tail is None:
        return ctx.hold(Reason.MISSING_DATA, "no long-window inter-token tail to judge margin by")
    margin = ctx.law.relax_margin * ctx.slo.itl_seconds
    if max(ctx.tail or 0.0, long_tail) > margin:
        return ctx.hold(Reason.WITHIN_SLO, f"under the SLO but within {_ms(margin)} of it "
                        f"(long window {_ms(long_tail)})")
    if ctx.limits == ctx.target.ceiling:
        return ctx.hold(Reason.AT_CEILING, "both knobs at their start-up values")
    since = ctx.now - ctx.state.last_breach_at if ctx.state.last_breach_at is not None else None
    if since is not None and since < ctx.law.stabilisation_seconds:
        return ctx.hold(Reason.WAITING_FOR_STABILITY,
                        f"last breach {since:.0f}s ago; relaxing after "
                        f"{ctx.law.stabilisation_seconds:.0f}s")
    return _relax_step(ctx)


def _relax_step(ctx: _Context) -> Decision:
    growth = finite(ctx.obs.waiting_growth_per_second)
    growing = growth is not None and growth > _QUEUE_GROWTH_EPSILON
    budget = ctx.limits.max_num_batched_tokens
    raised = None if growing else _budget_relax(ctx, budget + ctx.law.budget_relax_step)
    if raised is not None:
        return ctx.change(Action.RELAX, Reason.STABLE, BUDGET, raised,
                          f"no breach for {ctx.law.stabilisation_seconds:.0f}s with margin",
                          kind=ChangeKind.RELAX)
    seqs = _seqs_relax(ctx, queue_bound=growing)
    if seqs is not None:
        return ctx.change(Action.RELAX, Reason.STABLE, SEQS, seqs,
                          f"no breach for {ctx.law.stabilisation_seconds:.0f}s with margin",
                          kind=ChangeKind.RELAX)
    if growing:
        return ctx.hold(Reason.QUEUE_GROWING, f"the waiting queue grows ({growth:.2f}/s)")
    return ctx.hold(Reason.RELAX_BLOCKED, "the next step up was undone before at this load, or "
                    "its prefill spikes would lift the tail over the SLO")


def _budget_relax(ctx: _Context, wanted: int) -> int | None:
    """The highest budget in (current, wanted] that no avoided range and no spike forbids."""
    budget = ctx.limits.max_num_batched_tokens
    value = min(wanted, ctx.target.ceiling.max_num_batched_tokens)
    for avoid in ctx.state.avoid:
        if avoid.param is BUDGET and avoid.low <= value:
            value = min(value, avoid.low - 1)
    value = min(value, _spike_room(ctx, budget))
    if value < ctx.target.ceiling.max_num_batched_tokens:
        value = _quantize(ctx, value)
    return value if value > budget else None


def _spike_room(ctx: _Context, budget: int) -> int:
    """The largest budget whose prefill spikes cannot lift the tail over the SLO.

    A larger budget never makes prefill steps more frequent (a prompt needs fewer chunks), it
    only makes each chunk step longer, by ``cost`` per token. So whatever the tail sits on now,
    raising the budget by ``room`` tokens raises it by at most ``cost * room``.
    """
    if not ctx.prompt_rate:
        return sys.maxsize
    tail = max(ctx.tail or 0.0, finite(ctx.obs.itl_tail_long_seconds) or 0.0)
    room = (ctx.slo.itl_seconds - tail) / ctx.cost
    return budget + max(0, int(room))


def _seqs_relax(ctx: _Context, *, queue_bound: bool) -> int | None:
    """One step up for the sequence cap, when memory allows; with ``queue_bound`` only if the
    cap is what keeps requests waiting."""
    seqs, ceiling = ctx.limits.max_num_seqs, ctx.target.ceiling.max_num_seqs
    kv = finite(ctx.obs.kv_cache_usage_ratio)
    preemptions = finite(ctx.obs.preemptions_per_second) or 0.0
    running = finite(ctx.obs.requests_running)
    if seqs >= ceiling or preemptions > 0 or (kv is not None and kv > ctx.law.kv_relax_max_ratio):
        return None
    if queue_bound and (running is None or running < seqs):
        return None
    value = min(seqs + ctx.law.seqs_relax_step, ceiling)
    for avoid in ctx.state.avoid:
        if avoid.param is SEQS and avoid.low <= value:
            value = min(value, avoid.low - 1)
    return value if value > seqs else None


# -- helpers ------------------------------------------------------------------------------------
def _below_avoided(ctx: _Context, param: Param, value: int, lowest: int) -> int | None:
    """``value``, or the nearest value under it that no avoided range blocks (≥ ``lowest``)."""
    candidate = value
    while candidate >= lowest:
        blocking = [a for a in ctx.state.avoid if a.param is param and a.blocks(candidate)]
        if not blocking:
            return candidate
        candidate = min(a.low for a in blocking) - 1
        if param is BUDGET:
            candidate = _quantize(ctx, candidate)
    return None


def _quantize(ctx: _Context, value: float) -> int:
    """Round a budget down to the quantum (never to zero)."""
    q = ctx.law.budget_quantum
    return max(q, int(value // q) * q)


def _quantize_up(ctx: _Context, value: float) -> int:
    if not math.isfinite(value):
        return sys.maxsize
    q = ctx.law.budget_quantum
    return math.ceil(value / q) * q


def _load(obs: Observation, param: Param) -> float | None:
    if param is BUDGET:
        return finite(obs.prompt_tokens_per_second)
    return finite(obs.requests_running)


def _forget(
    state: TargetState, limits: Limits, obs: Observation, law: LawConfig, now: float
) -> TargetState:
    """Drop what no longer holds: a probe someone else's change made moot, expired avoids."""
    if state.limits is not None and state.limits != limits:
        # The limits moved under us (an operator, a restarted engine): the last change's verdict
        # and the values it avoided no longer describe this engine.
        state = replace(state, limits=limits, probe=None)
    kept = tuple(a for a in state.avoid if a.until > now and not _load_fell(a, obs, law))
    return replace(state, avoid=kept) if kept != state.avoid else state


def _load_fell(avoid: Avoid, obs: Observation, law: LawConfig) -> bool:
    load = _load(obs, avoid.param)
    return load is not None and load < law.avoid_load_drop * avoid.load


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1000:.0f} ms"


def _pct(quantile: float) -> str:
    return f"p{quantile * 100:g}"
