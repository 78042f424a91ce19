"""The demo's story as ``governor up --load`` tells it: each chapter once, in order, and a change
told as woken by the alert only when the controller's audit line of it says that alert started
its pass (``woken_by``), whatever the times say."""

from __future__ import annotations

from governor.story import Look, Story

ALERT = "InterTokenLatencyP99High"
CUT = {"at": "2026-12-06T10:34:17.125Z", "action": "tighten", "reason": "itl_breach",
       "applied": True, "before": {"max_num_batched_tokens": 8192, "max_num_seqs": 1024},
       "after": {"max_num_batched_tokens": 3264, "max_num_seqs": 1024},
       "woken_by": {"by": "alert", "alerts": [ALERT]}}
PERIODIC_CUT = {**CUT, "woken_by": {"by": "periodic"}}


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


def test_a_change_on_the_periodic_check_is_told_as_such() -> None:
    story = Story(ALERT, 0.12)
    assert story.tell(Look(p99_seconds=0.15, change=PERIODIC_CUT)) == [
        "controller: max_num_batched_tokens 8192 -> 3264 (itl_breach), on its own periodic "
        "check, before the alert reached it"]
    assert story.woken_by_alert is False
    late = Look(p99_seconds=0.15, alert_state="firing", received_at="2026-12-06T10:34:30.000Z",
                change=PERIODIC_CUT)
    assert story.tell(late)[-1] == f"controller: its webhook received {ALERT}"


def test_the_cause_is_the_audit_lines_not_an_inference_from_times() -> None:
    """The webhook received the alert a second before the change, yet the pass that made it
    was the periodic check (the alert's own pass had held): told as the periodic check. And a
    change whose time does not parse, made on the alert's pass, was woken by the alert."""
    story = Story(ALERT, 0.12)
    lines = story.tell(Look(received_at="2026-12-06T10:34:16.000Z", change=PERIODIC_CUT))
    assert lines[-1].endswith("(itl_breach), on its own periodic check")
    assert story.woken_by_alert is False
    story = Story(ALERT, 0.12)
    lines = story.tell(Look(received_at="2026-12-06T10:34:18.000Z", change={**CUT, "at": None}))
    assert lines[-1].endswith("(itl_breach), woken by the alert")
    assert story.woken_by_alert is True


def test_a_pass_woken_by_another_alert_or_at_start_is_told_so() -> None:
    other = {**CUT, "woken_by": {"by": "alert", "alerts": ["TimeToFirstTokenP99High"]}}
    assert Story(ALERT, 0.12).tell(Look(change=other))[-1].endswith(
        "(itl_breach), woken by TimeToFirstTokenP99High")
    start = {**CUT, "woken_by": {"by": "start"}}
    assert Story(ALERT, 0.12).tell(Look(change=start))[-1].endswith(
        "(itl_breach), on its first pass at start")


def test_the_p99_coming_back_is_told_only_after_a_change() -> None:
    assert told([Look(p99_seconds=0.05), Look(p99_seconds=0.05, alert_state="pending")]) == [
        f"Prometheus: {ALERT} pending (p99 50 ms over the window)"]
