"""The decision law: ``decide(slo, law, observed, current, state, now) -> Decision``. Pure.

One call per target per reconcile. In order:

1. **Hold on missing data**: no inter-token tail or median, no action.
2. **Read the verdict** (:mod:`governor.controller.law.cause_guard`): a breach the generated rules
   blame on a throttled, shared or faulty GPU, a saturated link or the service's own stages is
   held; one blamed on demand or saturation is held with the scale-out signal raised.
3. **Cooldown**: one change per cooldown, which outlasts the observation window, so the next
   verdict sees only data from after the change.
4. **Verify the last change** against the first observation after its cooldown. P99 inter-token
   latency is not monotonic in the budget (docs/h200-measurements.md), so no direction is assumed:
   a relaxation that brought a breach back is undone; a cut that made the tail worse is deepened
   when the spike model says a deeper cut clears the spikes, and undone otherwise; a cut that broke
   time to first token gives half of itself back. Undone values are avoided while load stays high.
5. **Inter-token breach**: slow decode steps without prefill pressure → cut ``max_num_seqs``;
   otherwise cut the budget multiplicatively to where the learnt spike height sits under the SLO,
   never so low that prefill capacity falls under the prompt arrival rate (the TTFT guard).
6. **Preemptions or a full KV cache** → cut ``max_num_seqs``.
7. **TTFT breach with decode margin** → raise the budget (or the sequence cap if requests wait).
8. **Relax** one additive step, only after the stabilisation window without a breach, with margin
   under the SLO in both windows, never while the queue grows, never into an avoided value, and
   never by more than the tail's distance to the SLO can absorb: a larger budget makes prefill
   steps no more frequent, only taller, by the learnt cost per token; and while long prompts
   fill the budget (the P99.9 shows their steps), never so far that one such step alone would
   pass the relax margin.
"""

from __future__ import annotations

import math
from dataclasses import replace

from governor.controller.law import (
    admission,
    cause_guard,
    overload,
    queued_tokens,
    spike,
    stage_guard,
    timestamps,
)
from governor.controller.law.context import (
    BUDGET,
    SEQS,
    Context,
    below_avoided,
    forget,
    ms,
    quantize,
    quantize_up,
)
from governor.controller.law.relax import maybe_relax, on_ttft_breach
from governor.controller.law.tuning import LawConfig
from governor.controller.model import (
    Action,
    ChangeKind,
    Decision,
    Observation,
    Probe,
    Reason,
    SloTargets,
    TargetLimits,
    TargetState,
    finite,
)

# A good share of demand under this is nil, and a rise by less is no rise.
_NIL_SHARE = 0.02


def decide(
    slo: SloTargets,
    law: LawConfig,
    observed: Observation,
    current: TargetLimits,
    state: TargetState,
    now: float,
) -> Decision:
    """What to do with one target now. ``state`` is what the previous decisions left behind."""
    state = timestamps.not_ahead(state, now, law.avoid_seconds)  # the clock may have stepped back
    ctx = Context(slo, law, observed, current, forget(state, current.current, observed, law, now),
                   now)
    if ctx.tail is None or ctx.median is None:
        return ctx.hold(Reason.MISSING_DATA, "no inter-token latency tail or median in the window")
    breach_is_new = cause_guard.new_breach(ctx)
    ctx = overload.tracking(overload.scoring(ctx.noting_breach(breach_is_new).learning()))
    decision = cause_guard.held_for_cause(ctx, breach_is_new) or \
        stage_guard.held_outside_engine(ctx) or _decide(ctx)
    decision = queued_tokens.bound(ctx, admission.bound(ctx, decision))
    advice = overload.advice(replace(ctx, state=decision.state))
    return replace(decision, scale=cause_guard.scale(ctx, decision, advice))


def _decide(ctx: Context) -> Decision:
    if ctx.in_cooldown():
        return _early_undo(ctx) or ctx.hold(Reason.COOLDOWN, ctx.cooldown_text())
    if ctx.state.probe is not None:
        verdict = _verify(ctx, ctx.state.probe)
        if verdict is not None:
            return verdict
        ctx = replace(ctx, state=replace(ctx.state, probe=None))
    if ctx.state.overload_since is not None:
        return overload.in_overload(ctx)
    if ctx.itl_trouble:
        return _on_itl_breach(ctx)
    pressure = _on_memory_pressure(ctx)
    if pressure is not None:
        return pressure
    if ctx.ttft_breach:
        return on_ttft_breach(ctx)
    return maybe_relax(ctx)



# -- verification -------------------------------------------------------------------------------
def _early_undo(ctx: Context) -> Decision | None:
    """A relaxation followed by a breach needs no full cooldown to be judged: it started from a
    tail under the relax margin, so the breach in the window can only come from after it. Nor
    does the end of a drain (``overload.early_hand_back``)."""
    probe = ctx.state.probe
    if probe is None or probe.kind is not ChangeKind.RELAX or not ctx.itl_trouble:
        return overload.early_hand_back(ctx)
    return _undo_relax(ctx, probe)


def _verify(ctx: Context, probe: Probe) -> Decision | None:
    """Judge the last change by the first observation after its cooldown; ``None``: keep it."""
    if probe.kind is ChangeKind.UNDO:
        return None
    tail = ctx.tail or 0.0
    worse = tail > probe.itl_tail_before * (1 + ctx.tuning.verify_tolerance)
    if probe.kind is ChangeKind.RELAX:
        # Landing in the dead band between the relax margin and the SLO is no failure: the
        # margin check then stops further relaxation. Only a breach undoes it.
        return _undo_relax(ctx, probe) if ctx.itl_trouble else None
    costly = _goodput_cost(ctx, probe)
    if costly is not None:
        return _undo_costly_cut(ctx, probe, costly)
    if ctx.itl_breach and worse and not _load_outgrew(ctx, probe):
        return _cut_made_worse(ctx, probe)
    if ctx.ttft_breach and not ctx.itl_breach and not _was_breach(ctx, probe.ttft_tail_before) \
            and not _bought_goodput(ctx, probe) and not _prefill_kept_pace(ctx, probe):
        return _give_back_half(ctx, probe)
    return None


def _prefill_kept_pace(ctx: Context, probe: Probe) -> bool:
    """Prefill went on at least about as fast as before the cut: if first tokens are late now,
    the load outgrew prefill; the cut did not starve it (a cut that starves prefill or holds
    requests back shows as fewer prompt tokens per second)."""
    before, rate = probe.prompt_rate_before, ctx.prompt_rate
    return before is not None and rate is not None and \
        rate >= before * (1 - ctx.tuning.goodput_tolerance / 2)


def _load_outgrew(ctx: Context, probe: Probe) -> bool:
    """The queue grew since the change while prefill kept its pace: more work arrived, and a
    taller tail is the load's (a cut makes no step longer), not the cut's."""
    waiting = ctx.waiting
    return _prefill_kept_pace(ctx, probe) and ctx.queue_growing and waiting is not None and \
        waiting > (probe.waiting_before or 0.0) + ctx.tuning.queue_min_waiting


def _bought_goodput(ctx: Context, probe: Probe) -> bool:
    """The good share of demand rose clearly since the change: a TTFT tail over its SLO is then
    the price of more good requests, not a regression (near prefill capacity the TTFT P99
    crosses its SLO now and then whatever the budget)."""
    before, after = probe.good_share_before, ctx.good_share
    return before is not None and after is not None and \
        after > before + max(ctx.tuning.goodput_tolerance * before, _NIL_SHARE)


def _goodput_cost(ctx: Context, probe: Probe) -> str | None:
    """What a cut cost, if it cost more in first tokens or queue than it bought on decode.

    Time to first token or the queue must have got worse, and the estimated good share of
    demand (not the good rate: the load may have moved) must not have risen clearly for it.
    """
    before, after = probe.good_share_before, ctx.good_share
    # Kept only if it bought clearly more goodput than before (a share that was already nil,
    # every request missing the ITL SLO, must rise, not merely not fall).
    if before is None or after is None or _bought_goodput(ctx, probe):
        return None
    if max(before, after) < _NIL_SHARE and ctx.itl_pass_share == 0.0:
        # Nil before and after, and decode still fails everyone: the cut has not bought decode
        # yet, so there is no trade to judge; the inter-token verdict deepens it or undoes it.
        return None
    if _prefill_kept_pace(ctx, probe):
        return None  # the load's doing, not the cut's; the inter-token verdict still applies
    why = []
    ttft_before, ttft_after = probe.ttft_share_before, ctx.ttft_share
    if ttft_before is not None and ttft_after is not None and \
            ttft_after < ttft_before - ctx.tuning.goodput_tolerance * (1 - ttft_before + 0.1):
        why.append(f"first tokens within the SLO fell from {ttft_before:.0%} to {ttft_after:.0%}")
    waiting_before, waiting = probe.waiting_before, ctx.waiting
    if waiting is not None and ctx.queue_growing and \
            waiting > (waiting_before or 0.0) + ctx.tuning.queue_min_waiting:
        why.append(f"the queue grew from {waiting_before or 0.0:.0f} to {waiting:.0f}")
    if not why:
        return None
    if max(before, after) < _NIL_SHARE:
        # Nothing good was there to lose: the verdict is what it cost, for no gain.
        return f"{' and '.join(why)}, and it bought no goodput (none before or after)"
    return (f"{' and '.join(why)}; the good share of demand fell from {before:.0%} to "
            f"{after:.0%}")


def _undo_costly_cut(ctx: Context, probe: Probe, why: str) -> Decision:
    """Undo the cut, and cut no lower while the load stays: a deeper cut costs more still."""
    param = probe.param
    good = probe.before.get(param)
    avoid = ctx.avoid(param, ctx.target.floor.get(param), good - 1)
    return ctx.change(
        Action.UNDO, Reason.GOODPUT_REGRESSION, param, good,
        f"the cut to {probe.after.get(param)} cost more than it bought: {why}; back to {good}, "
        "and no lower while the load stays this high",
        kind=ChangeKind.UNDO, avoid=avoid)


def _was_breach(ctx: Context, ttft: float | None) -> bool:
    return ttft is not None and ctx.slo.ttft_seconds is not None and ttft > ctx.slo.ttft_seconds


def _undo_relax(ctx: Context, probe: Probe) -> Decision:
    param = probe.param
    # Everything above the last good value is off limits, not just the value tried: creeping
    # up a quantum at a time would breach again and again.
    good = probe.before.get(param)
    avoid = ctx.avoid(param, good + 1, ctx.target.ceiling.get(param))
    return ctx.change(
        Action.UNDO, Reason.RELAX_BREACHED, param, good,
        f"the relaxation to {probe.after.get(param)} took the tail from "
        f"{ms(probe.itl_tail_before)} to {ms(ctx.tail)}; back to {good}, and no relaxing "
        "while the load stays this high",
        kind=ChangeKind.UNDO, avoid=avoid)


def _cut_made_worse(ctx: Context, probe: Probe) -> Decision:
    """The tail rose after a cut: go deeper past the non-monotonic hump, or go back."""
    if probe.param is BUDGET:
        deeper = _budget_cut(ctx, Reason.NON_MONOTONIC)
        if isinstance(deeper, Decision):
            return deeper
    param = probe.param
    avoid = ctx.avoid(param, probe.after.get(param), probe.before.get(param) - 1)
    return ctx.change(
        Action.UNDO, Reason.CUT_MADE_WORSE, param, probe.before.get(param),
        f"the cut to {probe.after.get(param)} raised the tail from {ms(probe.itl_tail_before)} "
        f"to {ms(ctx.tail)} and cannot be deepened; back to {probe.before.get(param)}",
        kind=ChangeKind.UNDO, avoid=avoid)


def _give_back_half(ctx: Context, probe: Probe) -> Decision:
    param = probe.param
    before, after = probe.before.get(param), probe.after.get(param)
    value = after + (before - after) // 2
    if param is BUDGET:
        value = quantize(ctx, value)
    value = min(before, max(after + 1, value))
    avoid = ctx.avoid(param, ctx.target.floor.get(param), after)
    return ctx.change(
        Action.UNDO, Reason.TTFT_REGRESSION, param, value,
        f"the cut from {before} to {after} pushed time to first token over its SLO while decode "
        "has margin; giving half of it back",
        kind=ChangeKind.UNDO, avoid=avoid)

# -- tightening ---------------------------------------------------------------------------------
def _on_itl_breach(ctx: Context) -> Decision:
    if not ctx.itl_breach:
        # Spikes at risk: only their height is the problem, and only the budget sets it.
        budget = _budget_cut(ctx, Reason.ITL_AT_RISK)
        return budget if isinstance(budget, Decision) else ctx.hold(
            budget, "spikes over the SLO already cost requests their own P99, but the budget "
                    "cannot go lower")
    median = ctx.median or 0.0
    decode_slow = median > ctx.tuning.decode_slow_fraction * ctx.slo.itl_seconds
    pressure = spike.prefill_busy_fraction(ctx.prompt_rate or 0.0, ctx.cost)
    if decode_slow and pressure < ctx.tuning.prefill_pressure_fraction:
        cut = _seqs_cut(ctx, Reason.DECODE_SLOW,
                        f"the median step is slow ({ms(median)}) with little prefill "
                        f"({pressure:.0%} of the engine's time): too many sequences per step")
        if cut is not None:
            return cut
    budget = _budget_cut(ctx, Reason.ITL_BREACH)
    if isinstance(budget, Decision):
        return budget
    if budget is Reason.GOODPUT_GUARD:
        return ctx.hold(Reason.GOODPUT_GUARD, "breaching, but a cut from here was undone for "
                        "what it cost in first tokens or queue, and the load has not fallen")
    if budget is Reason.TTFT_GUARD:
        # Prefill is what the engine cannot keep up with: a lower sequence cap would hold new
        # requests back as well, and would not shorten the prefill steps the tail sits on.
        return ctx.hold(Reason.TTFT_GUARD, "breaching, but a lower budget would let prefill fall "
                        "behind the prompt arrival rate, and a lower sequence cap would hold "
                        "first tokens back too")
    why = "it is at its floor"
    cut = _seqs_cut(ctx, Reason.ITL_BREACH, f"the budget cannot go lower ({why}); fewer "
                    "sequences shorten every step")
    if cut is not None:
        return cut
    if ctx.ttft_pressed:
        return ctx.hold(Reason.TTFT_GUARD, f"breaching, but the budget cannot go lower ({why}) "
                        "and time to first token has no margin for a lower sequence cap")
    return ctx.hold(budget, f"breaching, but the budget cannot go lower ({why}) and "
                    "max_num_seqs is at its floor")


def _budget_cut(ctx: Context, reason: Reason) -> Decision | Reason:
    """A budget cut that aims the prefill spikes under the SLO, or the reason there is none."""
    budget = ctx.limits.max_num_batched_tokens
    median = ctx.median or 0.0
    # The tail of a breach bounds the cost from below: the spikes are at least that tall. Short
    # of a breach, the P99.9 that put the spikes at risk does (a step carrying at most a
    # budget's worth of prefill is at most median + cost * budget long), once its long window
    # holds only this budget's steps: ``ctx.cost`` counts it then (``spike_cost``). A breach
    # does not take it too: the P99.9's steps are the tallest of the long window, those taken
    # with the most sequences decoding, and charging their decode to the budget overstates the
    # cost (a burst's 380 ms steps read 45 µs a token at 8192 where prefill costs 25).
    height = ctx.tail if ctx.itl_breach else None
    bound = spike.learn_cost(height, median, budget) if height else None
    cost = max(bound or 0.0, ctx.learnt_cost if ctx.itl_breach else ctx.cost)
    model = spike.budget_for_spike(ctx.tuning.aim_fraction * ctx.slo.itl_seconds, median, cost)
    wanted = model if model is not None else budget * ctx.tuning.default_cut_factor
    tuning = ctx.tuning
    wanted = min(max(wanted, budget * tuning.min_cut_factor), budget * tuning.max_cut_factor)
    lowest = _lowest_budget(ctx)
    guard = _ttft_min_budget(ctx, cost, wanted)
    if lowest >= budget:
        return Reason.AT_FLOOR
    if quantize_up(ctx, guard) >= budget:
        return Reason.TTFT_GUARD
    # Stopped where its spikes still pass the SLO (by the guard's own cost, not a breach's
    # upper reading), a cut would cost prefill and buy no decode.
    held = quantize_up(ctx, guard)
    plausible = min(cost, ctx.tuning.prefill_seconds_per_token_prior)
    short = guard > wanted and spike.spike_seconds(median, plausible, held) > ctx.slo.itl_seconds
    value = max(quantize(ctx, wanted if short else max(wanted, held)), lowest)
    # A range undone for what it cost in first tokens reaches down to the floor: stop above it.
    above = _above_costly(ctx, value)
    if above is not None and above >= budget:
        return Reason.GOODPUT_GUARD
    found = above if above is not None else below_avoided(ctx, BUDGET, value, lowest)
    if found is None or found >= budget:
        return Reason.AT_FLOOR
    state = replace(ctx.state, prefill_seconds_per_token=cost)
    text = (f"prefill spikes of ~{ms(spike.spike_seconds(median, cost, budget))} at "
            f"{cost * 1e6:.1f} µs/token; {found} puts them at "
            f"~{ms(spike.spike_seconds(median, cost, found))}")
    if short:
        text += (f" (the TTFT guard would stop it at {held}, where the spikes stay over the SLO: "
                 "a cut there costs prefill and buys no decode)")
    elif guard > wanted:
        text += (f" (held up by the TTFT guard: prefill must keep up with "
                 f"{ctx.prompt_rate or 0.0:.0f} prompt tokens/s)")
    elif admission.guard_yields(ctx):
        text += (f" (the TTFT guard yields: the deadline gate turns away "
                 f"{ctx.obs.admission_refused_per_second or 0.0:.1f} req/s, so prefill that falls "
                 "behind the arrivals costs refusals, not first tokens past their SLO)")
    elif _guard_yields(ctx, cost, wanted):
        text += (" (the TTFT guard yields: no request decodes within the SLO here, so the first "
                 "tokens it would keep could not become good requests)")
    return ctx.change(Action.TIGHTEN, reason, BUDGET, found, text, kind=ChangeKind.TIGHTEN,
                      state=state)


def _above_costly(ctx: Context, value: int) -> int | None:
    """The lowest budget above a floor-anchored avoided range that holds ``value`` (a range
    recorded when a cut cost first tokens or goodput); ``None`` if no such range holds it."""
    floor = ctx.target.floor.max_num_batched_tokens
    highs = [a.high for a in ctx.state.avoid
             if a.param is BUDGET and a.low <= floor and a.blocks(value)]
    return quantize_up(ctx, max(highs) + 1) if highs else None


def _lowest_budget(ctx: Context) -> int:
    """The floor, and never below the running decodes (each needs one token of the budget)."""
    running = finite(ctx.obs.requests_running) or 0.0
    q = ctx.tuning.budget_quantum
    decodes = math.ceil((running + 1) / q) * q
    budget = ctx.limits.max_num_batched_tokens
    return max(ctx.target.floor.max_num_batched_tokens, min(decodes, budget))


def _ttft_min_budget(ctx: Context, cost: float, wanted: float) -> float:
    """The budget under which prefill would fall behind the prompts (0: no TTFT SLO).

    The learnt cost is a lower bound read off a tail that something else (preemption, a stalled
    host) may have inflated; the guard takes the smaller of it and the prior so that one odd
    tail cannot forbid every cut. The TTFT verdict on the next observation is the real net.
    """
    if ctx.slo.ttft_seconds is None or ctx.prompt_rate is None or \
            _guard_yields(ctx, cost, wanted):
        return 0.0
    plausible = min(cost, ctx.tuning.prefill_seconds_per_token_prior)
    return spike.min_budget_for_prefill(ctx.prompt_rate, ctx.median or 0.0, plausible,
                                        ctx.tuning.ttft_headroom)


def _guard_yields(ctx: Context, cost: float, wanted: float) -> bool:
    """No request decodes within the ITL SLO at the budget in force (the goodput estimate's
    pass share is nil) and most first tokens still meet theirs: the first tokens the guard would
    keep feed decodes that fail anyway. Not where the median first token is late: a backlog past
    the SLO holds them, and a slower prefill keeps them late for longer than the cut saves. Nor
    where the queue grows and the ``wanted`` budget could not prefill the prompts arriving now
    (no headroom): the backlog would grow faster until every first token is late."""
    if admission.guard_yields(ctx):
        return True
    if ctx.itl_pass_share != 0.0 or ctx.first_tokens_late:
        return False
    if not ctx.queue_growing or ctx.prompt_rate is None:
        return True
    plausible = min(cost, ctx.tuning.prefill_seconds_per_token_prior)
    return spike.min_budget_for_prefill(ctx.prompt_rate, ctx.median or 0.0, plausible,
                                        1.0) <= wanted


def _seqs_cut(ctx: Context, reason: Reason, text: str, *, spare_ttft: bool = True
              ) -> Decision | None:
    """Fewer sequences; with ``spare_ttft``, not while time to first token has no margin or the
    queue grows (a cap under the running count holds new requests back until others finish)."""
    if spare_ttft and (ctx.ttft_pressed or ctx.queue_growing):
        return None
    seqs = ctx.limits.max_num_seqs
    running = finite(ctx.obs.requests_running)
    # Cut relative to what runs: a cap far above the running count would change nothing.
    base = min(seqs, running) if running is not None and running >= 1 else seqs
    value = max(ctx.target.floor.max_num_seqs, int(base * ctx.tuning.seqs_cut_factor))
    found = below_avoided(ctx, SEQS, value, ctx.target.floor.max_num_seqs)
    if found is None or found >= seqs:
        return None
    return ctx.change(Action.TIGHTEN, reason, SEQS, found, text, kind=ChangeKind.TIGHTEN)


def _on_memory_pressure(ctx: Context) -> Decision | None:
    # Preemptions read over the long window count only while the cache is still full: a cut
    # relative to the few requests left running after a backlog would hold the next ones back.
    if ctx.preempting:
        return _seqs_cut(ctx, Reason.PREEMPTIONS,
                         f"{ctx.obs.preemptions_per_second:.2f} preemptions/s: the KV cache "
                         "cannot hold every sequence", spare_ttft=False)
    kv = finite(ctx.obs.kv_cache_usage_ratio)
    if kv is not None and kv > ctx.tuning.kv_high_ratio:
        return _seqs_cut(ctx, Reason.KV_PRESSURE, f"KV cache {kv:.0%} full", spare_ttft=False)
    return None
