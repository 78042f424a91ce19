"""Hold the limits for a breach that sits outside the engine. Pure.

The service measures where each request's time goes (:mod:`governor.contracts.stages`). The
batching limits move the engine's stages (admission, the engine's queue, prefill, decode) and
nothing else: a time to first token that breaches because prompts take longer to tokenize, or an
inter-token latency that breaches because clients read the stream slowly, is not fixed by cutting
or raising a budget, and a change made for it would be judged on a tail it did not cause.

So for each breaching latency — the inter-token tail (or its spikes at risk), the TTFT tail —
the guard compares, on the stages that latency lies on, the service's own stages with the
engine's, each as its median seconds per request (:meth:`QuerySet.stage_expressions`): a typical
request's time, which a few hostile clients cannot move. A client sets its own requests'
``read`` and ``stream_write``, so with means a few slow-header clients made any engine breach
look like ``read`` and turned the fix into a hold; a median moves only once most requests spend
the time there. The price: a service stage slow for a few requests only is no longer held for,
and the law decides as it does without stage readings (the ``BurnNotInEngine`` alert, on means,
still names it). It holds when every breach sits outside the engine, either way:

* **grown**: from the long window to the short one, the service's stages grew more than the
  engine's did, and by a material share of the latency (the alert's test, on the controller's
  windows);
* **most of it**: the service's stages take longer for a typical request than the engine's, so no
  change of the engine's could bring the latency down by much (this one outlasts the long
  window, which a long incident fills).

Without stage readings (stock vLLM, an older service), it lets the law decide as before::

    decision = held_outside_engine(ctx) or _decide(ctx)
"""

from __future__ import annotations

from governor.contracts.stages import BETWEEN_TOKENS, FIRST_TOKEN, Path, Shift, shift
from governor.controller.law.context import Context, ms
from governor.controller.model import Decision, Reason


def held_outside_engine(ctx: Context) -> Decision | None:
    """A hold when every breaching latency sits in the service's own stages; else ``None``."""
    breaches: list[tuple[str, Path]] = []
    if ctx.itl_trouble:
        breaches.append(("inter-token latency", BETWEEN_TOKENS))
    if ctx.ttft_breach:
        breaches.append(("time to first token", FIRST_TOKEN))
    if not breaches:
        return None
    reasons = []
    for name, path in breaches:
        moved = shift(path, ctx.obs.stage_seconds, ctx.obs.stage_seconds_long)
        if moved is None or not sits_outside(moved):
            return None  # no reading, or this breach may be the engine's: the law decides
        reasons.append(f"the {name} breach sits {_where(moved, path, ctx)}")
    return ctx.hold(Reason.NOT_IN_ENGINE, "; ".join(reasons) + ": no batching limit moves "
                    "that, so the limits stay")


def sits_outside(moved: Shift) -> bool:
    """Grown outside the engine, or mostly outside it now."""
    return moved.outside_engine or moved.service_seconds > moved.engine_seconds


def _where(moved: Shift, path: Path, ctx: Context) -> str:
    if moved.outside_engine and moved.stage is not None:
        return (f"in {moved.stage.value} (+{ms(moved.stage_growth_seconds)} per request "
                f"against the longer window; the engine's stages "
                f"{_signed(moved.engine_growth_seconds)})")
    now = ctx.obs.stage_seconds
    largest = max(path.service, key=lambda stage: now.get(stage.value, 0.0))
    return (f"outside the engine ({ms(moved.service_seconds)} per request in the service's "
            f"stages, {largest.value} the most, against {ms(moved.engine_seconds)} in the "
            "engine's)")


def _signed(seconds: float) -> str:
    return ("+" if seconds >= 0 else "-") + ms(abs(seconds))
