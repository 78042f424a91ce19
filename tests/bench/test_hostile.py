"""``governor bench hostile``: the hostile prompt, the ITL summary and the side-by-side table."""

from __future__ import annotations

import json
from typing import Any

from governor.bench import BENCHES
from governor.bench.hostile import MIB, Setup, flood_body, itl_summary, render, serve_argv


def test_the_benchmark_is_listed() -> None:
    assert BENCHES["hostile"][0] == "governor.bench.hostile"


def test_a_hostile_prompt_is_a_valid_chat_of_the_size_asked() -> None:
    body = json.loads(flood_body(MIB))
    assert len(body["messages"][0]["content"].encode()) == MIB


def test_the_service_lets_the_hostile_prompts_through_to_its_own_checks() -> None:
    sim = serve_argv(Setup(prompt_bytes=4 * MIB, tokenizer_threads=2), 8001)
    assert sim[sim.index("--max-body-bytes") + 1] == str(5 * MIB)
    assert sim[sim.index("--tokenizer-threads") + 1] == "2"
    assert sim[sim.index("--engine") + 1] == "sim"
    vllm = serve_argv(Setup(engine="vllm"), 8001, "/m")
    assert vllm[vllm.index("--model") + 1] == "/m"
    assert "dtype=float32" in vllm


def test_the_itl_summary_reads_percentiles_of_every_gap() -> None:
    summary = itl_summary([0.005] * 99 + [0.105])
    assert summary["samples"] == 100 and summary["p50"] == 0.005 and summary["max"] == 0.105


def report(rise_seconds: float) -> dict[str, Any]:
    alone = {"samples": 3980, "p50": 0.005, "p99": 0.006, "max": 0.016}
    return {"engine": "sim", "model": "llama-3-8b@h200", "clients": 20, "prompt_bytes": 4 * MIB,
            "requests": 20, "tokens": 200, "tokenizer_threads": 1, "cpus": 2, "alone": alone,
            "flood": {**alone, "p99": alone["p99"] + rise_seconds},
            "flood_answers": {"400 context_length_exceeded": 1974}, "flood_seconds": 24.0,
            "flood_mib_per_second": 329.0, "p99_rise_seconds": rise_seconds,
            "target_met": rise_seconds < 0.010}


def test_the_table_shows_both_runs_the_rise_and_the_verdict() -> None:
    met = render(report(0.007))
    assert "sim engine, llama-3-8b@h200, in real time; 1 text thread(s), 2 CPUs" in met
    assert "p99 ms                       6.00      13.00       +7.00" in met
    assert "400 context_length_exceeded: 1974" in met
    assert met.endswith("P99 rise 7.00 ms: target < 10.00 ms met")
    assert render(report(0.012)).endswith("target < 10.00 ms MISSED")
