"""The demo's story as ``governor up --load`` tells it: each chapter once, in order, and a change
told as woken by the alert only when the webhook had received it first."""

from __future__ import annotations

from governor.story import Look, Story

ALERT = "InterTokenLatencyP99High"
CUT = {"at": "2026-12-06T10:34:17.125Z", "action": "tighten", "reason": "itl_breach",
       "applied": True, "before": {"max_num_batched_tokens": 8192, "max_num_seqs": 1024},
       "after": {"max_num_batched_tokens": 3264, "max_num_seqs": 1024}}


def told(looks: list[Look]) -> list[str]:
    story = Story(ALERT, 0.12)
    return [line for seen in looks for line in story.tell(seen)]


def test_the_alert_path_is_told_in_order_and_each_chapter_once() -> None:
    lines = told([
        Look(p99_seconds=0.09),
        Look(p99_seconds=0.17, alert_state="pending"),
        Look(p99_seconds=0.17, alert_state="pending"),
        Look(p99_seconds=0.16, alert_state="firing"),
        Look(p99_seconds=0.16, alert_state="firing", routed_to=("controller", "ticket")),
        Look(p99_seconds=0.16, alert_state="firing", routed_to=("controller",),
             received_at="2026-12-06T10:34:16.996Z"),
        Look(p99_seconds=0.16, alert_state="firing", routed_to=("controller",),
             received_at="2026-12-06T10:34:16.996Z", change=CUT),
        Look(p99_seconds=0.094, received_at="2026-12-06T10:34:16.996Z", change=CUT),
        Look(p99_seconds=0.09, change=CUT),
    ])
    assert lines == [
        f"Prometheus: {ALERT} pending (p99 170 ms over the window)",
        f"Prometheus: {ALERT} firing",
        "Alertmanager: routed it to the controller's webhook",
        f"controller: its webhook received {ALERT}",
        "controller: max_num_batched_tokens 8192 -> 3264 (itl_breach), woken by the alert",
        "inter-token p99 back under 120 ms: 94 ms",
    ]


def test_a_change_before_the_webhook_heard_of_the_alert_is_told_as_the_periodic_check() -> None:
    story = Story(ALERT, 0.12)
    assert story.tell(Look(p99_seconds=0.15, change=CUT)) == [
        "controller: max_num_batched_tokens 8192 -> 3264 (itl_breach), on its own periodic "
        "check, before the alert reached it"]
    assert story.woken_by_alert is False
    late = Look(p99_seconds=0.15, alert_state="firing", received_at="2026-12-06T10:34:30.000Z",
                change=CUT)
    assert story.tell(late)[-1] == f"controller: its webhook received {ALERT}"


def test_a_webhook_that_received_the_alert_after_the_change_did_not_wake_it() -> None:
    story = Story(ALERT, 0.12)
    story.tell(Look(received_at="2026-12-06T10:34:18.000Z", change=CUT))
    assert story.woken_by_alert is False


def test_the_p99_coming_back_is_told_only_after_a_change() -> None:
    assert told([Look(p99_seconds=0.05), Look(p99_seconds=0.05, alert_state="pending")]) == [
        f"Prometheus: {ALERT} pending (p99 50 ms over the window)"]


def test_a_change_without_a_readable_time_is_not_told_as_woken_by_the_alert() -> None:
    story = Story(ALERT, 0.12)
    lines = story.tell(Look(received_at="2026-12-06T10:34:16.996Z", change={**CUT, "at": None}))
    assert story.woken_by_alert is False
    assert lines[-1].endswith("on its own periodic check, before the alert reached it")
