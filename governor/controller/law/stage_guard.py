"""Hold the limits for a breach that sits outside the engine. Pure.

The service measures where each request's time goes (:mod:`governor.contracts.stages`). The
batching limits move the engine's stages (admission, the engine's queue, prefill, decode) and
nothing else: a time to first token that breaches because prompts take longer to tokenize, or an
inter-token latency that breaches because clients read the stream slowly, is not fixed by cutting
or raising a budget, and a change made for it would be judged on a tail it did not cause.

So for each breaching latency — the inter-token tail (or its spikes at risk), the TTFT tail —
the guard asks whether it is the engine's, two ways. A client sets its own requests' ``read``
(headers and body sent slowly) and ``stream_write`` (a stream read slowly), and both clocks
include them; it sets nothing of the time its request spends in the engine.

**Where a typical request's time goes.** On the stages that latency lies on, the service's own
stages against the engine's, each as its median seconds per request
(:meth:`QuerySet.stage_expressions`), which a few hostile clients cannot move (with means, a few
slow-header clients made any engine breach look like ``read`` and turned the fix into a hold).
The breach sits outside the engine when

* **grown**: from the long window to the short one, the service's stages grew more than the
  engine's did, and by a material share of the latency (the alert's test, on the controller's
  windows);
* **most of it**: the service's stages take longer for a typical request than the engine's, so no
  change of the engine's could bring the latency down by much (this one outlasts the long
  window, which a long incident fills).

**Whether the engine's tail explains it.** A few clients cannot move a median, but they can
breach a 99th percentile alone: 3% of requests sending their headers over 30 s breach a TTFT
SLO of 1 s with the engine idle. The breach is not the engine's when the engine's own part of
the tail fits within the SLO:

* time to first token: the engine's stages before the first token, each at most its reading at
  the quantile that makes their sum bound the SLO's (each stage at a third of the allowance; the
  top of the histogram bucket holding it), plus a typical request's own stages (their medians),
  at most the SLO's threshold;
* inter-token latency: the engine's own gaps (vLLM's histogram, on the engine's clock; every
  rank), at most the top of the bucket holding the SLO's quantile over the short window, or for
  spikes at risk the P99.9 over the long one, at most the threshold.

The margin is in the readings: each is the most its histogram allows (up to a bucket's width,
2.5x, over the interpolated quantile), and the stages' sum bounds the quantile of their total.
An engine whose tail lies within a bucket of the threshold is left to the law.

It holds when every breach is outside the engine, by any of these. Without stage readings or
the engine's gaps (stock vLLM: its own histograms are the SLIs, and their clocks start once the
request is read, so a slow client does not burn them), each test it lacks lets the law decide as
before::

    decision = held_outside_engine(ctx) or _decide(ctx)

A service stage slow for a few requests only is thereby held for where the engine's tail stays
within the SLO, and left to the law where it does not (the ``BurnNotInEngine`` alert, on means,
still names it).
"""

from __future__ import annotations

from collections.abc import Callable

from governor.contracts.stages import BETWEEN_TOKENS, FIRST_TOKEN, Path, Shift, shift
from governor.controller.law.context import Context, ms, pct
from governor.controller.model import Decision, Reason, finite

_ITL = "inter-token latency"
_TTFT = "time to first token"


def held_outside_engine(ctx: Context) -> Decision | None:
    """A hold when no breaching latency is the engine's; else ``None``."""
    breaches: list[tuple[str, Path, Callable[[Context], str | None]]] = []
    if ctx.itl_trouble:
        breaches.append((_ITL, BETWEEN_TOKENS, itl_not_in_engine))
    if ctx.ttft_breach:
        breaches.append((_TTFT, FIRST_TOKEN, ttft_not_in_engine))
    if not breaches:
        return None
    reasons = []
    for name, path, tail_test in breaches:
        moved = shift(path, ctx.obs.stage_seconds, ctx.obs.stage_seconds_long)
        if moved is not None and sits_outside(moved):
            reasons.append(f"the {name} breach sits {_where(moved, path, ctx)}")
            continue
        outside_tail = tail_test(ctx)
        if outside_tail is None:
            return None  # this breach may be the engine's: the law decides
        reasons.append(f"the {name} breach is not the engine's: {outside_tail}")
    return ctx.hold(Reason.NOT_IN_ENGINE, "; ".join(reasons) + ": no batching limit moves "
                    "that, so the limits stay")


def sits_outside(moved: Shift) -> bool:
    """Grown outside the engine, or mostly outside it now."""
    return moved.outside_engine or moved.service_seconds > moved.engine_seconds


def ttft_not_in_engine(ctx: Context) -> str | None:
    """Why the TTFT breach is not the engine's (its tail with a typical request's own stages
    fits within the SLO), or ``None``: it may be, or a reading is missing."""
    engine, threshold = ctx.obs.ttft_engine_tail_seconds, ctx.slo.ttft_seconds
    typical = [finite(ctx.obs.stage_seconds.get(stage.value)) for stage in FIRST_TOKEN.service]
    if engine is None or threshold is None or None in typical:
        return None
    own = sum(seconds for seconds in typical if seconds is not None)
    if engine + own > threshold:
        return None
    tails = ", ".join(f"{stage.value} {ms(ctx.obs.stage_tail_seconds[stage.value])}"
                      for stage in FIRST_TOKEN.engine)
    return (f"the engine's stages before the first token take at most {ms(engine)} at the "
            f"{pct(ctx.slo.ttft_quantile)} ({tails}) and a typical request's own stages "
            f"{ms(own)}, within the SLO's {ms(threshold)}; the requests over it spend the rest "
            "in their own stages (a client sending its request slowly)")


def itl_not_in_engine(ctx: Context) -> str | None:
    """Why the inter-token trouble is not the engine's (its own gaps at the quantile that is in
    trouble fit within the SLO), or ``None``: they may be, or there is no reading."""
    if ctx.itl_breach:
        gaps, where = ctx.obs.itl_engine_tail_seconds, pct(ctx.slo.itl_quantile)
    else:  # spikes at risk: the P99.9 over the long window is over the SLO
        gaps, where = ctx.obs.itl_engine_spike_seconds, "P99.9 over the longer window"
    seconds = finite(gaps)
    if seconds is None or seconds > ctx.slo.itl_seconds:
        return None
    return (f"the engine's own gaps are at most {ms(seconds)} at the {where} (every rank), "
            f"within the SLO's {ms(ctx.slo.itl_seconds)}; the gaps over it are the service's "
            "writes, at the pace of the clients reading them")


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
