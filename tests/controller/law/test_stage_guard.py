"""The law holds for a breach that sits outside the engine, and says why; on a fake clock."""

from __future__ import annotations

from dataclasses import replace

import pytest

from governor.contracts.stages import Stage
from governor.controller.model import Action, Observation, Reason, TargetState
from tests.controller.law.test_decide import T0, calm, run, spiky, target

# A steady request's stages, mean seconds per request (a chat of a few hundred tokens).
STEADY = {stage.value: 0.001 for stage in Stage} | {
    "admission": 0.002, "engine_queue": 0.01, "prefill": 0.08, "decode": 2.0,
    "stream_write": 0.02, "tokenize": 0.003}


def staged(obs: Observation, now: dict[str, float], before: dict[str, float] = STEADY
           ) -> Observation:
    return replace(obs, stage_seconds=STEADY | now, stage_seconds_long=before)


@pytest.mark.parametrize(("obs", "stage", "breach"), [
    (staged(spiky(0.21), {"stream_write": 1.5}), "stream_write", "inter-token latency"),
    (staged(calm(ttft_tail_seconds=1.8), {"tokenize": 0.9}), "tokenize", "time to first token"),
    (staged(calm(ttft_tail_seconds=1.8), {"text_queue": 0.7}), "text_queue",
     "time to first token"),
], ids=["a slow reader stretches the gaps", "a slower tokenizer",
        "prompts queue for the text threads"])
def test_a_breach_grown_in_the_services_own_stages_holds_and_names_the_stage(
    obs: Observation, stage: str, breach: str,
) -> None:
    decision = run(obs)
    assert (decision.action, decision.reason) == (Action.HOLD, Reason.NOT_IN_ENGINE)
    assert decision.after == decision.before
    assert f"the {breach} breach sits in {stage} (+" in decision.explanation
    assert "no batching limit moves that" in decision.explanation
    assert decision.inputs[f"stage_growth_seconds.{stage}"] == pytest.approx(
        obs.stage_seconds[stage] - STEADY[stage])


@pytest.mark.parametrize("obs", [
    staged(spiky(0.21), {"decode": 3.0}),
    staged(spiky(0.21), {"decode": 3.0, "stream_write": 0.5}),  # the engine's grew more
    spiky(0.21),  # no stage readings (stock vLLM): as before
    staged(spiky(0.21), {"stream_write": 0.05}),  # grew, but not materially
], ids=["decode grew", "both grew, the engine more", "no stages", "a small growth"])
def test_a_breach_the_engine_may_cause_is_left_to_the_law(obs: Observation) -> None:
    decision = run(obs)
    assert (decision.action, decision.reason) == (Action.TIGHTEN, Reason.ITL_BREACH)


def test_with_two_breaches_it_holds_only_if_both_sit_outside_the_engine() -> None:
    both = calm(itl_tail_seconds=0.21, itl_tail_long_seconds=0.21,
                prompt_tokens_per_second=14000.0, ttft_tail_seconds=1.8)
    outside = run(staged(both, {"tokenize": 0.9, "stream_write": 1.5}))
    assert outside.reason is Reason.NOT_IN_ENGINE
    assert "inter-token latency breach sits in stream_write" in outside.explanation
    assert "time to first token breach sits in tokenize" in outside.explanation
    # The gaps grew in the engine's decode: that breach is the law's to act on.
    assert run(staged(both, {"tokenize": 0.9, "decode": 3.0})).reason is not \
        Reason.NOT_IN_ENGINE


def test_a_breach_mostly_outside_the_engine_holds_after_the_long_window_has_caught_up() -> None:
    """A slow tokenizer for longer than the long window: no growth left, but the service's
    stages still take longer than the engine's before the first token."""
    slow = STEADY | {"tokenize": 0.9}
    decision = run(staged(calm(ttft_tail_seconds=1.8), slow, before=slow))
    assert decision.reason is Reason.NOT_IN_ENGINE
    assert "sits outside the engine (" in decision.explanation
    assert "tokenize the most" in decision.explanation


def test_no_breach_no_hold_and_the_hold_is_kept_while_it_lasts() -> None:
    # Within the SLO the stages change nothing: the law relaxes as it would.
    quiet = run(staged(calm(), {"tokenize": 0.9}), limits=target(budget=2048),
                state=TargetState(last_change_at=T0 - 3600, last_breach_at=T0 - 3600))
    assert quiet.reason is not Reason.NOT_IN_ENGINE
    # Held on one reconcile, held on the next: the state it keeps changes no limit.
    obs = staged(calm(ttft_tail_seconds=1.8), {"tokenize": 0.9})
    first = run(obs)
    second = run(obs, state=first.state, now=T0 + 30)
    assert second.reason is Reason.NOT_IN_ENGINE and second.after == first.before
