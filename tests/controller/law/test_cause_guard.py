"""The law acts on the verdict: it retunes only for what retuning fixes; on a fake clock."""

from __future__ import annotations

from dataclasses import replace

import pytest

from governor.contracts.metrics.controller import SCALE_CAPACITY
from governor.controller.law.cause_guard import (
    NEW_BREACH_GAP_SECONDS,
    UNKNOWN_GRACE_SECONDS,
    ranked,
)
from governor.controller.model import Action, Observation, Reason, TargetState
from tests.controller.law.test_decide import T0, calm, run, spiky

# A breach under way for longer than the grace an unknown verdict gets.
AGED = TargetState(last_breach_at=T0 - 5, breach_began_at=T0 - 2 * UNKNOWN_GRACE_SECONDS)


def blamed(obs: Observation, itl: dict[str, float] | None = None,
           ttft: dict[str, float] | None = None) -> Observation:
    return replace(obs, itl_causes=itl or {}, ttft_causes=ttft or {})


@pytest.mark.parametrize(("verdict", "named"), [
    ({"gpu_throttled": 1.0}, "gpu_throttled"),
    ({"gpu_shared": 0.8}, "gpu_shared"),
    ({"gpu_fault": 1.0, "batching": 0.7}, "gpu_fault"),
    # Batching explains more of it, but the clock deficit is there: never cut for it.
    ({"batching": 0.6, "gpu_throttled": 0.3}, "gpu_throttled"),
    ({"interconnect": 0.9}, "interconnect"),
    ({"client_stream": 0.7, "batching": 0.2}, "client_stream"),
], ids=["throttled", "shared", "a fault first", "throttled behind batching", "a saturated link",
        "a slow reader leads"])
def test_a_breach_blamed_on_what_no_limit_fixes_is_held_and_named(
    verdict: dict[str, float], named: str,
) -> None:
    decision = run(blamed(spiky(0.21), verdict))
    assert (decision.action, decision.reason) == (Action.HOLD, Reason.OUTSIDE_BATCHING)
    assert decision.after == decision.before
    assert "the inter-token latency breach is blamed on " in decision.explanation
    assert f"; {named}: " in decision.explanation
    assert decision.inputs[f"itl_causes.{named}"] == verdict[named]


@pytest.mark.parametrize("verdict", [
    {"batching": 1.0}, {"kv_cache": 0.4, "batching": 0.5}, {"unknown": 1.0}, {},
], ids=["batching", "kv and batching", "unknown", "no verdict"])
def test_a_breach_retuning_fixes_or_nobody_can_name_is_left_to_the_law(
    verdict: dict[str, float],
) -> None:
    decision = run(blamed(spiky(0.21), verdict), state=AGED)
    assert (decision.action, decision.reason) == (Action.TIGHTEN, Reason.ITL_BREACH)


def test_a_young_breach_nobody_can_name_yet_is_held_until_the_grace_ends() -> None:
    """A slow reader's stages are observed when its stream ends: the rules say ``unknown`` for
    the first seconds of the breach, then name ``client_stream``. The law waits for them."""
    unknown = blamed(spiky(0.21), {"unknown": 1.0})
    first = run(unknown)  # a new breach: it begins now
    assert (first.action, first.reason) == (Action.HOLD, Reason.AWAITING_VERDICT)
    assert first.state.breach_began_at == T0
    assert "cannot explain the inter-token breach 0 s into it" in first.explanation
    later = run(unknown, state=first.state, now=T0 + 10)
    assert (later.action, later.reason) == (Action.HOLD, Reason.AWAITING_VERDICT)
    assert later.state.breach_began_at == T0  # the same breach
    named = run(blamed(spiky(0.21), {"client_stream": 1.0}), state=later.state, now=T0 + 15)
    assert (named.action, named.reason) == (Action.HOLD, Reason.OUTSIDE_BATCHING)
    # Still nothing named once the grace is over: the law acts.
    late = run(unknown, state=later.state, now=T0 + UNKNOWN_GRACE_SECONDS)
    assert (late.action, late.reason) == (Action.TIGHTEN, Reason.ITL_BREACH)
    # A first-token breach with an unknown verdict is not held by this grace.
    ttft = run(blamed(calm(ttft_tail_seconds=1.8), ttft={"unknown": 1.0}))
    assert ttft.reason is not Reason.AWAITING_VERDICT


@pytest.mark.parametrize("leading", ["queue", "gpu_compute_bound", "gpu_memory_bound"])
def test_a_breach_blamed_on_capacity_holds_and_asks_for_a_replica_more(leading: str) -> None:
    obs = blamed(spiky(0.21), {leading: 0.9, "batching": 0.1})
    decision = run(obs)
    assert (decision.action, decision.reason) == (Action.HOLD, Reason.CAPACITY)
    assert decision.scale.reason == SCALE_CAPACITY
    assert decision.scale.replicas >= 2 and decision.scale.replicas_needed >= 2


def test_a_first_token_breach_is_judged_on_its_own_verdict() -> None:
    late = calm(ttft_tail_seconds=1.8)
    held = run(blamed(late, itl={"batching": 1.0}, ttft={"tokenizer": 0.9}))
    assert held.reason is Reason.OUTSIDE_BATCHING
    assert "the time to first token breach is blamed on tokenizer 90%" in held.explanation
    # The decode verdict says nothing about a first-token breach.
    assert run(blamed(late, itl={"gpu_shared": 1.0})).reason is not Reason.OUTSIDE_BATCHING


def test_without_a_breach_the_verdict_changes_nothing() -> None:
    quiet = blamed(calm(), {"gpu_throttled": 1.0})
    assert run(quiet).reason is not Reason.OUTSIDE_BATCHING


def test_ranked_orders_by_share_then_what_no_limit_fixes_and_drops_strangers() -> None:
    order = ranked({"batching": 0.5, "gpu_shared": 0.5, "nonsense": 1.0, "queue": 0.7,
                    "kv_cache": float("nan"), "tokenizer": 0.2, "gpu_compute_bound": 0.2})
    assert [(cause.name, share) for cause, share in order] == [
        ("queue", 0.7), ("gpu_shared", 0.5), ("batching", 0.5), ("gpu_compute_bound", 0.2),
        ("tokenizer", 0.2)]


@pytest.mark.parametrize("saturated", ["gpu_memory_bound", "gpu_compute_bound", "queue"])
def test_a_window_that_named_batching_and_saturation_in_full_holds_and_scales(
        saturated: str) -> None:
    """Each cause at its largest over the window: a memory-bound decode read ``batching`` for
    one evaluation shows both at 1.0, and the drill's controller cut the sequences on it."""
    decision = run(blamed(spiky(0.21), {"batching": 1.0, saturated: 1.0}), state=AGED)
    assert (decision.action, decision.reason) == (Action.HOLD, Reason.CAPACITY)
    assert decision.after == decision.before


@pytest.mark.parametrize(("conditions", "named"), [
    ({"gpu_throttled": 2.0}, "gpu_throttled (steps 2.00x slower)"),
    ({"gpu_shared": 1.6}, "gpu_shared (steps 1.60x slower)"),
    ({"gpu_fault": 1.0}, "gpu_fault (1 event(s) in the window)"),
    ({"interconnect": 1.3}, "interconnect (steps 1.30x slower)"),
])
def test_before_the_verdict_a_gpu_condition_already_recorded_holds_a_breach(
    conditions: dict[str, float], named: str,
) -> None:
    decision = run(replace(spiky(0.21), gpu_conditions=conditions))
    assert (decision.action, decision.reason) == (Action.HOLD, Reason.OUTSIDE_BATCHING)
    assert f"breaching while the GPU shows {named}" in decision.explanation


def test_a_gpu_condition_without_a_breach_changes_nothing_and_a_verdict_comes_first() -> None:
    assert run(replace(calm(), gpu_conditions={"gpu_throttled": 2.0})).reason is not \
        Reason.OUTSIDE_BATCHING
    # The verdict, once there, is what is read: here it names batching alone, so the law cuts.
    both = replace(spiky(0.21), itl_causes={"batching": 1.0},
                   gpu_conditions={"gpu_shared": 1.05})
    assert run(both).reason is Reason.ITL_BREACH


def test_an_unknown_verdict_beside_a_gpu_condition_holds_and_alone_is_left_to_the_law() -> None:
    # A saturated link slows every step: the tail shows it before anything explains it.
    early = replace(spiky(0.21), itl_causes={"unknown": 1.0},
                    gpu_conditions={"interconnect": 1.4})
    decision = run(early)
    assert (decision.action, decision.reason) == (Action.HOLD, Reason.OUTSIDE_BATCHING)
    assert "breaching while the GPU shows interconnect (steps 1.40x slower)" in \
        decision.explanation
    assert run(replace(early, gpu_conditions={}), state=AGED).reason is Reason.ITL_BREACH


def test_a_new_breach_the_rules_judge_but_have_not_named_waits_one_pass_for_them() -> None:
    """A throttled clock shows in the tail a scrape or two before the rules record it: the law
    waits for their verdict on a new breach instead of cutting for a GPU it cannot fix."""
    fresh = replace(spiky(0.21), itl_verdict_burn=0.6)
    first = run(fresh)
    assert (first.action, first.reason) == (Action.HOLD, Reason.AWAITING_VERDICT)
    assert first.after == first.before
    assert "the rules have not judged yet (their burn 0.60x)" in first.explanation
    assert first.state.last_breach_at == T0
    # The next pass acts on what the rules say: a throttled GPU holds, nothing named cuts.
    later = T0 + 5
    throttled = run(replace(fresh, itl_causes={"gpu_throttled": 1.0}), state=first.state,
                    now=later)
    assert (throttled.action, throttled.reason) == (Action.HOLD, Reason.OUTSIDE_BATCHING)
    still = run(fresh, state=first.state, now=later)
    assert (still.action, still.reason) == (Action.TIGHTEN, Reason.ITL_BREACH)


def test_without_the_rules_or_with_their_verdict_a_new_breach_is_acted_on_at_once() -> None:
    assert run(spiky(0.21)).reason is Reason.ITL_BREACH  # no rules: no burn ratio to wait on
    named = replace(spiky(0.21), itl_verdict_burn=2.0, itl_causes={"batching": 1.0})
    assert run(named).reason is Reason.ITL_BREACH
    # A breach that came back within NEW_BREACH_GAP_SECONDS is not new.
    recent = TargetState(last_breach_at=T0 - NEW_BREACH_GAP_SECONDS / 2)
    assert run(replace(spiky(0.21), itl_verdict_burn=0.6), state=recent).reason is \
        Reason.ITL_BREACH
    old = TargetState(last_breach_at=T0 - 2 * NEW_BREACH_GAP_SECONDS)
    assert run(replace(spiky(0.21), itl_verdict_burn=0.6), state=old).reason is \
        Reason.AWAITING_VERDICT
