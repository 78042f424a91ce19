"""The live overload run's pieces: the gate each policy starts at, the stock server's gate
switched on by the environment, refusals scored, and the forecast made before the runs."""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from governor.contracts.admission import MAX_SLACK
from governor.vllm.gate import SPEC_ENV
from lab.live.__main__ import build_parser, main
from lab.live.liverun import LiveRun
from lab.live.predict import admitted_ttft_p99_ms, run_admission
from lab.live.report import score
from lab.live.runs import Policy, gate_slack
from lab.live.stack import GATE, PLAIN_CHAT_TEMPLATE, _replicas, _service_argv, with_chat_template
from lab.live.state import State

ROOT = Path(__file__).resolve().parents[3]
WORKLOAD = ROOT / "lab" / "workloads" / "live" / "overload-150s.yaml"
STOCK_SPEC = ROOT / "lab" / "workloads" / "histograms" / "vllm.yaml"
SLO = {"itl_seconds": 0.1, "itl_quantile": 0.99, "ttft_seconds": 1.0, "ttft_quantile": 0.99}


def _state(tmp_path: Path, admission: str) -> State:
    return State(tmp_path, "vllm", "m", STOCK_SPEC, {"max_num_seqs": 1024,
                                                     "max_num_batched_tokens": 8192},
                 {"admission": admission})


def test_only_the_controller_starts_at_the_spec_s_deadlines(tmp_path: Path) -> None:
    gated = _state(tmp_path, GATE)
    assert gate_slack(gated, Policy.parse("controller")) == 1.0
    # vLLM's defaults and static limits keep the gate wide open: it refuses next to nothing.
    assert gate_slack(gated, Policy.parse("default")) == MAX_SLACK
    assert gate_slack(gated, Policy.parse("static:2048/256")) == MAX_SLACK
    assert gate_slack(_state(tmp_path, "none"), Policy.parse("controller")) is None


def _start_args(tmp_path: Path, *extra: str) -> argparse.Namespace:
    return build_parser().parse_args(["start", "--state", str(tmp_path), "--engine", "vllm",
                                      "--slo", str(STOCK_SPEC), *extra])


def test_the_stock_server_gets_the_gate_from_its_environment(tmp_path: Path) -> None:
    state = _state(tmp_path, GATE)
    token = tmp_path / "admin_token"
    gated = _replicas(_start_args(tmp_path, "--server", "vllm", "--admission"), state, "m",
                      token, tmp_path)
    assert gated[0].env is not None and gated[0].env[SPEC_ENV] == str(STOCK_SPEC)
    plain = _replicas(_start_args(tmp_path, "--server", "vllm"), state, "m", token, tmp_path)
    assert plain[0].env is not None and SPEC_ENV not in plain[0].env
    # governor serve takes it as a flag, with the spec whose classes give the deadlines.
    argv = _service_argv(_start_args(tmp_path, "--admission"), "m", token, 8000)
    assert "--deadlines" in argv and str(STOCK_SPEC) in argv


def test_refused_requests_are_counted_apart_from_errors_and_never_good(tmp_path: Path) -> None:
    served = [["chat", float(t), 200, True, 5, [t + 0.3 + 0.02 * i for i in range(5)]]
              for t in range(20)]
    refused = [["long", t + 0.5, 429, False, 0, []] for t in range(20)]
    data: dict[str, Any] = {"policy": "controller", "label": "controller",
                            "limits": {"max_num_seqs": 1024, "max_num_batched_tokens": 8192},
                            "seed": 1, "workload": {}, "started_unix": 0.0,
                            "duration_seconds": 20.0, "environment": {}, "audit": [],
                            "admission": {"deadline_slack": 1.0, "max_tokens_ahead": None},
                            "prometheus": {}, "traces": served + refused}
    path = tmp_path / "run-0-controller.json.gz"
    with gzip.open(path, "wt") as handle:
        json.dump(data, handle)
    s = score(LiveRun.load(path), SLO, window=20.0)
    assert (s["refused"], s["errors"], s["finished"]) == (20, 0, 20)
    assert s["goodput_rps"] == pytest.approx(1.0)  # the 20 served, none of the refused
    assert s["admitted_ttft_p99_ms"] == pytest.approx(300, abs=1)
    assert s["gate_slack_at_start"] == 1.0
    # The prediction puts the same gate in front of the simulated engine, for the controller.
    gate = run_admission(data)
    assert gate is not None and gate.slack == 1.0
    assert gate.calibration is None  # a run recorded before the servers calibrated by default
    calibrated = run_admission({**data, "environment": {"deadline_calibration": "0.9"}})
    assert calibrated is not None and calibrated.calibration == 0.9
    assert run_admission({**data, "policy": "default"}) is None
    assert admitted_ttft_p99_ms([float("nan")]) is None


def test_a_forecast_replays_the_arrivals_the_runs_will_send(tmp_path: Path) -> None:
    out = tmp_path / "forecast.json"
    assert main(["forecast", "--workload", str(WORKLOAD), "--slo", str(STOCK_SPEC),
                 "--minutes", "0.5", "--policies", "default,controller", "--admission",
                 "--presets", "llama-3-8b@h200", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    by_policy = {f["policy"]: f for f in result["forecasts"]}
    assert set(by_policy) == {"default", "controller"}
    assert by_policy["default"]["turned_away"] == 0  # no gate in front of vLLM's defaults
    assert result["requests"] > 100 and result["duration_seconds"] == 30.0


def test_a_model_without_a_chat_template_gets_a_plain_one_for_stock_vllm(tmp_path: Path) -> None:
    bare, templated = tmp_path / "bare", tmp_path / "templated"
    for folder, config in ((bare, {"model_max_length": 8192}),
                           (templated, {"chat_template": "{{ messages }}"})):
        folder.mkdir()
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
        with_chat_template(folder)
    assert json.loads((bare / "tokenizer_config.json").read_text()) == {
        "model_max_length": 8192, "chat_template": PLAIN_CHAT_TEMPLATE}
    # A model with a template of its own keeps it.
    assert json.loads((templated / "tokenizer_config.json").read_text()) == {
        "chat_template": "{{ messages }}"}
