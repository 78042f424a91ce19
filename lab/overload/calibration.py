"""The deadline gate's calibration, measured: the controller with deadlines, (c+) of ``governor
bench controller --admission``, with and without ``--deadline-calibration``.

The gate predicts a request's first token from the prompt tokens ahead of it over the prefill
rate it measured, and admits it when that fits its deadline. On deep overload the requests it
admits near the line come in a little late (a served first-token P99 of 1.01-1.04 s against the
1 s SLO, docs/overload.md). Calibration scales each prediction by a high quantile of how late
recent first tokens admitted near their deadline came against their own prediction. This runs
(c+) on each workload and seed, off and at each quantile, side by side, in virtual time on the
simulated H200, and prints goodput, the served first-token P99, the requests turned away and the
gate's prediction error::

    python -m lab.overload.calibration --workload benchmarks/workloads/deep-overload.yaml \\
        --seeds 1,2 --quantiles 0.9
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from governor.bench.api import (
    Admission,
    Scenario,
    build_scenario,
    controller_parser,
    run_scenario,
    score_run,
    whatif_row,
    workloads,
)


def _one(job: tuple[Any, Path, int, float | None]) -> dict[str, Any]:
    args, workload_file, seed, quantile = job
    args = argparse.Namespace(**{**vars(args), "seed": seed})
    (workload,) = workloads(argparse.Namespace(**{**vars(args), "workload": [workload_file]}))
    scenario: Scenario = build_scenario(args, workload)
    arrivals = scenario.workload.arrivals(seed)
    result = run_scenario(scenario, arrivals, name="(c+) controller + deadlines",
                 admission=Admission(slack=1.0, calibration=quantile))
    s = score_run(result, scenario)
    row = whatif_row("c+", result.name, s.goodput, s.attainment, s.changes, result)
    return {"workload": scenario.workload.name, "seed": seed, "calibration": quantile,
            "goodput": round(s.goodput, 3), "served_ttft_p99_s": round(row.ttft_p99, 3),
            "turned_away": row.turned_away, "requests": len(arrivals),
            "wait_error_p50_s": round(row.error_p50, 3),
            "wait_error_p99_s": round(row.error_p99, 3)}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.overload.calibration", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", type=Path, action="append", required=True)
    p.add_argument("--seeds", default="1", help="comma-separated seeds")
    p.add_argument("--quantiles", default="0.9", help="comma-separated calibration quantiles")
    p.add_argument("--jobs", type=int, default=1)
    own = p.parse_args(argv)
    bench = controller_parser().parse_args(["--no-plots", "--admission"])
    seeds = [int(x) for x in own.seeds.split(",")]
    quantiles: list[float | None] = [None, *(float(q) for q in own.quantiles.split(","))]
    jobs = [(bench, w, seed, q) for w in own.workload for seed in seeds for q in quantiles]
    with ProcessPoolExecutor(max_workers=own.jobs) as pool:
        rows = list(pool.map(_one, jobs))
    print("| workload | seed | calibration | goodput (req/s) | vs off | served TTFT P99 "
          "| turned away | wait error P50 / P99 |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    off = {(r["workload"], r["seed"]): r["goodput"] for r in rows if r["calibration"] is None}
    for r in rows:
        base = off[(r["workload"], r["seed"])]
        ratio = f"{r['goodput'] / base:.3f}x" if base else "-"
        label = "off" if r["calibration"] is None else f"q {r['calibration']:g}"
        print(f"| {r['workload']} | {r['seed']} | {label} | {r['goodput']:.2f} | {ratio} "
              f"| {r['served_ttft_p99_s']:.3f} s | {r['turned_away']} of {r['requests']} "
              f"| {r['wait_error_p50_s']:+.3f} / {r['wait_error_p99_s']:+.3f} s |")
    for r in rows:
        print(json.dumps(r), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
