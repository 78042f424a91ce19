"""Alertmanager's webhook payloads: strict parsing, idempotent recording."""

from __future__ import annotations

import gc
import json
import tracemalloc
from typing import Any

import pytest

from governor.controller.config import valid_instance
from governor.controller.intake import (
    KEPT_LABELS,
    KEPT_VALUE_CHARACTERS,
    MAX_ALERTS,
    AlertBook,
    IntakeError,
    parse_webhook,
)

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


def flood(start: int, count: int, *, labels: int = 64, value: int = 990) -> bytes:
    """A notification as large as the webhook takes, every label as long as the parser allows."""
    return body(alerts=[alert(fingerprint=f"flood{i}", labels={
        "alertname": "Flood", "instance": "10.0.0.5:8000",
        **{f"l{j:02d}": f"{i}-{j}-" + "x" * value for j in range(labels - 2)}})
        for i in range(start, start + count)])


def test_the_book_is_bounded_in_bytes_whatever_the_labels_weigh() -> None:
    budget = 4 * 2**20
    gc.collect()
    tracemalloc.start()
    try:
        book = AlertBook(max_bytes=budget)
        for start in range(0, 800, 16):  # 50 notifications of about 1 MB
            book.record(parse_webhook(flood(start, 16)), now=float(start))
        gc.collect()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert book.bytes <= budget
    assert held <= budget * 1.1  # the estimate is conservative
    kept = book.firing()
    assert len(kept) == len(book) > 250
    assert "flood799" in {r.alert.fingerprint for r in kept}  # the newest are kept
    assert all(len(r.alert.labels) <= KEPT_LABELS for r in kept)
    assert all(len(v) <= KEPT_VALUE_CHARACTERS for r in kept for v in r.alert.labels.values())
    assert book.instances() == {"10.0.0.5:8000"}  # the naming labels are kept first


def test_a_value_cut_to_size_never_names_a_target() -> None:
    long_instance = "a" * 250 + ".example:8000"
    book = AlertBook()
    book.record(parse_webhook(body(alerts=[alert(labels={"instance": long_instance})])), 0.0)
    (instance,) = book.instances()
    assert instance.endswith("...") and len(instance) == KEPT_VALUE_CHARACTERS
    assert not valid_instance(instance)


def test_an_alert_not_renewed_is_forgotten_and_a_renewed_one_is_kept() -> None:
    book = AlertBook(expire_after_seconds=900.0)
    book.record(parse_webhook(body()), now=0.0)
    book.record(parse_webhook(body(alerts=[alert(fingerprint="other")])), now=0.0)
    for now in (300.0, 600.0, 900.0):  # Alertmanager's repeat interval: 5 minutes
        assert book.record(parse_webhook(body()), now=now).duplicate == 1
    assert book.expire(1200.0) == 1  # "other" was never re-sent
    assert [r.alert.fingerprint for r in book.firing()] == ["ccf3551c2aedf3fe"]
    assert book.firing()[0].received_at == 0.0  # renewed, not new
    assert book.expire(1801.0) == 1
    assert book.firing() == [] and book.bytes == 0
