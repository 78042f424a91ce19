"""The law's hold on vLLM's own ``max_num_queued_tokens``: set to the first-token target times
the cost model's prefill rate while the gate refuses, handed back when it stops, left alone where
the target's vLLM has none (table-driven, fake clock)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

from governor.controller.law.admission import prefill_rate
from governor.controller.model import Observation, TargetState
from tests.controller.law.test_admission import gated
from tests.controller.law.test_decide import LAW, SLO, T0, run, target

COST = LAW.prefill_seconds_per_token_prior


def expected(budget: int) -> int:
    """What vLLM's docstring sizes the bound at: target TTFT times the prefill rate."""
    assert SLO.ttft_seconds is not None
    return max(budget, round(SLO.ttft_seconds * prefill_rate(budget, 0.006, COST)))


def test_while_the_gate_refuses_the_bound_is_the_ttft_target_times_the_prefill_rate() -> None:
    cut = run(gated(vllm_max_num_queued_tokens=math.inf), limits=target(budget=2048))
    moved = cut.queued_tokens
    assert moved is not None and moved.before is None
    assert moved.after == expected(cut.after.max_num_batched_tokens)
    assert "unbounded →" in moved.explanation and "while the gate refuses" in moved.explanation
    assert "per API process" in moved.explanation
    assert (cut.state.queued_tokens_held, cut.state.queued_tokens_from) == (True, None)


def test_a_bound_the_user_set_is_never_raised_only_lowered() -> None:
    tight = run(gated(vllm_max_num_queued_tokens=100.0), limits=target(budget=2048))
    assert tight.queued_tokens is None  # already below the product: left as it is
    loose = run(gated(vllm_max_num_queued_tokens=10_000_000.0), limits=target(budget=2048))
    assert loose.queued_tokens is not None
    assert loose.queued_tokens.after == expected(loose.after.max_num_batched_tokens)
    assert (loose.state.queued_tokens_held, loose.state.queued_tokens_from) == (True, 10_000_000)


def test_a_bound_near_the_product_is_not_churned() -> None:
    first = run(gated(vllm_max_num_queued_tokens=math.inf), limits=target(budget=2048))
    assert first.queued_tokens is not None and first.queued_tokens.after is not None
    near = run(gated(vllm_max_num_queued_tokens=first.queued_tokens.after * 1.03),
               limits=target(budget=2048))
    assert near.queued_tokens is None and not near.state.queued_tokens_held


@pytest.mark.parametrize(("origin", "shown"), [(None, "unbounded"), (32768, "32768")])
def test_the_bound_it_found_is_handed_back_when_the_gate_stops_refusing(
        origin: int | None, shown: str) -> None:
    held = TargetState(queued_tokens_held=True, queued_tokens_from=origin, last_change_at=T0)
    calm_gate = replace(gated(slack=1.0, refused=0.0, vllm_max_num_queued_tokens=9000.0),
                        itl_tail_seconds=0.09, itl_tail_long_seconds=0.09)
    back = run(calm_gate, state=held, now=T0 + 5)
    assert back.queued_tokens is not None
    assert (back.queued_tokens.before, back.queued_tokens.after) == (9000, origin)
    assert f"9000 → {shown}" in back.queued_tokens.explanation
    assert "refuses no more" in back.queued_tokens.explanation
    assert not back.state.queued_tokens_held


def test_a_vllm_without_the_bound_is_left_and_the_slack_move_says_so() -> None:
    cut = run(gated(), limits=target(budget=2048))  # no max_num_queued_tokens reported: 0.25
    assert cut.queued_tokens is None and not cut.state.queued_tokens_held
    assert cut.admission is not None
    assert "the target reports none to move" in cut.admission.explanation


@pytest.mark.parametrize("obs", [
    gated(refused=0.0, vllm_max_num_queued_tokens=math.inf),
    replace(gated(vllm_max_num_queued_tokens=math.inf), deadline_slack=None),
    Observation(itl_tail_seconds=None, itl_median_seconds=None,
                vllm_max_num_queued_tokens=8192.0),
], ids=["the gate refuses nothing", "no gate", "no latency to judge"])
def test_without_an_overload_at_the_gate_the_bound_is_left(obs: Observation) -> None:
    assert run(obs, limits=target(budget=2048)).queued_tokens is None


@pytest.mark.parametrize("value", [1e30, 0.0, 8192.5, -1.0, math.nan],
                         ids=["past the contract", "zero", "a fraction", "negative", "NaN"])
def test_a_bound_outside_the_contract_is_neither_held_nor_remembered(value: float) -> None:
    """Issue 32, N5: the law reads vLLM's bound through the contract's check too. 10^30 would
    have been the bound to hand back, PUT as such and saved (a restart then refuses the file)."""
    cut = run(gated(vllm_max_num_queued_tokens=value), limits=target(budget=2048))
    assert cut.queued_tokens is None
    assert (cut.state.queued_tokens_held, cut.state.queued_tokens_from) == (False, None)


@pytest.mark.parametrize("field", ["vllm_max_num_queued_tokens", "deadline_slack"])
def test_while_a_reading_is_refused_the_bound_and_its_memory_are_left(field: str) -> None:
    """The controller refused the reading where it entered (outside the contract): the law
    neither hands the bound back nor forgets it; without the slack, whether the gate still
    refuses is unknown."""
    held = TargetState(queued_tokens_held=True, queued_tokens_from=32768, last_change_at=T0)
    calm_gate = replace(gated(slack=1.0, refused=0.0, vllm_max_num_queued_tokens=9000.0),
                        itl_tail_seconds=0.09, itl_tail_long_seconds=0.09)
    gone: dict[str, Any] = {field: None, "refused": {field: "1e+30 is not …"}}
    refused = replace(calm_gate, **gone)
    kept = run(refused, state=held, now=T0 + 5)
    assert kept.queued_tokens is None
    assert (kept.state.queued_tokens_held, kept.state.queued_tokens_from) == (True, 32768)
    assert run(calm_gate, state=held, now=T0 + 5).queued_tokens is not None  # the premise
