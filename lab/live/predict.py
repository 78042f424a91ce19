"""What the simulator predicted for a live run: the same arrivals, policy and alert pipeline.

A live run's file holds its own arrivals (each request's time, prompt and output tokens and
class) and the policy it ran. Replaying those arrivals in virtual time on a preset gives the
simulator's prediction of the run's attainment and goodput — out of sample, since no preset was
fitted to live runs — next to what the engine really did, whatever the workload (the headline,
any phases file, a request log at any speed). Files written before the arrivals were kept
say only the headline's minutes, seed and rate factor: those are regenerated::

    prediction = predict(run, slo=Path("slo.yaml"), preset="llama-3-8b@h200", window=20.0)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from governor.bench.api import (
    Pipeline,
    RequestLog,
    Scenario,
    Traffic,
    Workload,
    attainment,
    goodput,
    run_scenario,
)
from governor.controller.cli import build_config, build_parser
from governor.controller.model import Limits
from lab.live.liverun import LiveRun
from lab.live.runs import arrivals_of

# The live loop's alert pipeline: governor up's short intervals (RenderParams.fast) and the
# controller it starts (--scrape-interval 5s --resync 10s).
LIVE_PIPELINE = Pipeline(scrape_interval_seconds=5.0, evaluation_interval_seconds=5.0,
                         alert_window_seconds=30.0, alert_for_seconds=15.0,
                         group_wait_seconds=5.0, resync_seconds=10.0)


def predict(live: LiveRun, *, slo: Path, preset: str, window: float) -> dict[str, Any]:
    data = live.data
    workload = run_workload(data)
    config = build_config(build_parser({}).parse_args(
        ["--slo", str(slo), "--scrape-interval", "5s", "--resync", "10s"]))
    scenario = Scenario(workload, int(data["seed"]), config.slo, config.law, LIVE_PIPELINE,
                        preset=preset, window_seconds=window,
                        short_window_seconds=config.queries.short_window_seconds,
                        long_window_seconds=config.queries.long_window_seconds)
    limits = data["limits"]
    static = None if data["policy"] == "controller" else Limits(
        int(limits["max_num_seqs"]), int(limits["max_num_batched_tokens"]))
    result = run_scenario(scenario, workload.arrivals(scenario.seed), name=live.label,
                          static=static)
    slo_targets = scenario.slo
    return {
        "attainment": round(attainment(result.windows, itl_slo=slo_targets.itl_seconds,
                                       ttft_slo=slo_targets.ttft_seconds), 4),
        "goodput_rps": round(goodput(result.outcomes, start=0.0, end=result.duration,
                                     itl_slo=slo_targets.itl_seconds,
                                     ttft_slo=slo_targets.ttft_seconds), 3),
        "changes": len(result.traces),
    }


def run_workload(data: dict[str, Any]) -> Traffic:
    """The workload a run file replayed: its own arrivals, or (an older file) the headline."""
    info = data["workload"]
    if "arrivals" in data:
        return RequestLog(str(info.get("name", "live")), float(data["duration_seconds"]),
                          tuple(arrivals_of(data["arrivals"])))
    workload = Workload.headline(float(info["minutes"]))
    scale = float(info.get("rate_scale", 1.0))
    return workload.scaled(scale) if scale != 1.0 else workload
