"""Act on the verdict: retune only for what retuning fixes. Pure.

The generated rules name, per target and burning SLO, the causes of the breach and the share of
it each explains (:mod:`governor.contracts.causes`; the observation's ``itl_causes`` and
``ttft_causes``). The law reads them before it moves anything:

* a throttled, shared or faulty GPU anywhere in the verdict (:data:`NEVER_CUT_FOR`): **hold**. A
  cut would be judged on a tail it did not cause: the next verification would see the tail stay,
  deepen the cut, and starve prefill for nothing;
* a leading cause no batching limit moves (a saturated link, the service's own stages): **hold**,
  naming it;
* a leading cause of demand or of the GPU's saturation by the engine's own work (the queue,
  compute- or memory-bound): **hold and raise the scale-out signal**, a replica more than the
  target has (or as many as demand over what it serves, where the law measured both);
* batching, the KV cache, ``unknown``, or no verdict at all (the rules not loaded, the SLO not
  burning in the rules' window): the law decides as it always has, unless (with ``unknown`` or
  no verdict) a GPU condition holds, below, or (with ``unknown``) the inter-token breach is
  younger than :data:`UNKNOWN_GRACE_SECONDS`: the rules' evidence is read over windows, and
  some of it (the stages of a stream read slowly) arrives only as requests end.

Each breach is judged on its own SLO's verdict: the inter-token one while decode is in trouble,
the first-token one while only time to first token breaches. The controller's own window may
show a breach a rule evaluation before the rules do: meanwhile a GPU condition they already
record (a throttle, a co-tenant, a saturated link, a fault) holds the limits too. And where the
rules judge the target but have not yet judged a new inter-token breach (their burn ratio is
there, their verdict not), the law holds one pass for it (:data:`NEW_BREACH_GAP_SECONDS`): a
clock held down two scrapes ago shows in the tail a scrape or two before the rules can say it
was held, and a cut made in between is a cut for a throttled GPU::

    decision = held_for_cause(ctx, new_breach) or held_outside_engine(ctx) or _decide(ctx)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Final

from governor.contracts import causes
from governor.contracts.causes import NEVER_CUT_FOR, Action
from governor.controller.law.context import Context
from governor.controller.model import (
    CAPACITY_VERDICT,
    Decision,
    Reason,
    ScaleAdvice,
    finite,
    replicas_for,
)

_ITL: Final = "inter-token latency"


def _judged(ctx: Context) -> tuple[str, Mapping[str, float]] | None:
    """The breach the law is about to act on, and its verdict; ``None`` without one."""
    if ctx.itl_trouble and ctx.obs.itl_causes:
        return _ITL, ctx.obs.itl_causes
    if ctx.ttft_breach and not ctx.itl_trouble and ctx.obs.ttft_causes:
        return "time to first token", ctx.obs.ttft_causes
    return None


def ranked(verdict: Mapping[str, float]) -> list[tuple[causes.Cause, float]]:
    """The verdict's causes, largest share first; names the law does not know are left out.

    Each share is its cause's largest over the short window, so a verdict that changed within
    the window can name two causes in full (a memory-bound decode read ``batching`` for one
    evaluation: both at 1.0). Equal shares put what no batching limit fixes first, then the
    causes' own order: the law does not cut on half a window's word."""
    known = [(causes.by_name(name), share) for name, share in verdict.items()
             if name in causes.NAMES and finite(share) is not None]
    return sorted(known, key=lambda item: (-item[1], item[0].action is Action.RETUNE,
                                           causes.CAUSES.index(item[0])))


# How long an inter-token breach the rules call ``unknown`` is held for their evidence.
UNKNOWN_GRACE_SECONDS: Final = 30.0
# An inter-token breach is new when the last one the law saw ended this long ago (or never was).
NEW_BREACH_GAP_SECONDS: Final = 30.0


def new_breach(ctx: Context) -> bool:
    """Whether inter-token trouble in ``ctx`` is new: the state (before this observation was
    noted) saw none in the last :data:`NEW_BREACH_GAP_SECONDS`."""
    last = ctx.state.last_breach_at
    return ctx.itl_trouble and (last is None or ctx.now - last > NEW_BREACH_GAP_SECONDS)


def held_for_cause(ctx: Context, breach_is_new: bool = False) -> Decision | None:
    """A hold when the verdict blames what no batching limit fixes, or, on a new inter-token
    breach, while the rules have yet to judge it; else ``None``."""
    judged = _judged(ctx)
    if judged is None:
        return _held_for_condition(ctx) or (_awaiting_verdict(ctx) if breach_is_new else None)
    breach, verdict = judged
    order = ranked(verdict)
    if not order:
        return None
    text = ", ".join(f"{cause.name} {share:.0%}" for cause, share in order)
    gpu = [cause for cause, _ in order if cause.name in NEVER_CUT_FOR]
    leading = order[0][0]
    blamed = f"the {breach} breach is blamed on {text}"
    if gpu:
        return ctx.hold(Reason.OUTSIDE_BATCHING,
                        f"{blamed}; {gpu[0].name}: {gpu[0].summary}; no batching limit fixes "
                        "that, and a cut would be judged on a tail it did not cause")
    if leading is causes.UNKNOWN:
        # Nothing explains the breach yet (a slowed GPU shows in the tail before its median
        # grows): a GPU condition the rules record still forbids a cut, and a young inter-token
        # breach waits for evidence read over a window.
        return _held_for_condition(ctx) or _unexplained_while_young(ctx, breach)
    if leading.action is Action.HOLD:
        return ctx.hold(Reason.OUTSIDE_BATCHING,
                        f"{blamed}; {leading.name}: {leading.summary}; no batching limit fixes "
                        "that")
    if leading.action is Action.SCALE:
        return ctx.hold(Reason.CAPACITY,
                        f"{blamed}; {leading.name}: {leading.summary}; the limits stay and the "
                        "scale-out signal asks for more replicas")
    return None


def _held_for_condition(ctx: Context) -> Decision | None:
    """Before the rules' window shows the breach (the controller may see it first), a GPU
    condition the rules already record still forbids a cut."""
    if not (ctx.itl_trouble or ctx.ttft_breach):
        return None
    held = [(name, value) for name, value in sorted(ctx.obs.gpu_conditions.items())
            if name in _CONDITIONS and finite(value) is not None]
    if not held:
        return None
    name, value = held[0]
    cause = causes.by_name(name)
    measure = (f"{value:.0f} event(s) in the window" if cause is causes.GPU_FAULT
               else f"steps {value:.2f}x slower")
    return ctx.hold(Reason.OUTSIDE_BATCHING,
                    f"breaching while the GPU shows {name} ({measure}): {cause.summary}; no "
                    "batching limit fixes that, and the verdict will say how much of the breach "
                    "it explains")


def _awaiting_verdict(ctx: Context) -> Decision | None:
    """A new inter-token breach the rules judge the target for but have no verdict on yet:
    one pass for them to name its cause before anything moves."""
    burn = finite(ctx.obs.itl_verdict_burn)
    if not ctx.itl_trouble or ctx.obs.itl_causes or burn is None:
        return None
    return ctx.hold(Reason.AWAITING_VERDICT,
                    f"a new inter-token breach the rules have not judged yet (their burn "
                    f"{burn:.2f}x): the next pass acts on their verdict, so that no cut is made "
                    "for a GPU condition they are about to record")


def _unexplained_while_young(ctx: Context, breach: str) -> Decision | None:
    """An inter-token breach younger than :data:`UNKNOWN_GRACE_SECONDS` that the rules cannot
    explain yet: hold. Their evidence is read over windows, and some of it arrives only as
    requests end (the stages of a stream read slowly are observed when the stream ends), so
    ``unknown`` in a breach's first seconds is mostly evidence not yet in."""
    began = ctx.state.breach_began_at
    if not ctx.itl_trouble or breach != _ITL or began is None:
        return None
    age = ctx.now - began
    if age >= UNKNOWN_GRACE_SECONDS:
        return None
    return ctx.hold(Reason.AWAITING_VERDICT,
                    f"the rules cannot explain the inter-token breach {age:.0f} s into it: their "
                    f"evidence is read over windows; the law acts on it after "
                    f"{UNKNOWN_GRACE_SECONDS:.0f} s if it still names nothing")


# The conditions read before any verdict: the GPU's, which no cut may be made for.
_CONDITIONS = NEVER_CUT_FOR | {causes.INTERCONNECT.name}


def scale(ctx: Context, decision: Decision, advice: ScaleAdvice) -> ScaleAdvice:
    """The law's own advice, raised to a replica more while the verdict blames capacity."""
    if decision.reason is not Reason.CAPACITY or advice.replicas > 1:
        return advice
    served, demand = finite(ctx.obs.ttft_per_second), ctx.demand
    wanted = 2
    if served and demand is not None and demand > served:
        wanted = max(wanted, math.ceil(replicas_for(demand, served)))
    return replace(advice, replicas=wanted, reason=CAPACITY_VERDICT, demand_per_second=demand,
                   served_per_second=served)
