"""The law where one replica cannot serve the load: a backlog past the first-token SLO, the TTFT
guard where no decode passes, and verdicts while the load grows (table-driven, fake clock)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from governor.controller.law.tuning import LawConfig, LawConfigError
from governor.controller.model import (
    Action,
    ChangeKind,
    Decision,
    Limits,
    Observation,
    Param,
    Probe,
    Reason,
    TargetLimits,
    TargetState,
)
from tests.controller.law.test_decide import (
    CEILING,
    LAW,
    T0,
    calm,
    cut_probe,
    overloaded,
    run,
    spiky,
    target,
)


def lost(**overrides: float | None) -> Observation:
    """Overloaded, and the backlog holds every first token past its SLO (8 first tokens a
    second, none within it)."""
    return overloaded(**{"ttft_good_per_second": 0.0, **overrides})


def walk(obs: Observation, limits: TargetLimits, steps: int, *,
         state: TargetState | None = None, start: float = T0) -> list[Decision]:
    """Reconcile every 15 s on the same observation, the limits following the decisions."""
    decisions, state = [], state or TargetState()
    for k in range(steps):
        decision = run(obs, state=state, now=start + 15 * k, limits=limits)
        decisions.append(decision)
        state, limits = decision.state, replace(limits, current=decision.after)
    return decisions


# -- a backlog past the first-token SLO --------------------------------------------------------
def test_a_backlog_that_holds_every_first_token_past_its_slo_is_drained_at_the_ceiling() -> None:
    decisions = walk(lost(), target(budget=2048), 12)
    moved = [d for d in decisions if d.changes]
    assert len(moved) == 1
    (drain,) = moved
    # Overload needs the queue to have grown for overload_seconds first.
    assert drain.state.overload_since is not None
    assert drain.state.overload_since - T0 >= LAW.overload_seconds
    assert (drain.action, drain.reason, drain.after) == (Action.RELAX, Reason.BACKLOG, CEILING)
    assert "0% of first tokens within the TTFT SLO" in drain.explanation
    assert "the largest budget prefills fastest" in drain.explanation
    # The move is not judged by the inter-token verdicts: no request here can meet that SLO.
    assert drain.state.probe is not None and drain.state.probe.kind is ChangeKind.UNDO
    assert drain.state.drain_from == 2048  # handed back as the backlog ends
    # The scale-out signal is the same as under any overload: ceil(demand 10 / served 8) = 2.
    assert (drain.scale.replicas, drain.scale.reason) == (2, "overload")


def test_at_the_ceiling_the_drain_holds_until_the_backlog_is_gone() -> None:
    draining = TargetState(overload_since=T0 - 300, queue_growing_since=T0 - 600,
                           last_change_at=T0 - 200, drain_from=2048)
    growing = run(lost(), state=draining, limits=target())
    assert (growing.action, growing.reason) == (Action.HOLD, Reason.BACKLOG)
    assert "held until the backlog is gone (the queue grows)" in growing.explanation
    # Draining, a few first tokens in time again (a quarter, over the threshold that started
    # the drain): the budget stays up, or the backlog's last minutes would prefill slower.
    flicker = run(lost(waiting_growth_per_second=-2.0, ttft_good_per_second=2.0),
                  state=draining, limits=target())
    assert (flicker.action, flicker.reason) == (Action.HOLD, Reason.BACKLOG)
    assert "~200s of backlog left" in flicker.explanation
    # Gone before a pass saw its end near: the budget before the drain comes back first, then
    # the overload ends and the inter-token rules take over from there.
    empty = spiky(0.2, ttft_good_per_second=8.0, ttft_per_second=8.0, requests_waiting=1.0,
                  waiting_growth_per_second=-1.0)
    back = run(empty, state=draining, limits=target())
    assert (back.action, back.reason, back.after.max_num_batched_tokens) == (
        Action.TIGHTEN, Reason.BACKLOG, 2048)
    assert back.state.overload_since is not None
    after = run(empty, state=replace(back.state, probe=None), now=T0 + LAW.cooldown_seconds,
                limits=target(budget=2048))
    assert after.state.overload_since is None


def test_with_first_tokens_in_time_the_cost_model_keeps_the_budget() -> None:
    # Half the first tokens meet their SLO: those requests must decode in time, so the law keeps
    # the chunk step under the SLO (test_decide.py beside this file holds the cost model's moves).
    since = TargetState(overload_since=T0 - 300, queue_growing_since=T0 - 600,
                        last_change_at=T0 - 200)
    decision = run(overloaded(), state=since, limits=target(budget=2048))
    assert (decision.action, decision.reason) == (Action.HOLD, Reason.OVERLOAD)
    # With none in time, decode cannot make a request good: the cost model has nothing to keep,
    # and a shrinking backlog (or a drain already tried in this overload) is held as it is.
    shrinking = run(lost(waiting_growth_per_second=-2.0), state=since,
                    limits=target(budget=2048))
    assert (shrinking.action, shrinking.reason) == (Action.HOLD, Reason.BACKLOG)
    assert "a smaller one prefills slower: holding until it is gone" in shrinking.explanation


def test_overload_is_recognised_when_first_tokens_are_lost_though_a_cut_is_still_open() -> None:
    # A budget of 4096 with a decode tail of 60 ms: a cut is open by the usual rules (prefill
    # keeps up with the prompts at a lower budget by the model), but the backlog already holds
    # every first token past its SLO.
    obs = lost(itl_tail_seconds=0.06, itl_tail_long_seconds=0.06,
               prompt_tokens_per_second=20000.0)
    decisions = walk(obs, target(budget=4096), 10)
    assert decisions[-1].state.overload_since is not None
    with_some_in_time = walk(replace(obs, ttft_good_per_second=4.0), target(budget=4096), 10)
    assert all(d.state.overload_since is None for d in with_some_in_time)


def test_the_backlog_share_is_validated() -> None:
    with pytest.raises(LawConfigError, match=r"backlog_ttft_share: must be in \(0, 1\)"):
        LawConfig(backlog_ttft_share=0.0)


# -- the TTFT guard where no decode passes ------------------------------------------------------
def test_the_ttft_guard_yields_where_no_request_decodes_within_the_slo() -> None:
    # Prompts at 31k tokens/s, the median inflated by 8192's chunks: the guard's capacity model
    # wants 3520 tokens to keep prefill 10% ahead, spikes of ~103 ms by its cost.
    obs = spiky(0.25, itl_median_seconds=0.015, prompt_tokens_per_second=31000.0)
    held = run(obs)
    assert held.after.max_num_batched_tokens == 3520
    assert "held up by the TTFT guard" in held.explanation
    # 15% of gaps slow: no request's own P99 meets the SLO, so no first token the guard keeps
    # (six in ten are in time) can become a good request. The cut goes where the spikes meet
    # the aim.
    failing = replace(obs, itl_good_ratio=0.85, ttft_per_second=10.0, ttft_good_per_second=6.0)
    cut = run(failing)
    assert (cut.action, cut.reason) == (Action.TIGHTEN, Reason.ITL_BREACH)
    # cost max(tail bound (250 - 15) ms / 8192 = 28.7 µs, prior): (90 - 15) ms / 28.7 µs → 2560.
    assert cut.after.max_num_batched_tokens == 2560
    assert "the TTFT guard yields" in cut.explanation
    # Some requests still pass (1.5% slow gaps): the guard holds as before.
    assert run(replace(obs, itl_good_ratio=0.985)).after.max_num_batched_tokens == 3520
    # The median first token is late (three in ten in time): a backlog past the SLO holds them,
    # and a slower prefill would keep them late longer than the cut saves. The guard stands.
    late = run(replace(failing, ttft_good_per_second=3.0))
    assert late.after.max_num_batched_tokens == 3520



def test_the_ttft_guard_stands_where_a_growing_queue_meets_a_cut_that_cannot_catch_up() -> None:
    # As where the guard yields (15% of gaps slow, six first tokens in ten in time), with a
    # backlog building. At 31k prompt tokens/s the aim (2560) still prefills them all
    # (15 ms + 25 µs a token: 2067 tokens suffice), so the queue is a passing one: the cut goes.
    failing = spiky(0.25, itl_median_seconds=0.015, itl_good_ratio=0.85, ttft_per_second=10.0,
                    ttft_good_per_second=6.0, requests_waiting=100.0,
                    waiting_growth_per_second=3.0)
    passing = run(replace(failing, prompt_tokens_per_second=31000.0))
    assert passing.after.max_num_batched_tokens == 2560
    assert "the TTFT guard yields" in passing.explanation
    # At 34k the aim prefills fewer than arrive (3400 tokens would be needed): the backlog would
    # grow faster until every first token is late (deep overload's ramp: 3264 cut to 1152). No
    # budget keeps prefill 10% ahead, so the guard holds.
    behind = run(replace(failing, prompt_tokens_per_second=34000.0))
    assert (behind.action, behind.reason) == (Action.HOLD, Reason.TTFT_GUARD)
    # The same prompts without a growing queue: the guard yields, as before.
    steady = run(replace(failing, prompt_tokens_per_second=34000.0, requests_waiting=0.0,
                         waiting_growth_per_second=0.0))
    assert steady.after.max_num_batched_tokens == 2560


def test_with_most_first_tokens_late_a_ttft_breach_raises_by_the_present_tails_room() -> None:
    # 100 s after a cut from 3264 to 1664, a burst of long prompts: time to first token breaches,
    # decode has margin now (87 ms), the long window still holds the 142 ms steps of before the
    # cut, and the spikes fill the budget (46 ms + 25 µs * 1664).
    obs = calm(itl_tail_seconds=0.087, itl_tail_long_seconds=0.142, itl_median_seconds=0.046,
               itl_spike_seconds=0.046 + 25e-6 * 1664, ttft_tail_seconds=20.0,
               prompt_tokens_per_second=14000.0, requests_waiting=300.0,
               waiting_growth_per_second=3.0, ttft_per_second=10.0, ttft_good_per_second=8.0)
    state = TargetState(last_change_at=T0 - 100)
    # Most first tokens in time: the long window's tail leaves no room, and one chunk step may
    # not pass the relax margin; the law holds, as before.
    held = run(obs, state=state, limits=target(budget=1664))
    assert (held.action, held.reason) == (Action.HOLD, Reason.TTFT_BREACH)
    # Eight in ten late: a backlog past the SLO, which only prefill shortens. The room is the
    # present tail's: (120 - 87) ms / 25 µs = 1320 tokens, more than the step of half the budget.
    late = run(replace(obs, ttft_good_per_second=2.0), state=state, limits=target(budget=1664))
    assert (late.action, late.reason) == (Action.RELAX, Reason.TTFT_BREACH)
    assert late.after.max_num_batched_tokens == 1664 + 832
    assert "most first tokens are late" in late.explanation
    # Once the long window holds only this budget's steps its tail counts again.
    settled = run(replace(obs, ttft_good_per_second=2.0),
                  state=TargetState(last_change_at=T0 - LAW.long_window_seconds),
                  limits=target(budget=1664))
    assert settled.action is Action.HOLD

def test_a_cut_the_guard_would_stop_above_the_slo_goes_to_the_aim() -> None:
    # At 33k prompt tokens/s the guard wants 5888 tokens, where a chunk step is still
    # 15 + 25 µs * 5888 = 162 ms: stopped there the cut costs prefill and buys no decode.
    decision = run(spiky(0.25, itl_median_seconds=0.015, prompt_tokens_per_second=33000.0))
    assert (decision.reason, decision.after.max_num_batched_tokens) == (Reason.ITL_BREACH, 2560)
    assert "the TTFT guard would stop it at 5888, where the spikes stay over the SLO" in \
        decision.explanation
    # No budget keeps prefill up at all: the guard holds, as before.
    saturated = run(spiky(0.25, itl_median_seconds=0.015, prompt_tokens_per_second=45000.0))
    assert (saturated.action, saturated.reason) == (Action.HOLD, Reason.TTFT_GUARD)


def test_a_breach_cut_plans_with_the_learnt_cost_not_the_tallest_steps() -> None:
    # The long window's P99.9 (380 ms) holds a burst's steps, taken with the most sequences
    # decoding: (380 - 6) ms / 8192 = 45.7 µs a token. The breach's own tail (210 ms) bounds the
    # cost at 24.9 µs, the prior at 25: the cut aims with 25.
    decision = run(spiky(0.21, itl_spike_seconds=0.38))
    assert (decision.reason, decision.after.max_num_batched_tokens) == (Reason.ITL_BREACH, 3328)


# -- verdicts while the load grows ----------------------------------------------------------------
def test_a_tail_that_rose_with_the_queue_is_the_loads_not_the_cuts() -> None:
    state = cut_probe(good_share=0.5, waiting=0.0, prompt_rate=14000.0)
    later = T0 + LAW.cooldown_seconds
    steady = spiky(0.25, prompt_tokens_per_second=14000.0)
    worse = run(steady, state=state, now=later, limits=target(budget=3328))
    assert worse.reason in (Reason.NON_MONOTONIC, Reason.CUT_MADE_WORSE)
    # The queue grew by 200 while prefill kept its pace: more work arrived. Not undone.
    grown = run(replace(steady, requests_waiting=200.0, waiting_growth_per_second=2.0,
                        prompt_tokens_per_second=15000.0),
                state=state, now=later, limits=target(budget=3328))
    assert grown.reason not in (Reason.NON_MONOTONIC, Reason.CUT_MADE_WORSE)
    assert grown.after.max_num_batched_tokens <= 3328


def test_preemptions_in_the_long_window_with_room_in_the_cache_cut_nothing() -> None:
    # A backlog preempted requests minutes ago; it has drained and the cache is a third full.
    # A cut relative to the 10 requests running now would hold the next ones back.
    obs = calm(preemptions_per_second=0.2, kv_cache_usage_ratio=0.3, requests_running=10.0)
    decision = run(obs, limits=target(seqs=1024, budget=2048))
    assert decision.reason is not Reason.PREEMPTIONS
    assert decision.after.max_num_seqs == 1024
    full = run(replace(obs, kv_cache_usage_ratio=0.9), limits=target(seqs=1024, budget=2048))
    assert (full.reason, full.after.max_num_seqs) == (Reason.PREEMPTIONS, 8)  # the floor


def test_a_probe_of_the_drain_is_never_undone_for_the_tail_it_brings() -> None:
    # The drain raised the budget to the ceiling; a cooldown later decode is slow, first tokens
    # are still lost: the law holds (the drain is judged by the backlog, not the tail).
    probe = Probe(ChangeKind.UNDO, Param.MAX_NUM_BATCHED_TOKENS, Limits(1024, 2048), CEILING,
                  T0, itl_tail_before=0.09, ttft_tail_before=40.0)
    state = TargetState(limits=CEILING, last_change_at=T0, probe=probe,
                        overload_since=T0 - 10, queue_growing_since=T0 - 200)
    decision = run(lost(itl_tail_seconds=0.25, itl_tail_long_seconds=0.25), state=state,
                   now=T0 + LAW.cooldown_seconds, limits=target())
    assert (decision.action, decision.reason) == (Action.HOLD, Reason.BACKLOG)


def test_no_drain_starts_where_the_cache_is_full_and_preempts() -> None:
    # The cache is full and the engine preempts: the prefill of every request preempted to make
    # room is done again, so a larger budget would drain no faster. Below the ceiling as at it,
    # the law holds.
    thrashing = lost(kv_cache_usage_ratio=0.99, preemptions_per_second=1.0)
    below = walk(thrashing, target(budget=2048), 16)
    assert all(d.after.max_num_batched_tokens <= 2048 for d in below)
    assert (below[-1].action, below[-1].reason) == (Action.HOLD, Reason.BACKLOG)
    assert below[-1].state.overload_since is not None
    assert "the KV cache is full and preempts" in below[-1].explanation
    at_top = walk(thrashing, target(), 16)
    assert (at_top[-1].action, at_top[-1].reason) == (Action.HOLD, Reason.BACKLOG)


@pytest.mark.parametrize(
    ("obs", "why"),
    [(lost(requests_waiting=100.0, waiting_growth_per_second=-2.0), "~50s of backlog left"),
     (lost(waiting_growth_per_second=-0.5, ttft_good_per_second=5.0),
      "62% of first tokens within the TTFT SLO again")],
    ids=["gone within a cooldown", "half the first tokens in time again"],
)
def test_as_the_backlog_ends_the_drain_hands_back_the_budget_before_it(
        obs: Observation, why: str) -> None:
    draining = TargetState(overload_since=T0 - 600, queue_growing_since=T0 - 900,
                           last_change_at=T0 - 300, drain_from=2048)
    # Mid-drain the law holds, first tokens still lost and the end not near.
    mid = run(lost(waiting_growth_per_second=-2.0), state=draining, limits=target())
    assert (mid.action, mid.reason, mid.state.drain_from) == (Action.HOLD, Reason.BACKLOG, 2048)
    back = run(obs, state=draining, limits=target())
    assert (back.action, back.reason, back.after.max_num_batched_tokens) == (
        Action.TIGHTEN, Reason.BACKLOG, 2048)
    assert f"the drain ends ({why}): back to 2048, the budget before it" in back.explanation
    assert back.state.drain_from is None
    # Once handed back, a shrinking backlog does not start another drain.
    after = run(replace(obs, ttft_good_per_second=0.0), state=replace(back.state, probe=None),
                now=T0 + 100, limits=target(budget=2048))
    assert after.action is Action.HOLD


def test_a_drain_the_full_cache_preempts_is_handed_back_and_not_tried_again() -> None:
    draining = TargetState(overload_since=T0 - 600, queue_growing_since=T0 - 900,
                           last_change_at=T0 - 300, drain_from=2048)
    thrashing = lost(kv_cache_usage_ratio=0.99, preemptions_per_second=1.0)
    back = run(thrashing, state=draining, limits=target())
    assert (back.action, back.reason, back.after.max_num_batched_tokens) == (
        Action.TIGHTEN, Reason.BACKLOG, 2048)
    assert "the KV cache is full and preempts" in back.explanation
    (avoid,) = back.state.avoid
    assert (avoid.low, avoid.high) == (2049, CEILING.max_num_batched_tokens)


def test_the_end_of_an_overload_or_someone_elses_change_forgets_the_drain() -> None:
    draining = TargetState(limits=CEILING, overload_since=T0 - 600,
                           queue_growing_since=T0 - 900, last_change_at=T0 - 300,
                           drain_from=2048)
    empty = spiky(0.2, ttft_good_per_second=8.0, ttft_per_second=8.0, requests_waiting=1.0,
                  waiting_growth_per_second=-1.0)
    back = run(empty, state=draining, limits=target())
    drained = run(empty, state=replace(back.state, probe=None), now=T0 + LAW.cooldown_seconds,
                  limits=target(budget=2048))
    assert (drained.state.overload_since, drained.state.drain_from) == (None, None)
    # An operator set 4096 mid-drain: 2048 no longer describes this engine, and no second drain
    # starts in the same overload.
    moved = run(lost(), state=draining, limits=target(budget=4096))
    assert (moved.action, moved.state.drain_from) == (Action.HOLD, None)


def test_a_drain_ending_within_its_own_cooldown_hands_back_at_once() -> None:
    # A burst's backlog is gone 30 s after the drain started: waiting out the cooldown at the
    # ceiling would cost the requests now served in time their decode.
    draining = TargetState(overload_since=T0 - 40, queue_growing_since=T0 - 300,
                           last_change_at=T0 - 30, drain_from=3264)
    not_yet = run(lost(waiting_growth_per_second=-2.0), state=draining, limits=target())
    assert (not_yet.action, not_yet.reason) == (Action.HOLD, Reason.COOLDOWN)
    back = run(lost(waiting_growth_per_second=-0.5, ttft_good_per_second=6.0), state=draining,
               limits=target())
    assert (back.action, back.reason, back.after.max_num_batched_tokens) == (
        Action.TIGHTEN, Reason.BACKLOG, 3264)
    assert "75% of first tokens within the TTFT SLO again" in back.explanation
