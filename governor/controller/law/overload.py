"""The law's goodput memory, its overload verdict and the scale-out advice. Pure.

Private to the decision law. Three pieces:

* **The ledger**: while the observation window holds only data from the limits in force, the law
  folds the estimated goodput (:mod:`governor.controller.law.goodput`) into a per-limits average, so
  it knows which limits served this demand best.
* **Overload**: the waiting queue has grown for ``overload_seconds`` at the limits in force while
  an SLO is missed, and neither direction is open: a budget cut is closed (at the floor, undone
  before for costing goodput, or prefill could not keep up with the prompts), and so is a
  relaxation (at the ceiling, undone before, or decode has no margin for taller prefill steps);
  or the backlog already holds every first token past its SLO. No limits then meet both SLOs;
  chasing the inter-token tail would only trade one SLO for the other. While some first tokens
  still meet their SLO, the law moves to the budget its cost model puts the chunk step under the
  SLO at (or, where the model leaves the choice open, to the limits its ledger saw serve the
  most goodput) and holds it. Once none do, no request starting now can be good whatever decode
  does: goodput comes back only when the backlog is gone, so the law takes the budget that
  prefills fastest (the ceiling) and hands back the one it held as the backlog ends.
* **Scale-out advice**: in overload, HPA's ``desired = ceil(current * metric / target)`` with one
  replica per target, the demand (first tokens served plus the queue's growth) as the metric and
  what this replica served as the target, and no advice within ``scale_tolerance`` of 1.
"""

from __future__ import annotations

import math
from dataclasses import replace

from governor.controller.law import spike
from governor.controller.law.context import BUDGET, Context, below_avoided, ms, quantize
from governor.controller.model import (
    NOT_OVERLOADED,
    OVERLOADED,
    WITHIN_TOLERANCE,
    Action,
    Avoid,
    ChangeKind,
    Decision,
    LimitsScore,
    Param,
    Reason,
    ScaleAdvice,
    finite,
    replicas_for,
)

# How much of a new reading goes into a limits' running average.
_WEIGHT = 0.3
# Under overload a budget under the SLO is raised to the aim only when this share of it is
# missing: less changes the prefill capacity by too little to be worth a change.
_RAISE_SHARE = 0.1


def scoring(ctx: Context) -> Context:
    """``ctx`` with this observation folded into the ledger entry of the limits in force."""
    good, share, demand = ctx.good, ctx.good_share, ctx.demand
    if not ctx.window_is_clean or good is None or share is None or demand is None:
        return ctx
    kept = [s for s in ctx.state.ledger
            if s.limits != ctx.limits and ctx.now - s.at < ctx.tuning.avoid_seconds]
    old = next((s for s in ctx.state.ledger if s.limits == ctx.limits), None)
    if old is None or ctx.now - old.at >= ctx.tuning.avoid_seconds:
        new = LimitsScore(ctx.limits, good, share, demand, ctx.now)
    else:
        new = LimitsScore(ctx.limits, _mix(old.good_per_second, good),
                          _mix(old.good_share, share), _mix(old.demand_per_second, demand),
                          ctx.now, old.samples + 1)
    ledger = tuple([*kept, new][-ctx.tuning.ledger_size:])
    return replace(ctx, state=replace(ctx.state, ledger=ledger))


def _mix(old: float, new: float) -> float:
    return (1 - _WEIGHT) * old + _WEIGHT * new


def tracking(ctx: Context) -> Context:
    """``ctx`` with the queue's growth and the overload verdict brought up to date."""
    state = ctx.state
    growing_since = (state.queue_growing_since or ctx.now) if ctx.queue_growing else None
    overload_since = state.overload_since
    # A drain outlives its overload until it has handed its budget back: a burst's backlog can
    # be gone before the next pass, and the inter-token rules would start from the ceiling.
    if overload_since is not None and _drained(ctx) and state.drain_from is None:
        overload_since = None
    elif overload_since is None and _overloaded(ctx, growing_since):
        overload_since = ctx.now
    return replace(ctx, state=replace(state, queue_growing_since=growing_since,
                                      overload_since=overload_since))


def _drained(ctx: Context) -> bool:
    waiting = ctx.waiting
    return not ctx.queue_growing and (waiting is None or waiting < ctx.tuning.queue_min_waiting)


def _overloaded(ctx: Context, growing_since: float | None) -> bool:
    if growing_since is None or ctx.now - growing_since < ctx.tuning.overload_seconds:
        return False
    # A backlog that holds every first token past its SLO is overload whatever the other rules
    # could still try: a cut only prefills slower, and the way out is the drain (``_drain``).
    return (ctx.itl_breach or ctx.ttft_breach) and (
        first_tokens_lost(ctx) or (cut_closed(ctx) and relax_closed(ctx)))


def cut_closed(ctx: Context) -> bool:
    """No lower budget can help: the floor, a cut undone for goodput, or prefill saturation."""
    budget, q = ctx.limits.max_num_batched_tokens, ctx.tuning.budget_quantum
    if budget - q < ctx.target.floor.max_num_batched_tokens or ctx.blocked(BUDGET, budget - q):
        return True
    rate = ctx.prompt_rate
    if rate is None:
        return False
    needed = spike.min_budget_for_prefill(rate, ctx.median or 0.0,
                                          ctx.tuning.prefill_seconds_per_token_prior, 1.0)
    return needed >= budget - q


def relax_closed(ctx: Context) -> bool:
    """No higher budget can help: the ceiling, a relaxation undone, or no decode margin."""
    budget, q = ctx.limits.max_num_batched_tokens, ctx.tuning.budget_quantum
    if budget + q > ctx.target.ceiling.max_num_batched_tokens or ctx.blocked(BUDGET, budget + q):
        return True
    return (ctx.tail or 0.0) > ctx.tuning.relax_margin * ctx.slo.itl_seconds


def in_overload(ctx: Context) -> Decision:
    """Drain a backlog that holds every first token past its SLO at the budget that prefills
    fastest; otherwise hold the budget the cost model picks for overload (moving there first),
    or the limits that served this demand best when the model leaves the choice open."""
    since = ctx.now - (ctx.state.overload_since or ctx.now)
    if backlog_decides(ctx):
        return _drain(ctx, since)
    if ctx.state.drain_from is not None:
        return _hand_back(ctx, ctx.state.drain_from)
    if first_tokens_lost(ctx):
        # Decode cannot make a request good here, so the cost model has nothing to keep.
        return ctx.hold(Reason.BACKLOG, f"{_lost(ctx, since)}; a larger budget drains it no "
                        "faster here (tried in this overload, or the KV cache is full and "
                        "preempts) and a smaller one prefills slower: holding until it is gone")
    planned = planned_budget(ctx)
    if planned is not None:
        return _to_planned(ctx, planned, since)
    best = best_score(ctx)
    here = next((s for s in ctx.state.ledger if s.limits == ctx.limits), None)
    # One move per overload: once there, goodput estimates under a growing backlog only decay,
    # and comparing their decay would swing between limits.
    moved = (ctx.state.last_change_at or -math.inf) >= (ctx.state.overload_since or ctx.now)
    if not moved and best is not None and here is not None and best.limits != ctx.limits and \
            best.good_per_second > here.good_per_second * (1 + ctx.tuning.goodput_tolerance):
        param = next(p for p in (BUDGET, Param.MAX_NUM_SEQS)
                     if best.limits.get(p) != ctx.limits.get(p))
        return ctx.change(
            Action.UNDO, Reason.OVERLOAD, param, best.limits.get(param),
            f"overloaded for {since:.0f}s (the queue grows and no limits meet both SLOs); "
            f"back to the limits that served ~{best.good_per_second:.2f} good req/s at this "
            "demand", kind=ChangeKind.UNDO)
    return ctx.hold(Reason.OVERLOAD, f"overloaded for {since:.0f}s: the queue grows, a cut "
                    "would starve prefill and a relaxation would stretch decode; holding the "
                    "limits that serve the most goodput until the backlog drains")


# -- a backlog past the first-token SLO -------------------------------------------------------
#
# A request is good only if its first token meets the TTFT SLO. Once the backlog holds every
# first token past it, no request starting now can be good, whatever the budget does to decode:
# the requests decoding now are already lost, and those waiting are lost until the backlog is
# gone. The only thing the limits still change is how soon that is, so the budget that prefills
# fastest serves the most goodput. A larger budget never prefills slower (a step of ``b`` prompt
# tokens takes ``d + cost * b``, so ``b / (d + cost * b)`` tokens a second grows with ``b``; on
# the H200 time to first token falls as the budget grows, docs/h200-measurements.md): the
# ceiling. The law holds it while the backlog drains. As it ends, the first requests are served
# in time again, and they must decode in time: when the backlog's slope says it is gone within a
# cooldown, or half the first tokens meet their SLO again, the law hands back the budget it held
# before the drain. (Not the cost model's budget: the tail of a saturated ceiling is a chunk step
# under the heaviest decode load of the episode, and its budget cut prefill by a third for the
# drain's last minute.) Not while the engine preempts: then a full cache bounds the drain, not
# prefill, and a larger budget admits more prompts into it whose prefill is done again when they
# are preempted to make room; the law goes back to the cost model and stays below.


def first_tokens_lost(ctx: Context) -> bool:
    """Fewer than ``backlog_ttft_share`` of first tokens meet the TTFT SLO (never without a
    TTFT SLO, or without first tokens to judge by)."""
    share = ctx.ttft_share
    return share is not None and share < ctx.tuning.backlog_ttft_share


def drain_seconds(ctx: Context) -> float:
    """How long the backlog takes to drain at the queue's present slope (inf: not shrinking)."""
    growth, waiting = finite(ctx.obs.waiting_growth_per_second), ctx.waiting
    if growth is None or waiting is None or growth >= 0:
        return math.inf
    return waiting / -growth


def backlog_decides(ctx: Context) -> bool:
    """A drain to start or to go on with: the backlog, not decode, decides goodput.

    One drain per overload, as its first move, while the queue grows and first tokens are lost;
    once started it goes on until the backlog's end is near, whether first tokens flicker over
    the threshold or the queue's slope with them, so it does not swing. Never while the engine
    preempts.
    """
    if ctx.preempting:
        return False
    if ctx.state.drain_from is not None:
        return not drain_ending(ctx)
    first_move = (ctx.state.last_change_at or -math.inf) < (ctx.state.overload_since or ctx.now)
    return first_move and first_tokens_lost(ctx) and ctx.queue_growing and \
        drain_budget(ctx) is not None


def early_hand_back(ctx: Context) -> Decision | None:
    """A drain whose end is near hands its budget back inside its cooldown: the move it undoes
    is not verified, and each pass at the ceiling costs the requests now served in time their
    decode (a burst's backlog can be gone within the cooldown of the drain itself)."""
    if ctx.state.drain_from is None or ctx.preempting or not drain_ending(ctx):
        return None
    return _hand_back(ctx, ctx.state.drain_from)


def drain_ending(ctx: Context) -> bool:
    """The backlog is gone within a cooldown at its present slope, or half the first tokens
    meet their SLO again."""
    return drain_seconds(ctx) <= ctx.tuning.cooldown_seconds or \
        (ctx.ttft_share is not None and not ctx.first_tokens_late)


def drain_budget(ctx: Context) -> int | None:
    """The largest budget above the one in force that no avoided range blocks (``None``:
    none; the ceiling unless the cache preempted there at this load)."""
    budget = ctx.limits.max_num_batched_tokens
    found = below_avoided(ctx, BUDGET, ctx.target.ceiling.max_num_batched_tokens, budget + 1)
    return found if found is not None and found > budget else None


def _lost(ctx: Context, since: float) -> str:
    return (f"overloaded for {since:.0f}s with {ctx.ttft_share or 0.0:.0%} of first tokens within "
            "the TTFT SLO: the backlog holds every request past it whatever decode does, and "
            "only its drain brings goodput back")


def _drain(ctx: Context, since: float) -> Decision:
    why = f"{_lost(ctx, since)}; the largest budget prefills fastest"
    top = drain_budget(ctx)
    if top is not None and ctx.state.drain_from is None:
        state = replace(ctx.state, drain_from=ctx.limits.max_num_batched_tokens)
        return ctx.change(Action.RELAX, Reason.BACKLOG, BUDGET, top, why, kind=ChangeKind.UNDO,
                          state=state)
    eta = drain_seconds(ctx)
    left = "the queue grows" if math.isinf(eta) else f"~{eta:.0f}s of backlog left"
    return ctx.hold(Reason.BACKLOG, f"{why}; held until the backlog is gone ({left})")


def _hand_back(ctx: Context, budget: int) -> Decision:
    """End a drain: the budget held before it, for the first requests served in time again;
    or, where the full cache preempts, because a larger budget drains no faster."""
    eta, share = drain_seconds(ctx), ctx.ttft_share or 0.0
    ctx = replace(ctx, state=replace(ctx.state, drain_from=None))
    avoid: tuple[Avoid, ...] = ()
    if ctx.preempting:
        why = ("the KV cache is full and preempts, so a larger budget drains no faster (the "
               "prefill of every request preempted is done again); no higher while the load "
               "stays")
        avoid = ctx.avoid(BUDGET, budget + 1, ctx.target.ceiling.max_num_batched_tokens)
    elif eta <= ctx.tuning.cooldown_seconds:
        why = f"~{eta:.0f}s of backlog left"
    else:
        why = f"{share:.0%} of first tokens within the TTFT SLO again"
    if budget == ctx.limits.max_num_batched_tokens:
        return ctx.hold(Reason.BACKLOG, f"the drain ends ({why})")
    action = Action.TIGHTEN if budget < ctx.limits.max_num_batched_tokens else Action.RELAX
    return ctx.change(action, Reason.BACKLOG, BUDGET, budget,
                      f"the drain ends ({why}): back to {budget}, the budget before it, so the "
                      "first requests served in time decode in time", kind=ChangeKind.UNDO,
                      avoid=avoid)


# -- the cost model's budget under overload -------------------------------------------------------
#
# Under overload prefill runs in nearly every step (the backlog always has a prompt to chunk), so
# the inter-token tail is a chunk step: the decode part of a step (at its own tail, with every
# running sequence) plus ``cost * budget``. Goodput is then the requests decoded within the SLO:
# none once the chunk step passes the SLO (every gap is slow), all of them below it, at a rate
# that grows with the prefill capacity, which grows with the budget. So the most goodput is at
# the largest budget whose chunk step stays under the SLO. The decode part does not depend on
# the budget, so that budget is the one in force moved by the tail's distance to the aim over
# the cost per token; the law aims at ``aim_fraction`` of the SLO, like a cut, for the error in
# the learnt cost, and holds anywhere between the aim and the SLO. (The median is no plain decode
# step here: it is a chunk step too.)


def overload_cost(ctx: Context) -> float:
    """Step time per prefill token under overload: what the law learnt, or what the tail over
    the median implies at the budget in force, whichever is higher."""
    tail, median = ctx.tail, ctx.median
    read = spike.learn_cost(tail, median, ctx.limits.max_num_batched_tokens) \
        if tail is not None and median is not None else None
    return max(ctx.cost, read or 0.0)


def planned_budget(ctx: Context) -> int | None:
    """The budget the cost model wants under overload; ``None``: the budget in force is within
    its band (its tail under the SLO and within a tenth of the aim's budget), or the model has
    no reading."""
    tail = ctx.tail
    if tail is None:
        return None
    budget, cost = ctx.limits.max_num_batched_tokens, overload_cost(ctx)
    aim = budget + (ctx.tuning.aim_fraction * ctx.slo.itl_seconds - tail) / cost
    lowest = max(ctx.target.floor.max_num_batched_tokens, _running_decodes(ctx))
    top = ctx.target.ceiling.max_num_batched_tokens
    wanted = min(top, max(lowest, quantize(ctx, aim)))
    # Under the SLO and within a tenth of the aim: no churn for a few tokens of capacity.
    if tail <= ctx.slo.itl_seconds and budget >= (1 - _RAISE_SHARE) * wanted:
        return None
    return None if wanted == budget else wanted


def _within_model(ctx: Context, budget: int) -> bool:
    """A budget whose chunk step the model puts under the SLO."""
    return (ctx.tail or 0.0) + overload_cost(ctx) * (
        budget - ctx.limits.max_num_batched_tokens) <= ctx.slo.itl_seconds


def _running_decodes(ctx: Context) -> int:
    """Each running decode takes one token of the budget."""
    running = finite(ctx.obs.requests_running) or 0.0
    q = ctx.tuning.budget_quantum
    return math.ceil((running + 1) / q) * q


def _to_planned(ctx: Context, planned: int, since: float) -> Decision:
    budget, cost, tail = ctx.limits.max_num_batched_tokens, overload_cost(ctx), ctx.tail or 0.0
    after = ms(tail + cost * (planned - budget))
    action = Action.TIGHTEN if planned < budget else Action.RELAX
    text = (f"overloaded for {since:.0f}s (the queue grows whatever the limits); prefill runs in "
            f"every step, so the tail is a chunk step: ~{ms(tail)} at {budget}, ~{after} at "
            f"{planned} ({cost * 1e6:.1f} µs/token), the largest budget that keeps decode within "
            "the SLO and so serves the most goodput")
    return ctx.change(action, Reason.OVERLOAD, BUDGET, planned, text, kind=ChangeKind.UNDO)


def best_score(ctx: Context) -> LimitsScore | None:
    """The ledger's best goodput at a demand comparable with the present one, among the limits
    whose chunk step the cost model puts under the SLO."""
    demand = ctx.demand
    if demand is None or demand <= 0:
        return None
    band = ctx.tuning.ledger_demand_band
    # Only scores seen while this backlog built: before it the load was another one.
    since = ctx.state.queue_growing_since or ctx.now
    comparable = [s for s in ctx.state.ledger
                  if abs(s.demand_per_second - demand) <= band * demand and s.at >= since
                  and _within_model(ctx, s.limits.max_num_batched_tokens)]
    return max(comparable, key=lambda s: s.good_per_second, default=None)


def advice(ctx: Context) -> ScaleAdvice:
    """How many replicas the demand needs, by what this one serves (1 unless overloaded)."""
    served, demand = finite(ctx.obs.ttft_per_second), ctx.demand
    if ctx.state.overload_since is None or not served or demand is None:
        return ScaleAdvice(1, NOT_OVERLOADED, demand, served)
    ratio = replicas_for(demand, served)
    if ratio <= 1 + ctx.tuning.scale_tolerance:
        return ScaleAdvice(1, WITHIN_TOLERANCE, demand, served)
    return ScaleAdvice(math.ceil(ratio), OVERLOADED, demand, served)
