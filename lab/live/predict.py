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

import argparse
import json
from pathlib import Path
from typing import Any

from governor.admission.deadline import DEFAULT_CALIBRATION_QUANTILE
from governor.bench.api import (
    Admission,
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
                          static=static, admission=run_admission(data))
    slo_targets = scenario.slo
    return {
        "attainment": round(attainment(result.windows, itl_slo=slo_targets.itl_seconds,
                                       ttft_slo=slo_targets.ttft_seconds), 4),
        "goodput_rps": round(goodput(result.outcomes, start=0.0, end=result.duration,
                                     itl_slo=slo_targets.itl_seconds,
                                     ttft_slo=slo_targets.ttft_seconds), 3),
        "changes": len(result.traces),
        "turned_away": sum(result.turned_away.values()),
        "admitted_ttft_p99_ms": admitted_ttft_p99_ms([o.ttft for o in result.outcomes
                                                      if o.finished]),
    }


def admitted_ttft_p99_ms(ttfts: list[float]) -> float | None:
    """The 99th percentile of the served requests' time to first token, in ms."""
    import numpy as np

    values = np.array([t for t in ttfts if t == t])  # NaN: no first token
    return round(float(np.quantile(values, 0.99)) * 1000, 1) if values.size else None


def run_admission(data: dict[str, Any]) -> Admission | None:
    """The gate a run had in front of its engine: the controller's, which moves its slack from
    where the run started it; none for a static policy, whose gate (at the widest slack) refuses
    next to nothing, as vLLM alone would."""
    gate = data.get("admission")
    if gate is None or data["policy"] != "controller":
        return None
    return Admission(slack=float(gate["deadline_slack"]), max_tokens_ahead=gate["max_tokens_ahead"],
                     calibration=run_calibration(data))


def run_calibration(data: dict[str, Any]) -> float | None:
    """The gate's calibration quantile in a run, as its stack recorded it; ``None`` (off) for a
    run recorded before the servers calibrated by default."""
    text = str((data.get("environment") or {}).get("deadline_calibration", "none"))
    try:
        return float(text)
    except ValueError:
        return None


def run_workload(data: dict[str, Any]) -> Traffic:
    """The workload a run file replayed: its own arrivals, or (an older file) the headline."""
    info = data["workload"]
    if "arrivals" in data:
        return RequestLog(str(info.get("name", "live")), float(data["duration_seconds"]),
                          tuple(arrivals_of(data["arrivals"])))
    workload = Workload.headline(float(info["minutes"]))
    scale = float(info.get("rate_scale", 1.0))
    return workload.scaled(scale) if scale != 1.0 else workload


def forecast(args: argparse.Namespace) -> int:
    """The simulator's prediction of runs not yet made (``python -m lab.live forecast``): the
    arrivals ``runs`` will replay with the same options, each policy on each preset, as JSON.
    Written and kept before the runs, it is a forecast; scored after them (``report``), the same
    replays are the prediction next to each run."""
    from lab.live.runs import arrival_row, policy_limits, workload_from

    workload, source = workload_from(args.workload, args.slo, args.max_model_len,
                                     speed=args.speed, minutes=args.minutes)
    arrivals = workload.arrivals(args.seed)
    rows = [arrival_row(a) for a in arrivals]
    forecasts = []
    for preset in args.presets:
        for policy in args.policies:
            data = {"workload": {"name": workload.name, "kind": source},
                    "arrivals": rows, "duration_seconds": workload.duration_seconds,
                    "seed": args.seed, "policy": policy.name,
                    "limits": policy_limits(policy, args.ceiling),
                    "admission": ({"deadline_slack": 1.0, "max_tokens_ahead": None}
                                  if args.admission and policy.name == "controller" else None),
                    # The servers' default, as lab.live start records it for the runs.
                    "environment": {"deadline_calibration": f"{DEFAULT_CALIBRATION_QUANTILE:g}"},
                    "label": policy.label, "traces": []}
            run = LiveRun(data, [], "forecast")
            forecasts.append({"preset": preset, "policy": policy.label, **predict(
                run, slo=args.slo, preset=preset, window=args.window)})
            print(json.dumps(forecasts[-1]), flush=True)
    result = {"forecast": "the simulator's, before the runs", "workload": str(source),
              "seed": args.seed, "requests": len(rows),
              "duration_seconds": workload.duration_seconds, "slo": str(args.slo),
              "admission": "deadline gate" if args.admission else "none",
              "offered_prompt_tokens_per_second": round(
                  sum(a.prompt_tokens for a in arrivals) / workload.duration_seconds, 1),
              "forecasts": forecasts}
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0
