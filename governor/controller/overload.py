"""The law's goodput memory, its overload verdict and the scale-out advice. Pure.

Private to the decision law. Three pieces:

* **The ledger**: while the observation window holds only data from the limits in force, the law
  folds the estimated goodput (:mod:`governor.controller.goodput`) into a per-limits average, so
  it knows which limits served this demand best.
* **Overload**: the waiting queue has grown for ``overload_seconds`` at the limits in force while
  an SLO is missed, and neither direction is open: a budget cut is closed (at the floor, undone
  before for costing goodput, or prefill could not keep up with the prompts), and so is a
  relaxation (at the ceiling, undone before, or decode has no margin for taller prefill steps).
  No limits then meet both SLOs; chasing the inter-token tail would only trade one SLO for the
  other. The law moves to the limits its ledger saw serve the most goodput at this demand and
  holds them until the backlog has drained.
* **Scale-out advice**: in overload, HPA's ``desired = ceil(current * metric / target)`` with one
  replica per target, the demand (first tokens served plus the queue's growth) as the metric and
  what this replica served as the target, and no advice within ``scale_tolerance`` of 1.
"""

from __future__ import annotations

import math
from dataclasses import replace

from governor.controller import spike
from governor.controller.law_context import BUDGET, Context
from governor.controller.model import (
    NOT_OVERLOADED,
    OVERLOADED,
    WITHIN_TOLERANCE,
    Action,
    ChangeKind,
    Decision,
    LimitsScore,
    Param,
    Reason,
    ScaleAdvice,
    finite,
)

# How much of a new reading goes into a limits' running average.
_WEIGHT = 0.3


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
    if overload_since is not None and _drained(ctx):
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
    return (ctx.itl_breach or ctx.ttft_breach) and cut_closed(ctx) and relax_closed(ctx)


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
    """Hold the limits that served this demand best (moving there first, one knob a pass)."""
    since = ctx.now - (ctx.state.overload_since or ctx.now)
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


def best_score(ctx: Context) -> LimitsScore | None:
    """The ledger's best goodput at a demand comparable with the present one."""
    demand = ctx.demand
    if demand is None or demand <= 0:
        return None
    band = ctx.tuning.ledger_demand_band
    # Only scores seen while this backlog built: before it the load was another one.
    since = ctx.state.queue_growing_since or ctx.now
    comparable = [s for s in ctx.state.ledger
                  if abs(s.demand_per_second - demand) <= band * demand and s.at >= since]
    return max(comparable, key=lambda s: s.good_per_second, default=None)


def advice(ctx: Context) -> ScaleAdvice:
    """How many replicas the demand needs, by what this one serves (1 unless overloaded)."""
    served, demand = finite(ctx.obs.ttft_per_second), ctx.demand
    if ctx.state.overload_since is None or not served or demand is None:
        return ScaleAdvice(1, NOT_OVERLOADED, demand, served)
    ratio = demand / served
    if ratio <= 1 + ctx.tuning.scale_tolerance:
        return ScaleAdvice(1, WITHIN_TOLERANCE, demand, served)
    return ScaleAdvice(math.ceil(ratio), OVERLOADED, demand, served)
