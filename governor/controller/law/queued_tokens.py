"""The law's hold on vLLM's own admission bound, ``max_num_queued_tokens``. Pure.

Private to the decision law. vLLM 0.32 and later refuse a request (503) in an API process whose
requests in prefill hold that many prompt tokens; its docstring sizes the bound at the target
time to first token times the prefill throughput. The gate in front of stock vLLM reports the
bound and moves it live in every API process (``PUT /admin/admission``). While the target's
deadline gate refuses (the overload the law's slack knob acts in), the law sets the bound to that
product: the first-token SLO's threshold times the prompt tokens a saturated engine prefills per
second at the budget it chose, by the cost model it chose the budget with (a step carrying ``b``
prompt tokens takes ``d + cost * b``). It never sets it below one step's budget (the engine would
idle), nor above a bound the target had before (a user's bound is a promise too), and it hands
that bound back as soon as the gate stops refusing (the overload is over).

The gate judges each request by its own class's deadline; vLLM's bound is one number for every
class, counted in vLLM's own tokens (the gate estimates a prompt until vLLM has tokenized it), and
it holds with or without the gate's prediction. A target that reports no such bound (``governor
serve``, whose route does not move it, or a vLLM before 0.32) is left, and the law says so where
it moves the slack. A bound the controller refused where it entered (outside the admin API's
contract: 10^30, NaN, a fraction) is left too, and so is the law's memory of the bound to hand
back, as while the gate's slack is refused (whether the gate refuses is then unknown): nothing is
put or saved from such a reading.
"""

from __future__ import annotations

import math
from dataclasses import replace

from governor.contracts.admission import queued_tokens_within
from governor.controller.law import admission
from governor.controller.law.admission import gate_slack, gating, prefill_rate
from governor.controller.law.context import Context, ms
from governor.controller.model import QUEUED_TOKENS_FIELD, Decision, QueuedTokensChange

# A bound within this share of the one in force is not moved (no churn for a small change).
_MIN_MOVE = 0.05
FIELD = QUEUED_TOKENS_FIELD


def vllm_bound(ctx: Context) -> tuple[bool, int | None]:
    """Whether the target's vLLM has the bound to move, and the bound in force (``None``:
    unbounded): +Inf, or a bound the admin API's contract accepts."""
    value = ctx.obs.vllm_max_num_queued_tokens
    if value == math.inf:
        return True, None
    if value is None or not queued_tokens_within(value):
        return False, None
    return True, int(value)


def wanted(ctx: Context, budget: int) -> int | None:
    """The first-token target times the prefill rate at ``budget`` by the cost model, at least
    ``budget``; ``None`` without a first-token SLO or a median step to price it."""
    target, decode = ctx.slo.ttft_seconds, ctx.median
    if target is None or decode is None:
        return None
    return max(budget, round(target * prefill_rate(budget, decode, ctx.cost)))


def bound(ctx: Context, decision: Decision) -> Decision:
    """``decision`` with vLLM's bound moved, if the law moves it, and the state it leaves."""
    if FIELD in ctx.obs.refused or admission.FIELD in ctx.obs.refused:
        return decision
    has, current = vllm_bound(ctx)
    state = decision.state
    if not has:
        if gate_slack(ctx) is not None and decision.admission is not None:
            note = ("; vLLM's max_num_queued_tokens: the target reports none to move "
                    "(governor serve, or a vLLM before 0.32), so the slack is the only knob")
            decision = replace(decision, admission=replace(
                decision.admission, explanation=decision.admission.explanation + note))
        if state.queued_tokens_held:  # no longer reported: nothing to hand back to
            return replace(decision, state=replace(state, queued_tokens_held=False,
                                                   queued_tokens_from=None))
        return decision
    if gating(ctx):
        return _hold(ctx, decision, current)
    if not state.queued_tokens_held:
        return decision
    origin = state.queued_tokens_from
    text = (f"vLLM's max_num_queued_tokens {_show(current)} → {_show(origin)}: the gate refuses "
            "no more (the overload is over); the bound it had back")
    return _move(decision, current, origin, text, held=False, origin=None)


def _hold(ctx: Context, decision: Decision, current: int | None) -> Decision:
    budget = decision.after.max_num_batched_tokens
    found = wanted(ctx, budget)
    if found is None:
        return decision
    state = decision.state
    origin = state.queued_tokens_from if state.queued_tokens_held else current
    if origin is not None:
        found = min(found, origin)
    if current is not None and abs(found - current) <= _MIN_MOVE * current:
        return decision
    decode, cost = ctx.median or 0.0, ctx.cost
    target = ctx.slo.ttft_seconds or 0.0
    rate = prefill_rate(budget, decode, cost)
    text = (f"vLLM's max_num_queued_tokens {_show(current)} → {found}: the first-token target "
            f"{ms(target)} times {rate:.0f} prompt tokens/s, the prefill rate at the budget of "
            f"{budget} by the cost model (steps of {ms(decode)} plus {cost * 1e6:.1f} µs/token), "
            "as vLLM sizes the bound, while the gate refuses (vLLM counts it per API process)")
    return _move(decision, current, found, text, held=True, origin=origin)


def _move(decision: Decision, before: int | None, after: int | None, text: str, *, held: bool,
          origin: int | None) -> Decision:
    state = replace(decision.state, queued_tokens_held=held, queued_tokens_from=origin)
    return replace(decision, state=state, queued_tokens=QueuedTokensChange(before, after, text))


def _show(bound: int | None) -> str:
    return "unbounded" if bound is None else str(bound)
