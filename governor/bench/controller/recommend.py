"""``governor recommend --workload LOG``: the best static limits for a recorded request log.

The search is ``governor bench controller``'s hindsight grid (its "(b) best static"), on the
log alone: vLLM's default limits on the preset, then every budget and seqs of the grid, each
replayed through the simulated engine in virtual time and scored as the benchmark scores them;
with ``--admission`` also each static bound of ``--bounds`` and first-token deadlines at the best
limits (a coordinate search, as the benchmark's (b*)). It prints the limits that served the most
goodput, with their predicted SLO attainment and goodput, beside vLLM's defaults'::

    governor recommend --workload requests.jsonl
    governor recommend --workload requests.jsonl --json > recommendation.json
    governor controller --start-limits recommendation.json …     # targets start from it

Every figure is a prediction of the simulated engine on the recorded log: the limits are chosen
on that log, so it is calibration on it, never validation of what other traffic will get.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from governor.bench.controller import (
    Score,
    add_gate_options,
    add_scenario_options,
    attainment_target,
    best_static,
    build_scenario,
    replay_options,
    run_jobs,
    score,
    static_jobs,
    whatif,
)
from governor.bench.controller.loop import Admission, PolicyRun, Scenario
from governor.bench.controller.request_logs import RequestLog, describe, load_traffic
from governor.bench.progress import Progress
from governor.common.cli import EnvArgumentParser, positive_int
from governor.controller.cli import UsageError
from governor.controller.start_limits import FORMAT, LIMITS_KEY
from governor.slo.spec import SpecError

PROG = "governor recommend"
BASIS = ("a prediction of the simulated engine on the recorded log: the limits were chosen on "
         "this log (calibration on it, not validation on other traffic)")


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog=PROG, description=__doc__, env_prefix="GOVERNOR_RECOMMEND_")
    p.add_argument("--workload", type=Path, required=True, metavar="LOG",
                   help="a request log (CSV or JSONL: Governor's own, Azure LLM inference, "
                        "BurstGPT, Mooncake), a named replay or a workload file, as `governor "
                        "bench controller --workload` reads them")
    add_scenario_options(p)
    p.add_argument("--admission", action="store_true",
                   help="also search the service's admission gate at the best limits: each "
                        "static bound of --bounds, and first-token deadlines")
    add_gate_options(p)
    p.add_argument("--jobs", type=positive_int, default=max(1, min(4, os.cpu_count() or 1)),
                   help="runs in parallel (processes)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON line on stdout (what `governor controller "
                        "--start-limits FILE` reads); the text goes to stderr")
    p.set_defaults(classes=None)  # scored as one class, as the benchmark's headline runs
    return p


@dataclass(frozen=True, slots=True)
class Found:
    """What the search found: vLLM's defaults, the best static limits, every static run, and
    with ``--admission`` the best gate at those limits and the requests it turned away
    (``None``: none served more)."""

    default: Score
    best: Score
    statics: list[Score]
    gate: tuple[Score, Admission, int] | None = None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        scenario = build_scenario(args, load_traffic(args.workload, replay_options(args)))
    except (SpecError, ValueError, UsageError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    found = search(scenario, args)
    rec = record(found, scenario, args)
    target = attainment_target(scenario.slo)
    if args.json:
        print(text(rec, target), file=sys.stderr)
        print(json.dumps(rec, sort_keys=True, separators=(",", ":")))
    else:
        print(text(rec, target))
    return 0


def search(scenario: Scenario, args: Any) -> Found:
    """The benchmark's static runs, the best of them, and with ``--admission`` the gates."""
    arrivals = scenario.workload.arrivals(scenario.seed)
    jobs = static_jobs(scenario, args.budgets, args.seqs)
    total = len(jobs) + (len(args.bounds) + 1 if args.admission else 0)
    name = scenario.workload.name
    if isinstance(scenario.workload, RequestLog):
        print(f"{PROG}: replaying {describe(scenario.workload)}", file=sys.stderr, flush=True)
    print(f"{PROG}: {name}: {len(arrivals)} requests over "
          f"{scenario.workload.duration_seconds / 60:g} virtual minutes; {total} runs on "
          f"{args.jobs} processes …", file=sys.stderr, flush=True)
    progress = Progress(f"  {name} run", total)
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        statics = [score(r, scenario) for r in run_jobs(pool, scenario, arrivals, jobs, progress)]
        best = best_static(statics)
        if not args.admission:
            return Found(statics[0], best, statics)
        assert best.limits is not None
        second = whatif.second_jobs(best.limits, args.bounds, args.deadline_slack,
                                    args.deadline_calibration)
        gated = run_jobs(pool, scenario, arrivals, second, progress)
    return Found(statics[0], best, statics, _best_gate(best, gated, scenario))


def _best_gate(best: Score, gated: list[PolicyRun], scenario: Scenario
               ) -> tuple[Score, Admission, int] | None:
    """The gate that served more than the best limits without one (ties go to no gate), and
    how many requests it turned away."""
    runs = [(score(r, scenario), r.admission, sum(r.turned_away.values())) for r in gated
            if r.admission is not None]
    top = best_static([best, *(s for s, _, _ in runs)])
    return next(((s, a, n) for s, a, n in runs if s is top), None)


def record(found: Found, scenario: Scenario, args: Any) -> dict[str, Any]:
    """The JSON line: the limits ``governor controller --start-limits FILE`` reads under
    :data:`LIMITS_KEY`, and what a reader needs to judge them."""
    best, default = found.best, found.default
    assert best.limits is not None and default.limits is not None
    workload = scenario.workload
    return {
        "v": FORMAT,
        "basis": BASIS,
        "workload": workload.name,
        "source": str(args.workload),
        "preset": scenario.preset,
        "seed": scenario.seed,
        # The replay's own speed (a named replay's times --speed), as the log was replayed.
        "speed": workload.report["speed"] if isinstance(workload, RequestLog) else args.speed,
        "slice_seconds": None if args.slice is None else list(args.slice),
        "minutes": round(workload.duration_seconds / 60, 3),
        LIMITS_KEY: best.limits.as_dict(),
        "predicted": _predicted(best, default),
        "default": {"limits": default.limits.as_dict(), "predicted": _predicted(default, default)},
        "admission": _gate(found, args.admission),
        "grid": [{**s.limits.as_dict(), "attainment": round(s.attainment, 4),
                  "goodput_rps": round(s.goodput, 3)} for s in found.statics if s.limits],
        "request_log": dict(workload.report) if isinstance(workload, RequestLog) else None,
    }


def _predicted(s: Score, default: Score) -> dict[str, Any]:
    return {"attainment": round(s.attainment, 4), "goodput_rps": round(s.goodput, 3),
            "goodput_vs_default": round(s.goodput / default.goodput, 4)
            if default.goodput > 0 else None,
            "windows_missed": s.missed.as_dict()}


def _gate(found: Found, searched: bool) -> dict[str, Any] | None:
    """The gate to run ``governor serve`` with, as its options (``None``: not searched)."""
    if not searched:
        return None
    if found.gate is None:
        return {"gate": "none", "serve_options": [], "predicted": None}
    gate, admission, turned_away = found.gate
    if admission.slack is not None:
        q = admission.calibration
        options = ["--deadlines", "--deadline-slack", f"{admission.slack:g}",
                   "--deadline-calibration", "off" if q is None else f"{q:g}"]
    else:
        options = ["--max-tokens-ahead", str(admission.max_tokens_ahead)]
    return {"gate": "deadlines" if admission.slack is not None else "bound",
            "serve_options": options, "predicted": _predicted(gate, found.default),
            "turned_away": turned_away}


def text(rec: dict[str, Any], target: float) -> str:
    """The recommendation as a person reads it."""
    best, default = rec[LIMITS_KEY], rec["default"]
    where = f", slice {_span(rec['slice_seconds'])}" if rec["slice_seconds"] else ""
    lines = [f"{PROG}: {rec['workload']} ({rec['source']}), preset {rec['preset']}, seed "
             f"{rec['seed']}, speed {rec['speed']:g}x{where}, {rec['minutes']:.1f} virtual minutes",
             f"  {rec['basis']}",
             f"recommended:     {_limits(best)}"
             + (" (vLLM's defaults: no limits of the grid served more)" if best == default[
                 "limits"] else ""),
             f"  {_line(rec['predicted'], target)}"]
    if rec["predicted"]["attainment"] < target:
        lines.append(f"  no limits of the grid meet the spec's {target:.1%} on this log: what "
                     "they miss needs admission (--admission), request classes or more replicas")
    lines += [f"vLLM's defaults: {_limits(default['limits'])}",
             f"  {_line(default['predicted'], target)}"]
    gate = rec["admission"]
    if gate is not None and gate["predicted"] is None:
        lines.append("admission: no gate served more at the recommended limits")
    elif gate is not None:
        lines += [f"admission: governor serve {' '.join(gate['serve_options'])}",
                  f"  {_line(gate['predicted'], target)}; it turns away "
                  f"{gate['turned_away']} requests (429), which goodput does not count"]
    lines.append("grid (attainment/goodput): " + ", ".join(
        f"{g['max_num_batched_tokens']}/{g['max_num_seqs']}: {g['attainment']:.0%}/"
        f"{g['goodput_rps']:.2f}" for g in rec["grid"]))
    lines.append(f"start from it: governor controller --start-limits "
                 f"{best['max_num_batched_tokens']},{best['max_num_seqs']} (or the file that "
                 f"--json writes)")
    return "\n".join(lines)


def _limits(limits: dict[str, int]) -> str:
    return (f"max_num_batched_tokens {limits['max_num_batched_tokens']}, "
            f"max_num_seqs {limits['max_num_seqs']}")


def _line(predicted: dict[str, Any], target: float) -> str:
    vs = predicted["goodput_vs_default"]
    return (f"predicted: SLOs met in {predicted['attainment']:.1%} of windows (the spec asks "
            f"{target:.1%}); goodput {predicted['goodput_rps']:.2f} req/s"
            + ("" if vs is None else f", {vs:.2f}x vLLM's defaults'"))


def _span(slice_seconds: list[float]) -> str:
    start, length = slice_seconds
    return f"{start:g}s for {length:g}s"
