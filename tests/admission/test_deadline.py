"""The deadline gate: refuse what cannot be served in time, measure the prefill rate, and hold
up against what a server may feed it (no target, no rate yet, huge prompts, a clock that skips)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from governor.admission.deadline import (
    DEFAULT_CALIBRATION_QUANTILE,
    ClassDeadline,
    DeadlineGate,
    DeadlineSettings,
    PrefillMeter,
    class_deadlines,
    first_token_targets,
)
from governor.contracts.metrics.service import REASON_DEADLINE, REASON_TOKENS_AHEAD
from governor.slo.spec import parse_spec

CHAT = ClassDeadline("chat", 0, 1.0)
DOC = ClassDeadline("doc", 10, 20.0)
BATCH = ClassDeadline("batch", 20, None)  # no first-token target


def gate(*classes: ClassDeadline, **settings: float | int | None) -> DeadlineGate[str]:
    return DeadlineGate(classes or (CHAT, DOC, BATCH),
                        DeadlineSettings(**settings))  # type: ignore[arg-type]


def measured(g: DeadlineGate[str], tokens_per_second: float = 10_000.0,
             name: str = "chat") -> float:
    """Feed the gate 10 s of steady prefill at ``tokens_per_second``; returns the time after."""
    now = 0.0
    for i in range(10):
        g.track(f"warm{i}", name, int(tokens_per_second), now, waiting=False)
        now += 1.0
        g.first_token(f"warm{i}", now)
    return now


def test_a_request_is_refused_when_the_tokens_ahead_outlast_its_deadline() -> None:
    g = gate()
    now = measured(g)
    g.track("ahead", "chat", 15_000, now, waiting=False)  # 1.5 s of prefill ahead
    refused = g.judge("chat", 100, now)
    assert not refused.admit and refused.reason == REASON_DEADLINE
    assert refused.tokens_ahead == 15_000
    assert refused.wait_seconds == pytest.approx(1.5, rel=0.05)
    assert refused.retry_after_seconds == 1  # ~0.5 s past a whole deadline, rounded up
    # A document's 20 s deadline has room for it.
    assert g.judge("doc", 5_000, now).admit


def test_what_it_already_waited_counts_against_its_deadline() -> None:
    g = gate()
    now = measured(g)
    g.track("ahead", "chat", 5_000, now, waiting=False)  # 0.5 s ahead
    assert g.judge("chat", 100, now, waited=0.2).admit
    assert not g.judge("chat", 100, now, waited=0.6).admit


def test_a_lower_class_is_not_ahead_of_a_higher_one() -> None:
    g = gate()
    now = measured(g)
    g.track("d1", "doc", 50_000, now, waiting=False)
    g.track("b1", "batch", 50_000, now, waiting=True)
    assert g.tokens_ahead("chat") == 0 and g.judge("chat", 500, now).admit
    assert g.tokens_ahead("doc") == 50_000
    assert g.tokens_ahead("batch") == 100_000


def test_a_class_without_a_target_is_never_refused_by_deadline() -> None:
    g = gate()
    now = measured(g)
    g.track("huge", "chat", 10_000_000, now, waiting=False)
    judged = g.judge("batch", 100, now)
    assert judged.admit and judged.deadline_seconds is None
    assert judged.wait_seconds is not None and judged.wait_seconds > 900
    assert g.deadline("batch") is None and g.deadline_left("batch", 5.0) is None


def test_nothing_measured_at_start_refuses_nothing() -> None:
    g = gate()
    for i in range(100):
        g.track(f"r{i}", "chat", 8_000, float(i) * 1e-3, waiting=False)
    judged = g.judge("chat", 8_000, 0.1)
    assert judged.admit and judged.wait_seconds is None and g.rate is None


def test_a_busy_engine_that_brings_no_token_has_no_rate_and_refuses_nothing() -> None:
    g = gate()
    g.track("stuck", "chat", 1_000, 0.0, waiting=False)
    assert g.judge("chat", 10, 100.0).admit and g.rate is None


def test_a_prompt_alone_is_never_refused_however_large() -> None:
    g = gate()
    now = measured(g)
    judged = g.judge("chat", 100_000_000, now)
    assert judged.admit and judged.tokens_ahead == 0
    assert judged.first_token_seconds == pytest.approx(10_000, rel=0.05)


def test_a_huge_backlog_asks_for_at_most_the_longest_retry_after() -> None:
    g = gate(max_retry_after_seconds=60)
    now = measured(g)
    g.track("huge", "chat", 100_000_000, now, waiting=False)
    judged = g.judge("chat", 100, now)
    assert not judged.admit and judged.retry_after_seconds == 60


def test_the_rate_follows_the_engine_within_a_window() -> None:
    g = gate(window_seconds=10.0)
    now = measured(g, 10_000)
    assert g.rate == pytest.approx(10_000, rel=0.02)
    for i in range(60):  # the engine slows to a fifth (a cut budget, a throttled GPU)
        g.track(f"slow{i}", "chat", 2_000, now, waiting=False)
        now += 1.0
        g.first_token(f"slow{i}", now)
    assert g.rate == pytest.approx(2_000, rel=0.05)


def test_idle_time_is_not_prefill_time() -> None:
    g = gate()
    now = measured(g, 10_000)
    g.judge("chat", 1, now + 600.0)  # ten idle minutes pass
    g.track("next", "chat", 10_000, now + 600.0, waiting=False)
    g.first_token("next", now + 601.0)
    assert g.rate == pytest.approx(10_000, rel=0.02)


def test_a_clock_that_steps_back_adds_nothing() -> None:
    g = gate()
    now = measured(g, 10_000)
    rate = g.rate
    g.track("back", "chat", 10_000, now - 50.0, waiting=False)  # from another clock, earlier
    sample = g.first_token("back", now - 60.0)  # a first token "before" its admission
    assert sample is not None and sample.actual_seconds == 0.0
    assert g.rate == pytest.approx(rate or 0, rel=0.25)  # one prompt's tokens, no time
    assert g.judge("chat", 10, math.nan).admit  # NaN is no time at all
    assert g.deadline_left("chat", waited=-5.0) == 1.0  # arrived "in the future": nothing spent


def test_waiting_tokens_move_into_the_engine_and_out_at_the_first_token() -> None:
    g = gate()
    g.track("w", "doc", 3_000, 0.0, waiting=True)
    assert (g.queued_tokens, g.pending_tokens) == (3_000, 0)
    assert g.first_token("w", 0.5) is None  # not in the engine: nothing to count
    g.start("w", 1.0)
    assert (g.queued_tokens, g.pending_tokens) == (0, 3_000)
    sample = g.first_token("w", 2.0)
    assert sample is not None and sample.name == "doc" and sample.actual_seconds == 2.0
    assert g.first_token("w", 3.0) is None and g.pending_tokens == 0
    g.forget("w", 3.0)  # gone already: nothing happens
    g.forget("never-seen", 3.0)


def test_an_estimate_judged_at_arrival_becomes_the_engine_s_count() -> None:
    g = gate()
    g.track("p", "chat", 250, 0.0, waiting=False)  # judged on ~bytes / 4
    g.track("w", "doc", 100, 0.0, waiting=True)
    g.recount("p", 312, 0.1)  # what the engine's tokenizer made of it
    g.recount("w", 90, 0.1)
    g.recount("gone", 5, 0.1)  # not tracked: nothing happens
    assert (g.queued_tokens, g.pending_tokens, g.tokens_ahead("doc")) == (90, 312, 402)
    g.first_token("p", 1.0)
    assert g.pending_tokens == 0 and g.rate == pytest.approx(312.0, rel=0.01)
    with pytest.raises(ValueError, match="cannot have -1 tokens"):
        g.recount("w", -1, 2.0)


def test_a_request_that_leaves_before_its_first_token_leaves_the_backlog() -> None:
    g = gate()
    g.track("a", "chat", 500, 0.0, waiting=False)
    g.track("b", "chat", 700, 0.0, waiting=True)
    g.forget("a", 1.0)
    g.forget("b", 1.0)
    assert g.pending_tokens == g.queued_tokens == 0 and g.tokens_ahead("batch") == 0


def test_the_prediction_is_kept_for_the_first_token() -> None:
    g = gate()
    now = measured(g, 10_000)
    g.track("ahead", "chat", 4_000, now, waiting=False)
    judged = g.judge("chat", 1_000, now)
    assert judged.admit and judged.first_token_seconds == pytest.approx(0.5, rel=0.05)
    g.track("me", "chat", 1_000, now, waiting=False, judgement=judged)
    sample = g.first_token("me", now + 0.7)
    assert sample is not None and sample.predicted_seconds == judged.first_token_seconds
    assert sample.actual_seconds == pytest.approx(0.7)


def test_slack_moves_every_deadline_live() -> None:
    g = gate()
    now = measured(g, 10_000)
    g.track("ahead", "chat", 15_000, now, waiting=False)
    assert not g.judge("chat", 10, now).admit
    g.set_slack(2.0)
    assert g.deadline("chat") == 2.0 and g.deadline("doc") == 40.0
    assert g.judge("chat", 10, now).admit
    with pytest.raises(ValueError, match="slack"):
        g.set_slack(0.0)


def test_a_static_bound_on_tokens_ahead_refuses_with_or_without_a_rate() -> None:
    g = gate(max_tokens_ahead=10_000)
    g.track("ahead", "chat", 12_000, 0.0, waiting=False)
    judged = g.judge("batch", 10, 0.0)  # no rate, no deadline: only the bound
    assert not judged.admit and judged.reason == REASON_TOKENS_AHEAD
    assert judged.retry_after_seconds == 1
    g.set_max_tokens_ahead(None)
    assert g.judge("batch", 10, 0.0).admit


@pytest.mark.parametrize("bad", [
    {"slack": -1.0}, {"slack": math.inf}, {"window_seconds": 0.0}, {"min_busy_seconds": -1.0},
    {"max_tokens_ahead": -1}, {"max_retry_after_seconds": 0},
    {"calibration_quantile": 0.0}, {"calibration_quantile": 1.5},
    {"calibration_quantile": math.nan}, {"calibration_near": 2.0},
    {"calibration_min_samples": 0}, {"calibration_min_samples": 300}, {"max_correction": 0.5},
])
def test_bad_settings_are_refused_with_their_name(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        DeadlineSettings(**bad)  # type: ignore[arg-type]


def test_bad_classes_and_tokens_are_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        ClassDeadline("chat", 0, 0.0)
    with pytest.raises(ValueError, match="positive"):
        ClassDeadline("chat", 0, math.nan)
    with pytest.raises(ValueError, match="uniquely"):
        DeadlineGate((CHAT, CHAT))
    g = gate()
    with pytest.raises(ValueError, match="no request class 'mail'"):
        g.judge("mail", 10, 0.0)
    with pytest.raises(ValueError, match="-1 tokens"):
        g.judge("chat", -1, 0.0)
    g.track("a", "chat", 1, 0.0, waiting=False)
    with pytest.raises(ValueError, match="tracked already"):
        g.track("a", "chat", 1, 0.0, waiting=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["track", "start", "first", "forget"]),
                          st.integers(0, 7), st.sampled_from(["chat", "doc", "batch"]),
                          st.integers(0, 10**9), st.one_of(st.floats(-1e6, 1e6), st.just(math.nan)),
                          st.booleans()), max_size=60))
def test_the_backlog_balances_whatever_the_order_of_events(
        events: list[tuple[str, int, str, int, float, bool]]) -> None:
    g = gate()
    tracked: dict[str, tuple[str, int, bool]] = {}
    for op, k, name, tokens, now, waiting in events:
        key = f"r{k}"
        if op == "track" and key not in tracked:
            g.track(key, name, tokens, now, waiting=waiting)
            tracked[key] = (name, tokens, waiting)
        elif op == "start" and key in tracked:
            g.start(key, now)
            tracked[key] = (tracked[key][0], tracked[key][1], False)
        elif op == "first" and key in tracked and not tracked[key][2]:
            assert g.first_token(key, now) is not None
            del tracked[key]
        elif op == "forget":
            g.forget(key, now)
            tracked.pop(key, None)
        rate = g.rate
        assert rate is None or (math.isfinite(rate) and rate >= 0)
    assert g.pending_tokens == sum(t for _, t, w in tracked.values() if not w)
    assert g.queued_tokens == sum(t for _, t, w in tracked.values() if w)


def test_the_meter_reads_nothing_until_it_has_seen_prefill() -> None:
    meter = PrefillMeter(30.0)
    assert meter.rate(0.5) is None
    meter.advance(0.0, busy=True)
    meter.advance(0.1, busy=True)
    meter.prefilled(1_000)
    assert meter.rate(0.5) is None  # 0.1 s is too little to go on
    assert meter.rate(0.0) == pytest.approx(10_000, rel=0.01)


SPEC: dict[str, Any] = {
    "version": "governor/v1", "service": "s", "period": "30d",
    "slos": [
        {"name": "time-to-first-token", "objective": 99,
         "sli": {"latency": {"metric": "governor_time_to_first_token_seconds",
                             "threshold": "1s"}}},
        {"name": "availability", "objective": 99.9,
         "sli": {"ratio": {"errors": "e_total", "total": "t_total"}}},
    ],
    "classes": [{"name": "doc", "match": {"prompt_tokens": {"min": 3000}}, "priority": 10,
                 "targets": {"time-to-first-token": "20s"}}, {"name": "chat"}],
}


def test_deadlines_come_from_each_class_s_first_token_target() -> None:
    spec = parse_spec(SPEC)
    assert dict(first_token_targets(spec)) == {"doc": 20.0, "chat": 1.0}
    assert class_deadlines(spec) == (ClassDeadline("doc", 10, 20.0), ClassDeadline("chat", 0, 1.0))
    assert class_deadlines(spec, "") == (ClassDeadline("doc", 10), ClassDeadline("chat", 0))


def test_the_deadlines_follow_the_ttft_role_not_the_name() -> None:
    renamed = [{**SPEC["slos"][0], "name": "ttft"}, *SPEC["slos"][1:]]
    classes = [{**SPEC["classes"][0], "targets": {"ttft": "20s"}}, SPEC["classes"][1]]
    assert first_token_targets(parse_spec({**SPEC, "slos": renamed, "classes": classes})) == {}
    with_role = [{**renamed[0], "role": "ttft"}, *renamed[1:]]
    spec = parse_spec({**SPEC, "slos": with_role, "classes": classes})
    assert dict(first_token_targets(spec)) == {"doc": 20.0, "chat": 1.0}


def test_a_spec_without_the_default_first_token_slo_has_no_deadlines() -> None:
    spec = parse_spec({**SPEC, "slos": SPEC["slos"][1:],
                       "classes": [{"name": "doc", "match": {"prompt_tokens": {"min": 3000}}},
                                   {"name": "chat"}]})
    assert first_token_targets(spec) == {}


def test_a_named_first_token_slo_must_exist_and_be_a_latency_slo() -> None:
    spec = parse_spec(SPEC)
    with pytest.raises(ValueError, match="no SLO named 'ttft'"):
        first_token_targets(spec, "ttft")
    with pytest.raises(ValueError, match="not a latency SLO"):
        first_token_targets(spec, "availability")


def late_first_tokens(g: DeadlineGate[str], now: float, count: int, lateness: float,
                      ahead_tokens: int = 7_000) -> float:
    """``count`` chats each admitted behind ``ahead_tokens`` (0.7 s of prefill at 10k tokens/s,
    near a 1 s deadline) whose first token comes ``lateness`` times later than predicted."""
    for i in range(count):
        g.track(f"ahead{i}", "chat", ahead_tokens, now, waiting=False)
        judged = g.judge("chat", 1_000, now)
        assert judged.admit and judged.first_token_seconds is not None
        g.track(f"late{i}", "chat", 1_000, now, waiting=False, judgement=judged)
        g.forget(f"ahead{i}", now)
        g.first_token(f"late{i}", now + lateness * judged.first_token_seconds / judged.correction)
        now += 0.001
    return now


def test_calibration_is_on_by_default_at_the_default_quantile() -> None:
    assert DeadlineSettings().calibration_quantile == DEFAULT_CALIBRATION_QUANTILE == 0.9
    g = gate()
    late_first_tokens(g, measured(g), 40, lateness=1.3)
    assert g.correction == pytest.approx(1.3)


def test_calibration_turned_off_lets_a_late_engine_change_nothing() -> None:
    g = gate(calibration_quantile=None)
    now = late_first_tokens(g, measured(g), 40, lateness=1.3)
    assert g.correction == 1.0
    assert g.rate is not None
    g.track("ahead", "chat", round(0.95 * g.rate) - 1_000, now, waiting=False)
    assert g.judge("chat", 1_000, now).admit  # 0.95 s predicted: fits its 1 s


def test_calibration_scales_the_prediction_by_how_late_first_tokens_came() -> None:
    g = gate(calibration_quantile=0.9)
    now = measured(g)
    now = late_first_tokens(g, now, 19, lateness=1.3)
    assert g.correction == 1.0  # fewer than calibration_min_samples (20)
    now = late_first_tokens(g, now, 21, lateness=1.3)
    assert g.correction == pytest.approx(1.3, rel=0.02)
    assert g.rate is not None
    g.track("ahead", "chat", round(0.85 * g.rate) - 1_000, now, waiting=False)
    judged = g.judge("chat", 1_000, now)  # 0.85 s before calibration, 1.1 s after
    assert not judged.admit and judged.reason == REASON_DEADLINE
    assert judged.first_token_seconds == pytest.approx(0.85 * 1.3, rel=0.03)
    assert judged.correction == pytest.approx(1.3, rel=0.02)


def test_calibration_reads_only_requests_near_their_deadline_and_stays_in_bounds() -> None:
    g = gate(calibration_quantile=0.9, max_correction=1.5)
    now = measured(g)
    # Far from the line (0.2 s of a 1 s deadline): however late, not read.
    now = late_first_tokens(g, now, 40, lateness=3.0, ahead_tokens=1_000)
    assert g.correction == 1.0
    now = late_first_tokens(g, now, 40, lateness=3.0)
    assert g.correction == 1.5  # at most max_correction
    early = gate(calibration_quantile=0.9)
    late_first_tokens(early, measured(early), 40, lateness=0.5)
    assert early.correction == 1.0  # an engine faster than predicted never loosens the gate


def test_the_calibration_learns_from_the_raw_prediction_so_it_does_not_chase_itself() -> None:
    g = gate(calibration_quantile=0.5)
    now = late_first_tokens(g, measured(g), 40, lateness=1.2)
    assert g.correction == pytest.approx(1.2, rel=0.02)
    # Admitted under the correction, first tokens keep coming 1.2x their raw prediction.
    late_first_tokens(g, now, 200, lateness=1.2, ahead_tokens=6_000)
    assert g.correction == pytest.approx(1.2, rel=0.02)
