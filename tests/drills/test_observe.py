"""Reading what a team would see: the verdict, the burns, the alerts, the controller's log."""

from __future__ import annotations

import json
from pathlib import Path

from governor.drills.observe import (
    Alert,
    Decision,
    Observer,
    decisions_since,
    parse_alerts,
    parse_burns,
    parse_decisions,
    parse_shares,
)


def sample(value: str, **labels: str) -> dict[str, object]:
    return {"metric": labels, "value": [1700000000.0, value]}


def test_shares_come_largest_first_and_nan_is_no_share() -> None:
    shares = parse_shares([sample("0.2", slo="itl", cause="queue", instance="a:1"),
                           sample("NaN", slo="itl", cause="batching", instance="a:1"),
                           sample("0.7", slo="ttft", cause="kv_cache", instance="a:1")])
    assert [(s.slo, s.cause, s.share) for s in shares] == [("ttft", "kv_cache", 0.7),
                                                          ("itl", "queue", 0.2)]


def test_a_burn_is_the_worst_over_the_targets() -> None:
    assert parse_burns([sample("0.5", slo="itl", instance="a"), sample("2.5", slo="itl",
                                                                        instance="b"),
                        sample("0.1", slo="ttft", instance="a")]) == {"itl": 2.5, "ttft": 0.1}


def test_only_firing_alerts_are_news_each_once() -> None:
    body = {"status": "success", "data": {"alerts": [
        {"labels": {"alertname": "ItlHigh", "severity": "page", "slo": "itl"},
         "annotations": {"summary": "p99   over\n the SLO"}, "state": "firing"},
        {"labels": {"alertname": "ItlHigh", "severity": "page", "slo": "itl"},
         "annotations": {"summary": "p99   over\n the SLO"}, "state": "firing"},
        {"labels": {"alertname": "TtftHigh"}, "state": "pending"}]}}
    assert parse_alerts(body) == [Alert("ItlHigh", "page", "itl", "p99 over the SLO")]
    assert parse_alerts({"status": "error"}) == [] == parse_alerts(None)


def line(at: str, action: str, before: int, after: int) -> str:
    return json.dumps({"at": at, "action": action, "reason": "r",
                       "before": {"max_num_batched_tokens": before, "max_num_seqs": 8},
                       "after": {"max_num_batched_tokens": after, "max_num_seqs": 8}})


def test_decisions_change_limits_or_not_and_are_taken_since_a_time() -> None:
    decisions = parse_decisions([line("2026-01-01T00:00:10.000Z", "tighten", 8192, 2048),
                                 "not json", line("2026-01-01T00:00:20.000Z", "hold", 2048,
                                                  2048)])
    assert [(d.action, d.changed) for d in decisions] == [("tighten", True), ("hold", False)]
    onset = Decision("2026-01-01T00:00:15.000Z", "", "").at_unix
    assert [d.action for d in decisions_since(decisions, onset)] == ["hold"]


def test_the_observer_reads_the_audit_log_and_says_when_prometheus_is_away(
        tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    observer = Observer("http://127.0.0.1:9", log)
    assert observer.decisions() == []
    log.write_text(line("2026-01-01T00:00:10.000Z", "tighten", 8192, 2048) + "\n")
    assert [d.action for d in observer.decisions()] == ["tighten"]
    snap = observer.snapshot()
    assert snap.error is not None and snap.error.startswith("Prometheus:")
