"""The law's third knob: the deadline slack of the target's admission gate. Pure.

Private to the decision law. A deadline gate (``governor serve --deadlines``, or the gate in
front of stock vLLM) refuses a request when the prompt tokens ahead of it, over the prefill rate
it measures, would keep its first token past its class's deadline (its TTFT target times the
slack). It measures that rate as an average over about half a minute, so for that long after a
budget cut it still believes the engine prefills as fast as before the cut, and admits requests
that the slower engine will serve late; after a raise it refuses some that would have been in
time, which costs goodput but no promise.

The law knows by how much a budget change moves the prefill rate, by the cost model it chose the
budget with: a step that carries a budget ``b`` of prompt tokens takes ``d + cost * b`` (the
median step ``d``, the learnt cost per token), so a saturated engine prefills
``b / (d + cost * b)`` tokens a second. With a budget cut from ``b0`` to ``b1`` while the gate
refuses, the law lowers the slack by the ratio of those rates, which is what the gate's deadline
check would compute were its rate already the new one; once the gate's average has caught up
(``admission_catch_up_seconds``), or as soon as the gate stops refusing (the overload is over),
it hands the slack it found back. It never raises the slack above what it found: a wider deadline
admits requests the SLO says are late.

Behind a gate that refuses, the TTFT guard of a budget cut yields too (``gating``): the gate
holds the backlog at about a deadline's worth of prefill, so a budget that prefills less than
arrives costs refusals, not first tokens past their SLO; the scale signal still counts the
demand.

A slack the controller refused where it entered (outside the admin API's contract, [0.01, 100]:
10^30, NaN) moves nothing, and the slack to hand back stays in the law's memory for when the gate
reports one again.
"""

from __future__ import annotations

from dataclasses import replace

from governor.contracts.admission import slack_within
from governor.controller.law.context import Context, ms
from governor.controller.model import SLACK_FIELD, AdmissionChange, Decision, finite

# Refusals per second under which the gate is not shedding (a few stray requests an hour).
_GATING_PER_SECOND = 0.05
# The lowest slack the law sets: a deadline a fifth of its target still admits a request with
# a little ahead of it, and the cost model's ratio may be off. (A person may set a gate lower,
# down to the contract's own floor, contracts.admission.MIN_SLACK.)
LAW_MIN_SLACK = 0.2
# A rate ratio closer to 1 than this moves no slack (no churn for a small change).
_MIN_MOVE = 0.05
FIELD = SLACK_FIELD


def gate_slack(ctx: Context) -> float | None:
    """The slack the target's gate reports in force (``None``: no gate, or a slack outside the
    admin API's contract)."""
    slack = ctx.obs.deadline_slack
    return slack if slack is not None and slack_within(slack) else None


def gating(ctx: Context) -> bool:
    """The target has a deadline gate and it turns requests away: the backlog is bounded."""
    refused = finite(ctx.obs.admission_refused_per_second)
    return gate_slack(ctx) is not None and refused is not None and refused > _GATING_PER_SECOND


def prefill_rate(budget: int, decode_seconds: float, cost: float) -> float:
    """Prompt tokens a saturated engine prefills per second at ``budget`` (the cost model).

    >>> round(prefill_rate(4096, 0.076, 25e-6)), round(prefill_rate(1024, 0.076, 25e-6))
    (22961, 10079)
    """
    return budget / (decode_seconds + cost * budget)


def bound(ctx: Context, decision: Decision) -> Decision:
    """``decision`` with the admission knob's move, if any, and the state it leaves; none, and
    the state as it was, while the slack's reading is refused (outside the contract)."""
    if FIELD in ctx.obs.refused:
        return decision
    slack = gate_slack(ctx)
    state = decision.state
    if slack is None:
        if state.slack_from is None:
            return decision
        # The gate is gone (or no longer reports): nothing to hand back to.
        return replace(decision, state=replace(state, slack_from=None, slack_since=None))
    before, after = decision.before.max_num_batched_tokens, decision.after.max_num_batched_tokens
    if after < before and gating(ctx):
        return _lower(ctx, decision, slack, before, after)
    if state.slack_from is None:
        return decision
    since = ctx.now - (state.slack_since or ctx.now)
    if gating(ctx) and since < ctx.tuning.admission_catch_up_seconds:
        return decision
    why = (f"the gate's measured rate has had {since:.0f}s to follow the cut" if gating(ctx)
           else "the gate refuses no more (the overload is over)")
    return _move(decision, slack, state.slack_from,
                 f"slack {slack:g} → {state.slack_from:g}: {why}; the slack it had back",
                 slack_from=None, since=None)


def _lower(ctx: Context, decision: Decision, slack: float, before: int, after: int) -> Decision:
    decode, cost = ctx.median or 0.0, ctx.cost
    ratio = prefill_rate(after, decode, cost) / prefill_rate(before, decode, cost)
    if ratio > 1 - _MIN_MOVE:
        return decision
    base = decision.state.slack_from or slack
    wanted = round(max(LAW_MIN_SLACK, min(slack, base * ratio)), 3)
    if wanted >= slack:
        if decision.state.slack_from is None:
            return decision
        # Already lower for an earlier cut: held for this one's catch-up too.
        return replace(decision, state=replace(decision.state, slack_since=ctx.now))
    text = (f"slack {slack:g} → {wanted:g}: the budget cut from {before} to {after} prefills "
            f"{ratio:.0%} as fast by the cost model (steps of {ms(decode)} plus "
            f"{cost * 1e6:.1f} µs/token) while the gate refuses; its measured rate lags the cut "
            f"by ~{ctx.tuning.admission_catch_up_seconds:.0f}s, and would admit requests the "
            "slower engine serves late")
    return _move(decision, slack, wanted, text, slack_from=base, since=ctx.now)


def _move(decision: Decision, slack: float, wanted: float, text: str, *,
          slack_from: float | None, since: float | None) -> Decision:
    state = replace(decision.state, slack_from=slack_from, slack_since=since)
    return replace(decision, state=state, admission=AdmissionChange(slack, wanted, text))


def guard_yields(ctx: Context) -> bool:
    """The TTFT guard of a budget cut yields behind a gate that refuses (see the module)."""
    return gating(ctx)

