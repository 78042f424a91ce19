"""``governor why``: the verdict read from Prometheus, ranked, with its evidence and actions."""

from __future__ import annotations

import json
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest

from governor.why import main
from tests.support.fake_http import QuietHandler, send_json, serving

TARGET = "10.0.0.7:8000"
SHARES = [("inter-token-latency", "batching", 0.2), ("inter-token-latency", "gpu_throttled", 0.8),
          ("time-to-first-token", "queue", 1.0), ("inter-token-latency", "no_such_cause", 1.0)]
SERIES = {
    "verdict:burn:ratio": [("inter-token-latency", 4.0), ("time-to-first-token", 1.5)],
    "verdict:client_quantile:seconds": [("inter-token-latency", 0.21)],
    "verdict:excess:seconds": [("inter-token-latency", 0.09)],
}


class Fake(QuietHandler):
    queries: list[str] = []

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path != "/api/v1/query":
            self.send_error(404)
            return
        query = parse_qs(url.query)["query"][0]
        Fake.queries.append(query)
        if query == "verdict:cause:share":
            result = [{"metric": {"slo": slo, "cause": cause, "instance": TARGET},
                       "value": [0, str(share)]} for slo, cause, share in SHARES]
        elif query in SERIES:
            result = [{"metric": {"slo": slo, "instance": TARGET}, "value": [0, str(value)]}
                      for slo, value in SERIES[query]]
        elif "gpu_clock_deficit" in query:  # the evidence: the clock's share of its highest
            value = "0.5" if query.startswith("1 - ") else "0"
            if query.startswith("avg_over_time"):
                value = "0.95"
            result = [{"metric": {}, "value": [0, value]}]
        else:
            result = []
        send_json(self, {"status": "success", "data": {"resultType": "vector",
                                                       "result": result}})


@pytest.fixture
def prometheus() -> Iterator[str]:
    with serving(Fake) as url:
        yield url


def test_causes_are_ranked_with_their_evidence_action_and_runbook(
    prometheus: str, capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--prometheus", prometheus]) == 0
    out = capsys.readouterr().out
    itl = out.index("inter-token-latency burns on 10.0.0.7:8000: its quantile is 210 ms, 90 ms")
    assert out.index("time-to-first-token burns") > itl  # the most burning SLO first
    section = out[itl:out.index("time-to-first-token burns")]
    assert section.index("1. gpu_throttled: 80% of the breach") < \
        section.index("2. batching: 20% of the breach")
    assert "SM clock, of its highest: 50% (over the longer window: 95%)" in section
    assert "the controller holds the limits: no batching limit fixes it" in section
    assert "runbook: docs/runbooks.md#cause-gpu_throttled" in section
    assert "no_such_cause" not in out
    assert "the controller holds the limits and raises the scale-out signal" in out  # queue


def test_one_target_one_slo_and_json(prometheus: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--prometheus", prometheus, TARGET, "--slo", "time-to-first-token",
                 "--json"]) == 0
    (verdict,) = json.loads(capsys.readouterr().out)["verdicts"]
    assert (verdict["slo"], verdict["instance"], verdict["burn"]) == \
        ("time-to-first-token", TARGET, 1.5)
    assert [c["cause"] for c in verdict["causes"]] == ["queue"]
    assert main(["--prometheus", prometheus, "10.9.9.9:8000"]) == 0
    assert "nothing to blame" in capsys.readouterr().out


def test_an_unreachable_prometheus_is_one_line_and_status_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--prometheus", "http://127.0.0.1:9", "--timeout", "1s"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("governor why: cannot read the verdict from http://127.0.0.1:9")
    assert "Traceback" not in out
