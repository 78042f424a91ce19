"""The law's relaxing rules: give back budget or sequences, only when it is safe to.

A relaxation needs the stabilisation window without a breach and margin under the SLO in both
windows, never happens while the waiting queue grows, never enters a range an undo has marked, and
never grows prefill spikes past what the tail can absorb. A time-to-first-token breach with decode
margin raises the budget sooner; with most first tokens late, as far as the present tail has room.
"""

from __future__ import annotations

import sys

from governor.controller.law.context import BUDGET, SEQS, Context, ms, quantize
from governor.controller.model import Action, ChangeKind, Decision, Reason, finite

# A waiting queue that grows faster than this (requests per second) is growing.
_QUEUE_GROWTH_EPSILON = 0.01
# Spikes at least this share of a full chunk's step mean prompts fill the budget.
_FILL_SHARE = 0.7


def on_ttft_breach(ctx: Context) -> Decision:
    if (ctx.tail or 0.0) > ctx.tuning.relax_margin * ctx.slo.itl_seconds:
        return ctx.hold(Reason.TTFT_BREACH, "time to first token breaches, but decode has no "
                        "margin to give a larger budget")
    budget = ctx.limits.max_num_batched_tokens
    step = max(ctx.tuning.budget_relax_step, budget // 2)
    # With the median first token late, a backlog holds first tokens past the SLO, and only
    # prefill brings them back: the present tail's room is the limit, not what the spikes
    # might become under more load (which keeps a steady load's relaxations short of the SLO).
    raised = budget_relax(ctx, budget + step)
    why = "time to first token breaches while decode has margin"
    if ctx.first_tokens_late:
        backlog = budget_relax(ctx, budget + step, backlog=True)
        if backlog != raised:
            raised, why = backlog, ("most first tokens are late, a backlog past the SLO, and "
                                    "the tail has room under the SLO")
    if raised is not None:
        return ctx.change(Action.RELAX, Reason.TTFT_BREACH, BUDGET, raised,
                          f"{why}: a larger budget prefills faster", kind=ChangeKind.RELAX)
    seqs = seqs_relax(ctx, queue_bound=True)
    if seqs is not None:
        return ctx.change(Action.RELAX, Reason.TTFT_BREACH, SEQS, seqs,
                          "time to first token breaches while requests wait for a slot",
                          kind=ChangeKind.RELAX)
    return ctx.hold(Reason.TTFT_BREACH, "time to first token breaches, and neither knob can "
                    "rise without risking the inter-token SLO")


def maybe_relax(ctx: Context) -> Decision:
    long_tail = finite(ctx.obs.itl_tail_long_seconds)
    if long_tail is None:
        return ctx.hold(Reason.MISSING_DATA, "no long-window inter-token tail to judge margin by")
    margin = ctx.tuning.relax_margin * ctx.slo.itl_seconds
    if max(ctx.tail or 0.0, long_tail) > margin:
        return ctx.hold(Reason.WITHIN_SLO, f"under the SLO but within {ms(margin)} of it "
                        f"(long window {ms(long_tail)})")
    if ctx.limits == ctx.target.ceiling:
        return ctx.hold(Reason.AT_CEILING, "both knobs at their start-up values")
    since = ctx.now - ctx.state.last_breach_at if ctx.state.last_breach_at is not None else None
    if since is not None and since < ctx.tuning.stabilisation_seconds:
        return ctx.hold(Reason.WAITING_FOR_STABILITY,
                        f"last breach {since:.0f}s ago; relaxing after "
                        f"{ctx.tuning.stabilisation_seconds:.0f}s")
    return relax_step(ctx)


def relax_step(ctx: Context) -> Decision:
    growth = finite(ctx.obs.waiting_growth_per_second)
    growing = growth is not None and growth > _QUEUE_GROWTH_EPSILON
    budget = ctx.limits.max_num_batched_tokens
    raised = None if growing else budget_relax(ctx, budget + ctx.tuning.budget_relax_step)
    if raised is not None:
        return ctx.change(Action.RELAX, Reason.STABLE, BUDGET, raised,
                          f"no breach for {ctx.tuning.stabilisation_seconds:.0f}s with margin",
                          kind=ChangeKind.RELAX)
    seqs = seqs_relax(ctx, queue_bound=growing)
    if seqs is not None:
        return ctx.change(Action.RELAX, Reason.STABLE, SEQS, seqs,
                          f"no breach for {ctx.tuning.stabilisation_seconds:.0f}s with margin",
                          kind=ChangeKind.RELAX)
    if growing:
        return ctx.hold(Reason.QUEUE_GROWING, f"the waiting queue grows ({growth:.2f}/s)")
    return ctx.hold(Reason.RELAX_BLOCKED, "the next step up was undone before at this load, or "
                    "its prefill spikes would lift the tail over the SLO")


def budget_relax(ctx: Context, wanted: int, *, backlog: bool = False) -> int | None:
    """The highest budget in (current, wanted] that no avoided range and no spike forbids
    (with ``backlog``, only the present tail's room under the SLO: see ``spike_room``)."""
    budget = ctx.limits.max_num_batched_tokens
    value = min(wanted, ctx.target.ceiling.max_num_batched_tokens)
    for avoid in ctx.state.avoid:
        if avoid.param is BUDGET and avoid.low <= value:
            value = min(value, avoid.low - 1)
    value = min(value, spike_room(ctx, budget, backlog=backlog))
    if value < ctx.target.ceiling.max_num_batched_tokens:
        value = quantize(ctx, value)
    # A step of a few dozen tokens changes nothing measurable; it only adds churn.
    worth = value >= ctx.target.ceiling.max_num_batched_tokens or \
        value - budget >= ctx.tuning.budget_relax_step // 4
    return value if value > budget and worth else None


def spike_room(ctx: Context, budget: int, *, backlog: bool = False) -> int:
    """The largest budget whose prefill spikes cannot lift the tail over the SLO.

    A larger budget never makes prefill steps more frequent (a prompt needs fewer chunks), it
    only makes each chunk step longer, by ``cost`` per token. So whatever the tail sits on now,
    raising the budget by ``room`` tokens raises it by at most ``cost * room``. And while the
    spikes fill the budget (prompts longer than it keep arriving), a single chunk step may not
    outgrow the relax margin: those spikes are rare now, but a little more load makes them the
    P99, and then their height is the tail. With ``backlog`` (first tokens wait past their SLO)
    the room is the present tail's alone: more load than now cannot be served in time anyway,
    prefill is what is short, and a long window reaching back past the last change holds the
    steps of other limits.
    """
    if not ctx.prompt_rate:
        return sys.maxsize
    tail = ctx.tail or 0.0
    last = ctx.state.last_change_at
    if not backlog or last is None or ctx.now - last >= ctx.tuning.long_window_seconds:
        tail = max(tail, finite(ctx.obs.itl_tail_long_seconds) or 0.0)
    room = budget + max(0, int((ctx.slo.itl_seconds - tail) / ctx.cost))
    if spikes_fill(ctx, budget) and not backlog:
        height = ctx.tuning.relax_margin * ctx.slo.itl_seconds - (ctx.median or 0.0)
        room = min(room, max(budget, int(height / ctx.cost)))
    return room


def spikes_fill(ctx: Context, budget: int) -> bool:
    """The tallest frequent steps are about as long as a full chunk of ``budget`` tokens."""
    spike, median = finite(ctx.obs.itl_spike_seconds), ctx.median or 0.0
    if spike is None:
        return False
    return spike >= median + _FILL_SHARE * ctx.cost * budget


def seqs_relax(ctx: Context, *, queue_bound: bool) -> int | None:
    """One step up for the sequence cap, when memory allows; with ``queue_bound`` only if the
    cap is what keeps requests waiting."""
    seqs, ceiling = ctx.limits.max_num_seqs, ctx.target.ceiling.max_num_seqs
    kv = finite(ctx.obs.kv_cache_usage_ratio)
    preemptions = finite(ctx.obs.preemptions_per_second) or 0.0
    running = finite(ctx.obs.requests_running)
    kv_full = kv is not None and kv > ctx.tuning.kv_relax_max_ratio
    if seqs >= ceiling or preemptions > 0 or kv_full:
        return None
    if queue_bound and (running is None or running < seqs):
        return None
    value = min(seqs + ctx.tuning.seqs_relax_step, ceiling)
    for avoid in ctx.state.avoid:
        if avoid.param is SEQS and avoid.low <= value:
            value = min(value, avoid.low - 1)
    return value if value > seqs else None
