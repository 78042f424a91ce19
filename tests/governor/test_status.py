"""``governor status``: SLOs, firing alerts, limits and decisions from the three APIs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from governor.status import main
from tests.support.fake_http import QuietHandler, send_json, serving

PROMETHEUS = {
    "slo:objective:ratio": [("inter-token-latency", 0.99), ("availability", 0.999)],
    "slo:error_budget_remaining:ratio": [("inter-token-latency", -0.25),
                                         ("availability", 1.0)],
    "slo:burn_rate:ratio_rate5m": [("inter-token-latency", 3.5)],
    "slo:burn_rate:ratio_rate1h": [("inter-token-latency", 1.2)],
}
# The stage means stages.yml records (5m, 1h), and the SLOs' info series.
STAGE_MEANS: dict[str, dict[str, float]] = {}
INFO = [{"slo": "inter-token-latency", "metric": "governor_inter_token_latency_seconds"},
        {"slo": "availability"}]
# Three GPUs' recorded states and the reasons in force (the rules of health.yml).
GPU_STATES = [("e:9400", "0", 0), ("e:9400", "1", 1), ("e:9400", "2", 2)]
GPU_REASONS = [("e:9400", "1", "processes_high", 1), ("e:9400", "1", "memory_grows_idle", 1),
               ("e:9400", "2", "xid", 2), ("e:9400", "2", "power_throttle", 1)]
# The verdict on one target where the decode SLO burns.
VERDICT = [("inter-token-latency", "a:8000", "batching", 0.25),
           ("inter-token-latency", "a:8000", "gpu_throttled", 0.75)]
ALERTS = [{"labels": {"alertname": "InterTokenLatencyP99High", "severity": "control",
                      "slo": "inter-token-latency", "instance": "a:8000"},
           "startsAt": "2026-12-01T10:00:00Z"}]
CONTROLLER = {"targets": {"a:8000": {
    "limits": {"max_num_seqs": 256, "max_num_batched_tokens": 2048,
               "ceiling": {"max_num_seqs": 1024, "max_num_batched_tokens": 8192}},
    "last_result": "ok", "last_error": None,
    "recent_decisions": [
        {"at": "t1", "action": "tighten", "reason": "itl_breach", "after": {},
         "explanation": "tighten max_num_batched_tokens 8192 → 2048: prefill spikes"},
        {"at": "t2", "action": "hold", "reason": "cooldown", "after": {},
         "explanation": "hold: last change 10s ago"}]}}}


class Fake(QuietHandler):
    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/api/v1/query":
            query = parse_qs(url.query)["query"][0]
            result = [{"metric": {"slo": slo}, "value": [0, str(v)]}
                      for slo, v in PROMETHEUS.get(query, [])]
            if query == "slo:info":
                result = [{"metric": labels, "value": [0, "1"]} for labels in INFO]
            if query == "verdict:cause:share":
                result = [{"metric": {"slo": slo, "instance": i, "cause": c}, "value": [0, str(x)]}
                          for slo, i, c, x in VERDICT]
            if query == "gpu:health:state":
                result = [{"metric": {"instance": i, "gpu": g}, "value": [0, str(x)]}
                          for i, g, x in GPU_STATES]
            if query == "gpu:health_reason:severity > 0":
                result = [{"metric": {"instance": i, "gpu": g, "reason": r}, "value": [0, str(x)]}
                          for i, g, r, x in GPU_REASONS]
            result += [{"metric": {"stage": stage}, "value": [0, str(v)]}
                       for stage, v in STAGE_MEANS.get(query, {}).items()]
            self._send({"status": "success", "data": {"resultType": "vector",
                                                      "result": result}})
        elif url.path == "/api/v2/alerts":
            self._send(ALERTS)
        elif url.path == "/status":
            self._send(CONTROLLER)
        else:
            self.send_error(404)

    def _send(self, data: Any) -> None:
        send_json(self, data)


@pytest.fixture
def apis() -> Iterator[str]:
    with serving(Fake) as url:
        yield url


def argv(url: str, *extra: str) -> list[str]:
    return ["--prometheus", url, "--alertmanager", url, "--controller", url, *extra]


def test_one_screen_answers_how_the_slos_are_doing(
    apis: str, capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(argv(apis)) == 0
    out = capsys.readouterr().out
    assert "inter-token-latency  99.00%     -25.0%       3.50x    1.20x" in out
    assert "availability" in out and "100.0%" in out
    assert "InterTokenLatencyP99High" in out and "control" in out
    assert "max_num_batched_tokens 2048 (of 8192)" in out
    assert "tighten  itl_breach: tighten max_num_batched_tokens 8192 → 2048" in out
    assert "hold     cooldown" in out
    assert "inter-token-latency burns on a:8000: gpu_throttled 75%, batching 25% (governor why " \
        "a:8000 says why)" in out


def test_each_gpu_shows_its_state_worst_first_with_its_reasons_and_runbook(
    apis: str, capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(argv(apis)) == 0
    out = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in out if line.startswith("  e:9400")]
    assert [row[1:3] for row in rows] == [["2", "CRITICAL"], ["1", "WARN"], ["0", "HEALTHY"]]
    assert "power_throttle (WARN), xid (CRITICAL)" in next(line for line in out if " 2 " in line
                                                            and "CRITICAL" in line)
    assert rows[0][-1] == "docs/runbooks.md#gpu-state-critical"
    assert rows[2][-2:] == ["—", "docs/runbooks.md#gpu-state-healthy"]


def test_a_state_the_rules_never_record_is_shown_as_unknown(
    apis: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(__name__ + ".GPU_STATES", [("e:9400", "0", 7), ("e:9400", "1", 0.5)])
    assert main(argv(apis, "--json")) == 0
    shown = json.loads(capsys.readouterr().out)["gpus"]
    assert [(g["gpu"], g["state"], g["runbook"]) for g in shown] == [("0", "?", ""),
                                                                     ("1", "?", "")]


def test_json_carries_the_same(apis: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv(apis, "--json")) == 0
    data = json.loads(capsys.readouterr().out)
    itl = next(s for s in data["slos"] if s["name"] == "inter-token-latency")
    assert itl["budget_remaining"] == -0.25 and itl["burn_rates"]["5m"] == 3.5
    assert itl["burn_rates"]["6h"] is None
    assert data["alerts"][0]["name"] == "InterTokenLatencyP99High"
    assert data["targets"]["a:8000"]["limits"]["max_num_batched_tokens"] == 2048
    assert data["errors"] == {}
    assert itl["verdict"] == {"a:8000": [{"cause": "gpu_throttled", "share": 0.75},
                                         {"cause": "batching", "share": 0.25}]}


def test_a_source_that_does_not_answer_is_named_and_the_rest_still_shown(
    apis: str, capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["--prometheus", apis, "--alertmanager", "http://127.0.0.1:1",
                 "--controller", apis, "--timeout", "2s"])
    out = capsys.readouterr().out
    assert code == 1
    assert "Alertmanager http://127.0.0.1:1: unreachable" in out
    assert "inter-token-latency" in out and "max_num_batched_tokens 2048" in out


def test_a_source_that_answers_nonsense_is_an_error_not_a_trace(
    capsys: pytest.CaptureFixture[str],
) -> None:
    class Nonsense(Fake):
        def do_GET(self) -> None:
            self._send({"what": "ever"})

    with serving(Nonsense) as url:
        assert main(argv(url, "--json")) == 1
    errors = json.loads(capsys.readouterr().out)["errors"]
    assert set(errors) == {"prometheus", "alertmanager"}  # the controller's answer had no targets


@pytest.mark.parametrize("bad", ["0s", "soon", "-5s"])
def test_watch_needs_a_positive_interval(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--watch", bad])
    assert exc.value.code == 2
    assert "--watch" in capsys.readouterr().err


STEADY = {"decode": 1.0, "stream_write": 0.02}


@pytest.mark.parametrize(("grown", "verdict"), [
    ({"stream_write": 0.32}, "the time went outside the engine: the fix is not batching"),
    ({"decode": 1.5}, "the engine's share grew"),
], ids=["a slow reader", "slower decode"])
def test_a_burning_latency_slo_names_the_stage_that_grew_most(
    apis: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    grown: dict[str, float], verdict: str,
) -> None:
    monkeypatch.setitem(STAGE_MEANS, "governor:request_stage_seconds:mean5m", STEADY | grown)
    monkeypatch.setitem(STAGE_MEANS, "governor:request_stage_seconds:mean1h", STEADY)
    assert main(argv(apis)) == 0
    out = capsys.readouterr().out
    (stage,) = grown
    growth = round((grown[stage] - STEADY[stage]) * 1000)
    assert f"inter-token-latency burns: {stage} grew most (+{growth} ms per request, 5m " \
           "against 1h)" in out
    assert verdict in out
    assert "availability burns" not in out  # it does not burn, and has no stages
    assert main(argv(apis, "--json")) == 0
    itl = next(s for s in json.loads(capsys.readouterr().out)["slos"]
               if s["name"] == "inter-token-latency")
    assert itl["stages"]["stage"] == stage
    assert itl["stages"]["outside_engine"] is (stage == "stream_write")


def test_without_the_stage_rules_a_burning_slo_says_what_is_missing(
    apis: str, capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(argv(apis)) == 0
    assert "inter-token-latency burns; where its time went: no stage series" in \
        capsys.readouterr().out
