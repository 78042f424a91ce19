"""Alertmanager's webhook payloads: strict parsing, idempotent recording."""

from __future__ import annotations

import json
from typing import Any

import pytest

from governor.controller.intake import MAX_ALERTS, AlertBook, IntakeError, parse_webhook

# Captured from Alertmanager 0.25 (webhook payload version 4), with a controller alert's labels.
CAPTURED = {
    "receiver": "controller", "status": "firing",
    "alerts": [{
        "status": "firing",
        "labels": {"alertname": "InterTokenLatencyP99High", "severity": "control",
                   "slo": "inter-token-latency", "instance": "10.0.0.5:8000"},
        "annotations": {"summary": "burning"}, "startsAt": "2026-11-29T08:27:05Z",
        "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "http://prom:9090/graph?g0.expr=x",
        "fingerprint": "ccf3551c2aedf3fe"}],
    "groupLabels": {"alertname": "InterTokenLatencyP99High"},
    "commonLabels": {"alertname": "InterTokenLatencyP99High"}, "commonAnnotations": {},
    "externalURL": "http://am:9093", "version": "4",
    "groupKey": "{}:{alertname=\"InterTokenLatencyP99High\"}", "truncatedAlerts": 0,
}


def body(**changes: Any) -> bytes:
    return json.dumps({**CAPTURED, **changes}).encode()


def alert(**changes: Any) -> dict[str, Any]:
    return {**CAPTURED["alerts"][0], **changes}  # type: ignore[index]


def test_a_captured_notification_parses() -> None:
    payload = parse_webhook(body())
    (parsed,) = payload.alerts
    assert parsed.fingerprint == "ccf3551c2aedf3fe"
    assert parsed.instance == "10.0.0.5:8000"
    assert payload.status == "firing"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "not JSON"),
        (b"{", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[]", "must be a JSON object"),
        (body(version="3"), "version"),
        (body(alerts="x"), "alerts: must be a list"),
        (body(alerts=[1]), "alerts[0]: must be an object"),
        (body(alerts=[alert(status="pending")]), "alerts[0].status"),
        (body(alerts=[alert(fingerprint="")]), "alerts[0].fingerprint"),
        (body(alerts=[alert(fingerprint="x" * 500)]), "alerts[0].fingerprint"),
        (body(alerts=[alert(labels={"a": 1})]), "alerts[0].labels"),
        (body(alerts=[alert(labels={"a": "x" * 5000})]), "alerts[0].labels"),
        (body(alerts=[alert()] * (MAX_ALERTS + 1)), "at most"),
    ],
    ids=["empty", "truncated", "not UTF-8", "a list", "wrong version", "alerts not a list",
         "alert not an object", "unknown status", "empty fingerprint", "huge fingerprint",
         "non-string label", "huge label", "too many alerts"],
)
def test_malformed_and_hostile_payloads_are_rejected_with_a_located_message(
    raw: bytes, message: str
) -> None:
    with pytest.raises(IntakeError) as caught:
        parse_webhook(raw)
    assert message in str(caught.value)


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(IntakeError) as caught:
        parse_webhook(body(version="1", alerts=[alert(status="x"), alert(fingerprint=3)]))
    assert len(caught.value.errors) == 3


def test_duplicates_by_fingerprint_are_ignored_and_a_refire_is_new() -> None:
    book = AlertBook()
    first = book.record(parse_webhook(body()), now=1.0)
    again = book.record(parse_webhook(body()), now=2.0)
    assert (first.new, again.new, again.duplicate) == (1, 0, 1)
    refire = book.record(parse_webhook(body(alerts=[alert(startsAt="2026-11-29T09:00:00Z")])),
                         now=3.0)
    assert refire.new == 1


def test_a_resolved_alert_clears_its_instance() -> None:
    book = AlertBook()
    book.record(parse_webhook(body()), now=1.0)
    assert book.instances() == {"10.0.0.5:8000"}
    outcome = book.record(parse_webhook(body(status="resolved", alerts=[
        alert(status="resolved", endsAt="2026-11-29T08:40:00Z")])), now=2.0)
    assert outcome.resolved == 1
    assert book.instances() == set()
    assert book.firing() == []


def test_a_flood_of_fingerprints_is_bounded_and_keeps_the_firing_ones() -> None:
    book = AlertBook(max_records=10)
    book.record(parse_webhook(body()), now=0.0)
    for i in range(30):
        resolved = alert(fingerprint=f"r{i}", status="resolved")
        book.record(parse_webhook(body(alerts=[resolved])), now=float(i + 1))
    assert len(book._records) == 10
    assert book.instances() == {"10.0.0.5:8000"}
