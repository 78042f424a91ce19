"""The drill's timeline: each piece of news once, in seconds since the onset; the JSON line."""

from __future__ import annotations

import json

from governor.drills.observe import Alert, Decision, Share, Snapshot
from governor.drills.report import Result, Timeline, describe_decision


def test_news_is_printed_once_when_it_happens() -> None:
    lines: list[str] = []
    timeline = Timeline(lines.append)
    burning = Snapshot(shares=(Share("itl", "batching", 0.8), Share("itl", "queue", 0.2)),
                       burns={"itl": 2.0, "ttft": 0.1}, alerts=(Alert("ItlHigh", "page", "itl"),))
    timeline.snapshot(10.0, burning)
    timeline.snapshot(15.0, burning)
    timeline.snapshot(20.0, Snapshot(burns={"itl": 0.5}))
    assert lines == ["   +10.0s  burning: itl (burn 2.0x)",
                     "   +10.0s  alert firing: ItlHigh (page, itl)",
                     "   +10.0s  verdict: itl: batching 0.80, queue 0.20",
                     "   +20.0s  no longer burning: itl",
                     "   +20.0s  verdict: none (no SLO burns)"]
    assert timeline.verdict_polls == 2 and timeline.max_burn == {"itl": 2.0, "ttft": 0.1}
    assert timeline.max_share == {"batching": 0.8, "queue": 0.2}
    assert timeline.alerts == [{"name": "ItlHigh", "severity": "page", "slo": "itl",
                                "seconds": 10.0}]
    assert timeline.leading == [[10.0, "batching"], [20.0, None]]


def test_a_reading_error_is_said_once() -> None:
    lines: list[str] = []
    timeline = Timeline(lines.append)
    for seconds in (5.0, 10.0):
        timeline.snapshot(seconds, Snapshot(error="Prometheus: refused"))
    assert lines == ["    +5.0s  cannot read: Prometheus: refused"]


def test_a_decision_shows_the_limits_it_moved() -> None:
    cut = Decision("t", "tighten", "itl_breach", {"max_num_batched_tokens": 8192,
                                                  "max_num_seqs": 64},
                   {"max_num_batched_tokens": 2048, "max_num_seqs": 64})
    assert describe_decision(cut) == \
        "controller: tighten (itl_breach): max_num_batched_tokens 8192 → 2048"
    assert describe_decision(Decision("t", "hold", "gpu_throttled")) == \
        "controller: hold (gpu_throttled): limits unchanged"


def test_the_json_line_has_the_fields_scripts_score() -> None:
    result = Result(drill="queue", spec="slo.yaml", seed=2, injected={"faults": {}},
                    found="queue", verdict=[{"slo": "ttft", "cause": "queue", "share": 1.0}],
                    onset_to_verdict_seconds=35.0, alerts=[], controller_changes=0,
                    controller_reasons=["hold: queue"], notes=[], expected="queue")
    record = json.loads(result.json_line())
    assert list(record)[:11] == ["drill", "spec", "seed", "injected", "found", "verdict",
                                 "onset_to_verdict_seconds", "alerts", "controller_changes",
                                 "controller_reasons", "notes"]
    assert "\n" not in result.json_line()
