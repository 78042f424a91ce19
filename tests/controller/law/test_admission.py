"""The law's third knob: the deadline slack of the target's gate, moved with the budget by the
cost model and handed back (table-driven, fake clock)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from governor.controller.law.admission import LAW_MIN_SLACK, prefill_rate
from governor.controller.model import Action, Observation, Reason, TargetState
from tests.controller.law.test_decide import LAW, T0, run, spiky, target


def gated(slack: float = 1.0, refused: float = 4.0, **overrides: float | None) -> Observation:
    """A breach behind a deadline gate that turns ``refused`` requests a second away, with
    prefill saturating the engine (45k prompt tokens/s: the TTFT guard's case)."""
    return spiky(0.21, prompt_tokens_per_second=45000.0, deadline_slack=slack,
                 admission_refused_per_second=refused, **overrides)


def test_behind_a_gate_that_refuses_the_ttft_guard_yields_and_the_slack_follows_the_cut() -> None:
    # Without a gate the TTFT guard holds (tests/controller/law/test_decide.py); behind one that
    # sheds, prefill falling behind the arrivals costs refusals, not late first tokens.
    ungated = run(spiky(0.21, prompt_tokens_per_second=45000.0), limits=target(budget=2048))
    assert (ungated.reason, ungated.admission) == (Reason.TTFT_GUARD, None)
    cut = run(gated(), limits=target(budget=2048))
    assert (cut.action, cut.reason) == (Action.TIGHTEN, Reason.ITL_BREACH)
    assert "the deadline gate turns away 4.0 req/s" in cut.explanation
    before, after = cut.before.max_num_batched_tokens, cut.after.max_num_batched_tokens
    assert after < before
    # The slack falls by the cost model's ratio of prefill rates at the two budgets.
    ratio = prefill_rate(after, 0.006, LAW.prefill_seconds_per_token_prior) / \
        prefill_rate(before, 0.006, LAW.prefill_seconds_per_token_prior)
    assert cut.admission is not None
    assert cut.admission.before == 1.0
    assert cut.admission.after == pytest.approx(ratio, abs=1e-3)
    assert f"budget cut from {before} to {after}" in cut.admission.explanation
    assert (cut.state.slack_from, cut.state.slack_since) == (1.0, T0)


def test_the_slack_is_handed_back_once_the_gate_has_caught_up_or_stops_refusing() -> None:
    held = TargetState(slack_from=1.0, slack_since=T0, last_change_at=T0)
    calm_gate = replace(gated(slack=0.6), itl_tail_seconds=0.09, itl_tail_long_seconds=0.09)
    waiting = run(calm_gate, state=held, now=T0 + LAW.admission_catch_up_seconds - 1)
    assert waiting.admission is None and waiting.state.slack_from == 1.0
    back = run(calm_gate, state=held, now=T0 + LAW.admission_catch_up_seconds)
    assert back.admission is not None and (back.admission.before, back.admission.after) == \
        (0.6, 1.0)
    assert "had 60s to follow the cut" in back.admission.explanation
    assert back.state.slack_from is None
    # The overload is over (no refusals): back at once.
    over = run(replace(calm_gate, admission_refused_per_second=0.0), state=held, now=T0 + 5)
    assert over.admission is not None and over.admission.after == 1.0
    assert "refuses no more" in over.admission.explanation


@pytest.mark.parametrize(
    ("slack", "refused"),
    [(None, 4.0), (1.0, 0.0), (1.0, None)],
    ids=["no gate", "a gate that refuses nothing", "refusals unread"],
)
def test_no_gate_or_one_that_sheds_nothing_is_never_moved(slack: float | None,
                                                          refused: float | None) -> None:
    decision = run(spiky(0.21, deadline_slack=slack, admission_refused_per_second=refused),
                   limits=target(budget=4096))
    assert decision.changes and decision.admission is None


def test_the_slack_never_goes_under_its_floor_nor_above_what_it_was() -> None:
    # A cut to a quarter at a tiny median: the ratio is large, not the floor.
    deep = run(gated(slack=0.25, itl_median_seconds=0.08), limits=target(budget=8192))
    assert deep.admission is not None and deep.admission.after >= LAW_MIN_SLACK
    assert deep.admission.after <= 0.25


def test_a_slack_outside_the_contract_moves_nothing_and_a_refused_one_keeps_the_memory() -> None:
    """Issue 32, N5: a slack of 10^30 is no gate's (the contract's range is (0, 100]): lowered
    by the cut's ratio it would be PUT as 10^29 and saved as the slack to hand back. A slack the
    controller refused where it entered keeps the one the law holds to hand back."""
    huge = run(gated(slack=1e30), limits=target(budget=2048))
    assert huge.admission is None and huge.state.slack_from is None
    held = TargetState(slack_from=1.0, slack_since=T0, last_change_at=T0)
    refused = replace(gated(slack=0.6, refused=0.0), deadline_slack=None,
                      refused={"deadline_slack": "1e+30 is not a deadline slack within (0, 100]"})
    kept = run(refused, state=held, now=T0 + 5)
    assert kept.admission is None
    assert (kept.state.slack_from, kept.state.slack_since) == (1.0, T0)
