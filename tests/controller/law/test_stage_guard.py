"""The law holds for a breach that sits outside the engine, and says why; on a fake clock."""

from __future__ import annotations

from dataclasses import replace

import pytest

from governor.contracts.stages import Stage
from governor.controller.model import Action, Observation, Reason, TargetState
from tests.controller.law.test_decide import T0, calm, run, served, spiky, target

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


# -- the engine's tail (N3, issue 32) ----------------------------------------------------------
# The engine's stages before the first token, each at most this long at the quantile that makes
# their sum bound the TTFT SLO's P99 (the top of its bucket): a calm engine, 225 ms together.
CALM_TAILS = {"admission": 0.005, "engine_queue": 0.02, "prefill": 0.2}
OWN = sum(STEADY[stage] for stage in ("read", "text_queue", "parse", "render", "tokenize"))


def tails(obs: Observation, **engine: float) -> Observation:
    """``obs`` with a typical request's stages steady, and the engine's tails."""
    return replace(staged(obs, {}), stage_tail_seconds=CALM_TAILS | engine)


def test_a_ttft_breach_the_engines_tail_does_not_explain_holds_and_says_the_numbers() -> None:
    """3% of requests send their headers over 10 s: the TTFT P99 is 9 s, their ``read``. A
    typical request's stages have not moved, and the engine's own tail is 225 ms: relaxing the
    budget would retune a healthy engine for the clients' own time."""
    attacked = tails(calm(ttft_tail_seconds=9.0))
    decision = run(attacked, limits=target(budget=2048))
    assert (decision.action, decision.reason) == (Action.HOLD, Reason.NOT_IN_ENGINE)
    assert decision.after == decision.before
    assert ("the time to first token breach is not the engine's: the engine's stages before the "
            "first token take at most 225 ms at the p99 (admission 5 ms, engine_queue 20 ms, "
            "prefill 200 ms) and a typical request's own stages 7 ms, within the SLO's "
            "1000 ms") in decision.explanation
    assert decision.inputs["ttft_engine_tail_seconds"] == pytest.approx(0.225)
    # Without the engine's tails (an older service), the law decides as it did: it relaxes.
    before = run(replace(attacked, stage_tail_seconds={}), limits=target(budget=2048))
    assert (before.action, before.reason) == (Action.RELAX, Reason.TTFT_BREACH)
    assert before.inputs["ttft_engine_tail_seconds"] is None


@pytest.mark.parametrize(("engine", "held"), [
    ({"prefill": 0.5, "engine_queue": 0.1, "admission": 0.39}, True),  # 990 + 7 ms
    ({"prefill": 0.5, "engine_queue": 0.1, "admission": 0.395}, False),  # 995 + 7 ms
    ({"admission": 1.0}, False),  # the engine queues requests: its breach
    ({"admission": 60.0}, False),  # past the histogram's last edge
], ids=["inside", "inside alone, not with a typical request's own stages", "the engine's",
        "off the histogram"])
def test_a_ttft_breach_is_the_engines_once_its_tail_and_a_typical_requests_own_stages_pass_the_slo(
        engine: dict[str, float], held: bool) -> None:
    decision = run(tails(calm(ttft_tail_seconds=9.0), **engine), limits=target(budget=2048))
    assert (decision.reason is Reason.NOT_IN_ENGINE) is held
    if not held:
        assert (decision.action, decision.reason) == (Action.RELAX, Reason.TTFT_BREACH)


def test_without_a_reading_of_every_engine_stage_the_law_decides() -> None:
    partial = replace(tails(calm(ttft_tail_seconds=9.0)),
                      stage_tail_seconds={"admission": 0.005, "prefill": 0.2})
    assert run(partial, limits=target(budget=2048)).reason is Reason.TTFT_BREACH


@pytest.mark.parametrize(("obs", "held"), [
    (calm(itl_tail_seconds=0.4, itl_tail_long_seconds=0.4, itl_engine_tail_seconds=0.1), True),
    (calm(itl_tail_seconds=0.4, itl_tail_long_seconds=0.4, itl_engine_tail_seconds=0.15), False),
    (calm(itl_tail_seconds=0.4, itl_tail_long_seconds=0.4), False),
], ids=["the engine's gaps within the SLO", "the engine's gaps over it", "no reading"])
def test_an_inter_token_breach_of_slow_readers_holds_while_the_engines_own_gaps_pass(
        obs: Observation, held: bool) -> None:
    """3% of streams read slowly: the service's gaps wait for them (its P99 400 ms), the
    engine's own do not; a typical request's ``stream_write`` has not moved."""
    decision = run(staged(obs, {}))
    if held:
        assert (decision.action, decision.reason) == (Action.HOLD, Reason.NOT_IN_ENGINE)
        assert ("the inter-token latency breach is not the engine's: the engine's own gaps are "
                "at most 100 ms at the p99 (every rank), within the SLO's 120 ms") in \
            decision.explanation
    else:
        assert (decision.action, decision.reason) == (Action.TIGHTEN, Reason.ITL_BREACH)


def test_spikes_at_risk_are_the_engines_only_where_its_own_p999_shows_them() -> None:
    at_risk = served(itl_tail_seconds=0.1, itl_tail_long_seconds=0.1, itl_good_ratio=0.992,
                     itl_spike_seconds=0.4, prompt_tokens_per_second=8000.0)
    readers = run(replace(at_risk, itl_engine_tail_seconds=0.1, itl_engine_spike_seconds=0.1),
                  limits=target(budget=4096))
    assert (readers.action, readers.reason) == (Action.HOLD, Reason.NOT_IN_ENGINE)
    assert "at most 100 ms at the P99.9 over the longer window" in readers.explanation
    # The engine's steps are the spikes: the at-risk cut, whatever its P99.
    engine = run(replace(at_risk, itl_engine_tail_seconds=0.1, itl_engine_spike_seconds=0.2),
                 limits=target(budget=4096))
    assert (engine.action, engine.reason) == (Action.TIGHTEN, Reason.ITL_AT_RISK)


def test_with_two_breaches_a_calm_engine_holds_only_if_neither_is_its_own() -> None:
    both = tails(calm(itl_tail_seconds=0.4, itl_tail_long_seconds=0.4, ttft_tail_seconds=9.0,
                      itl_engine_tail_seconds=0.05))
    held = run(both)
    assert held.reason is Reason.NOT_IN_ENGINE
    assert "the inter-token latency breach is not the engine's" in held.explanation
    assert "the time to first token breach is not the engine's" in held.explanation
    # The engine's own gaps breach: the law acts on them, slow clients or not.
    assert run(replace(both, itl_engine_tail_seconds=0.2)).reason is Reason.ITL_BREACH
