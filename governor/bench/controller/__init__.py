"""``governor bench controller``: the SLO controller against static limits, in virtual time.

The headline benchmark. On the simulated engine's ``llama-3-8b@h200`` preset (calibrated to a
real H200, docs/h200-measurements.md), a document-translation workload — chats decoding
continuously while long documents arrive, with a load step and a ramp — runs three times:

(a) vLLM's default static limits (8192 tokens, 1024 sequences on an H200);
(b) the best static limits, found in hindsight by a grid search over the same workload;
(c) the controller's law, observing through Prometheus as the real stack would.

It prints a table with ratios against (a) and (b), one JSON summary line, and writes PNG plots.
With ``--classes`` every run puts the service's admission queue in front of the engine and is
scored per request class of ``--slo`` too: ``spec`` applies the classes (vLLM priorities, per-class
admission limits, shedding the lowest class first), ``one`` runs the service without classes.
Lives here, not in ``controller/``, because it drives the sim engine, which the controller may
not import.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from governor.admission.deadline import DEFAULT_CALIBRATION_QUANTILE
from governor.bench.controller import whatif
from governor.bench.controller.admission import Limits as AdmissionLimits
from governor.bench.controller.classes import ClassPlan, class_report, class_table
from governor.bench.controller.loop import Admission, PolicyRun, Scenario, ceiling, run
from governor.bench.controller.monitoring import Histogram
from governor.bench.controller.pipeline import pipeline_from_deploy
from governor.bench.controller.request_logs import (
    YAML_SUFFIXES,
    ReplayOptions,
    RequestLog,
    Traffic,
    describe,
    load_traffic,
    parse_slice,
)
from governor.bench.controller.scoring import Missed, attainment, goodput, missed, worst_recovery
from governor.bench.controller.workload import Arrival, Workload, WorkloadError
from governor.bench.progress import Progress
from governor.common.cli import (
    EnvArgumentParser,
    non_negative_int,
    parse_duration_seconds,
    positive_int,
    quantile_or_off,
)
from governor.contracts.admission import slack_range, slack_text
from governor.contracts.package import install_hint
from governor.controller.cli import UsageError, build_config
from governor.controller.cli import build_parser as controller_parser
from governor.controller.model import Limits, SloTargets
from governor.controller.queries import HistogramSli
from governor.controller.slo import objectives
from governor.generation.catalog import histogram_edges, load_checked_spec
from governor.inference.engines.sim.presets import get_preset
from governor.slo.roles import ROLE_TTFT
from governor.slo.spec import SloSpec, SpecError, camel_case

TARGET_GOODPUT_SHARE = 0.95
TARGET_GOODPUT_VS_DEFAULT = 1.0
TARGET_RECOVERY_SECONDS = 60.0


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) <= 0:
        raise ValueError(f"expected positive integers, got {text!r}")
    return values


def _speed(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 1000:
        raise ValueError(f"--speed: expected a factor in (0, 1000], got {text!r}")
    return value


def _slack(text: str) -> float:
    value = slack_text(text)
    if value is None:
        raise ValueError(f"--deadline-slack: expected a factor in {slack_range()}, got {text!r}")
    return value


def _minutes(text: str) -> float:
    value = float(text)
    if not 2.0 <= value <= 24 * 60:
        raise ValueError(f"minutes must be within [2, 1440], got {text!r}")
    return value


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="governor bench controller", description=__doc__,
                          env_prefix="GOVERNOR_BENCH_")
    p.add_argument("--workload", type=Path, action="append", default=None, metavar="FILE",
                   help="a workload file (YAML phases or a named replay), a request log (CSV or "
                        "JSONL: Governor's own, Azure LLM inference, BurstGPT, Mooncake), or a "
                        "folder of YAML files; repeatable (default: the built-in headline)")
    add_scenario_options(p)
    admission = AdmissionLimits.service_defaults()
    p.add_argument("--classes", choices=("spec", "one"), default=None,
                   help="request classes of --slo, with the service's admission queue in front "
                        "of the engine: spec applies them (priorities, per-class limits, "
                        "shedding), one runs the service without them; both score per class")
    p.add_argument("--max-in-flight", type=positive_int, default=admission.max_in_flight,
                   help="with --classes: the service's --max-in-flight")
    p.add_argument("--max-queue", type=non_negative_int, default=admission.max_queue,
                   help="with --classes: the service's --max-queue")
    p.add_argument("--queue-timeout", type=parse_duration_seconds,
                   default=admission.queue_timeout_seconds,
                   help="with --classes: the service's --queue-timeout")
    p.add_argument("--admission", action="store_true",
                   help="also run the admission policies side by side: first-token deadlines "
                        "beside vLLM's defaults, the best static limits and the controller, and "
                        "each static bound of --bounds at the best static limits (the best "
                        "static bound in hindsight)")
    add_gate_options(p)
    p.add_argument("--jobs", type=positive_int, default=max(1, min(4, os.cpu_count() or 1)),
                   help="runs in parallel (processes)")
    p.add_argument("--out", type=Path, default=Path("bench-out/controller"),
                   help="where plots and the summary go")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    return p


def add_scenario_options(p: EnvArgumentParser) -> None:
    """What a scenario is built from besides its workload: the replay, the preset and seed, the
    spec, the hindsight grid and the generated stack's timing (:func:`build_scenario`). The
    benchmark and ``governor recommend`` share them."""
    p.add_argument("--speed", type=_speed, default=1.0,
                   help="replay request logs this many times faster (a named replay's own "
                        "speed is multiplied by it)")
    p.add_argument("--slice", type=parse_slice, default=None, metavar="START:DURATION",
                   help="replay only this slice of each request log, in the log's own time "
                        "(10m:5m: five minutes from the tenth)")
    p.add_argument("--minutes", type=_minutes, default=None,
                   help="virtual minutes per run (default: each workload's own duration; 40 for "
                        "the built-in headline)")
    p.add_argument("--seed", type=int, default=1, help="workload and engine seed")
    p.add_argument("--preset", default="llama-3-8b@h200", help="sim engine preset")
    p.add_argument("--slo", type=Path, default=Path("slo.yaml"), help="the SLO spec")
    p.add_argument("--budgets", type=_ints, default=(1024, 1536, 2048, 3072, 4096, 6144),
                   help="token budgets of the hindsight grid (the default 8192 is run as (a))")
    p.add_argument("--seqs", type=_ints, default=(1024, 256),
                   help="max_num_seqs values of the hindsight grid")
    p.add_argument("--window", type=parse_duration_seconds, default=20.0,
                   help="attainment window")
    p.add_argument("--deploy", type=Path, default=Path("deploy"),
                   help="the generated stack whose timing the runs model (governor generate)")
    p.add_argument("--scrape-interval", type=parse_duration_seconds, default=None,
                   help="override the scrape interval of the generated prometheus.yml")
    p.add_argument("--evaluation-interval", type=parse_duration_seconds, default=None,
                   help="override the generated rule evaluation interval")
    p.add_argument("--alert-for", type=parse_duration_seconds, default=None,
                   help="override the `for` of the generated fast …P99High alert")
    p.add_argument("--group-wait", type=parse_duration_seconds, default=None,
                   help="override the generated controller route's group_wait")
    p.add_argument("--resync", type=parse_duration_seconds, default=None,
                   help="override the controller's default periodic reconcile")


def add_gate_options(p: EnvArgumentParser) -> None:
    """The admission gates ``--admission`` scores at the best static limits."""
    p.add_argument("--bounds", type=_ints, default=(8192, 16384, 32768, 65536, 131072),
                   help="with --admission: static bounds on the prompt tokens ahead of an "
                        "arriving request, each run at the best static limits")
    p.add_argument("--deadline-slack", type=_slack, default=1.0,
                   help="with --admission: each deadline is this times its class's "
                        "first-token target (governor serve --deadline-slack)")
    p.add_argument("--deadline-calibration", type=quantile_or_off,
                   default=DEFAULT_CALIBRATION_QUANTILE,
                   help="with --admission: scale each deadline's predicted wait by this "
                        "quantile (0-1] of how late recent first tokens admitted near their "
                        "deadline came against their prediction; 'off': not at all "
                        f"(governor serve --deadline-calibration; default: "
                        f"{DEFAULT_CALIBRATION_QUANTILE:g})")


@dataclass(frozen=True, slots=True)
class Score:
    name: str
    limits: Limits | None  # None: the controller
    attainment: float
    goodput: float
    recovery: float | None  # worst breach → recovery on the controller's query (None: none)
    episodes: int
    alert_episodes: int  # times the fast alert's expression went true
    alert_notifications: int  # times Alertmanager would have called the controller
    changes: int
    missed: Missed  # the share of windows each SLO failed in

    def as_dict(self, best: Score, default: Score) -> dict[str, Any]:
        return {
            "limits": self.limits.as_dict() if self.limits else "controller",
            "attainment": round(self.attainment, 4),
            "windows_missed": self.missed.as_dict(),
            "goodput_rps": round(self.goodput, 3),
            "goodput_vs_default": _ratio(self.goodput, default.goodput),
            "goodput_vs_best_static": _ratio(self.goodput, best.goodput),
            "worst_recovery_seconds": None if self.recovery is None else round(self.recovery, 1),
            "breach_episodes": self.episodes,
            "alert_episodes": self.alert_episodes,
            "alert_notifications": self.alert_notifications,
            "changes": self.changes,
        }


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 4) if b > 0 else None


def score(result: PolicyRun, scenario: Scenario) -> Score:
    slo = scenario.slo
    return Score(
        result.name, None if result.controlled else result.start_limits,
        attainment(result.windows, itl_slo=slo.itl_seconds, ttft_slo=slo.ttft_seconds),
        goodput(result.outcomes, start=0.0, end=result.duration, itl_slo=slo.itl_seconds,
                ttft_slo=slo.ttft_seconds),
        worst_recovery(result.episodes, result.duration), len(result.episodes),
        len(result.alert_episodes), len(result.notifications), len(result.traces),
        missed(result.windows, itl_slo=slo.itl_seconds, ttft_slo=slo.ttft_seconds),
    )


def attainment_target(slo: SloTargets) -> float:
    """The share of windows that must meet the SLOs: the spec's own objective (the strictest of
    the SLOs a window is judged on).

    >>> attainment_target(SloTargets(0.12, 0.99, 1.0, 0.995))
    0.995
    """
    return max(slo.itl_quantile, slo.ttft_quantile) if slo.ttft_seconds is not None \
        else slo.itl_quantile


def judge_attainment(controlled: Score, best: Score, slo: SloTargets) -> dict[str, Any]:
    """The controller's attainment against the spec's target, and whether the best static
    limits reached it (when none does, the workload asks more than any limits give; it is still
    a miss)."""
    target = attainment_target(slo)
    return {"target": target, "met": controlled.attainment >= target,
            "best_static_met": best.attainment >= target,
            "windows_missed": controlled.missed.as_dict()}


def attainment_line(judged: Mapping[str, Any], controlled: Score, best: Score) -> str:
    """The summary's line on attainment, naming the SLO that failed when it is missed:

    >>> from governor.bench.controller.scoring import Missed
    >>> s = Score("c", None, 0.17, 1.0, None, 0, 0, 0, 1, Missed(0.02, 0.83))
    >>> print(attainment_line({"target": 0.99, "met": False, "best_static_met": False}, s, s))
    attainment: the controller met the SLOs in 17.0% of windows against the spec's 99%: MISSED \
(TTFT failed in 83.0% of windows, ITL in 2.0%); no static limits reach it either (best 17.0%)
    """
    verdict = "met" if judged["met"] else "MISSED"
    ttft = controlled.missed.ttft
    parts = ([] if ttft is None else [f"TTFT failed in {ttft:.1%} of windows"]) + \
        [f"ITL {'in' if ttft is not None else 'failed in'} {controlled.missed.itl:.1%}"
         + ("" if ttft is not None else " of windows")]
    line = (f"attainment: the controller met the SLOs in {controlled.attainment:.1%} of windows "
            f"against the spec's {judged['target']:.0%}: {verdict}")
    if not judged["met"]:
        line += f" ({', '.join(parts)})"
        if not judged["best_static_met"]:
            line += f"; no static limits reach it either (best {best.attainment:.1%})"
    return line


def _job(args: tuple[Scenario, list[Arrival], str, Limits | None, Admission | None]
         ) -> PolicyRun:
    scenario, arrivals, name, static, admission = args
    return run(scenario, arrivals, name=name, static=static, admission=admission)


def build_scenario(args: Any, workload: Traffic | None = None) -> Scenario:
    """The scenario the controller would really run in: the generated stack's timing and the
    controller's own defaults (``governor controller`` with no options but ``--slo``)."""
    spec = load_checked_spec(args.slo)
    alert = camel_case(objectives(spec).itl_slo_name) + "P99High"
    pipeline = pipeline_from_deploy(args.deploy, alert, resync_seconds=10.0,
                                    job=spec.targets.inference.job)
    overrides = {"scrape_interval_seconds": args.scrape_interval,
                 "evaluation_interval_seconds": args.evaluation_interval,
                 "alert_for_seconds": args.alert_for, "group_wait_seconds": args.group_wait}
    pipeline = replace(pipeline, **{k: v for k, v in overrides.items() if v is not None})
    argv = ["--slo", str(args.slo), "--scrape-interval", f"{pipeline.scrape_interval_seconds}s"]
    if args.resync is not None:
        argv += ["--resync", f"{args.resync}s"]
    controller = build_config(controller_parser({}).parse_args(argv))
    pipeline = replace(pipeline, resync_seconds=controller.resync_seconds)
    if workload is None:
        workload = Workload.headline(args.minutes or 40.0)
    elif args.minutes is not None:
        workload = workload.with_minutes(args.minutes)
    queries = controller.queries
    scenario = Scenario(workload, args.seed, controller.slo, controller.law,
                        pipeline, preset=args.preset, window_seconds=args.window,
                        short_window_seconds=queries.short_window_seconds,
                        long_window_seconds=queries.long_window_seconds,
                        classes=_class_plan(args, spec),
                        itl_histogram=_histogram(spec, queries.itl))
    if queries.ttft is None:  # no TTFT SLO: no TTFT query, the default histogram unread
        return scenario
    return replace(scenario, ttft_histogram=_histogram(spec, queries.ttft))


def _histogram(spec: SloSpec, sli: HistogramSli) -> Histogram:
    """The SLI's histogram with the edges its servers expose under the spec."""
    return Histogram(sli.metric, tuple(histogram_edges(spec)[sli.metric]))


def _class_plan(args: Any, spec: SloSpec) -> ClassPlan | None:
    if args.classes is None:
        return None
    if args.classes == "spec" and not spec.classes.declared:
        raise ValueError(f"--classes spec: {args.slo} declares no request classes")
    ttft = spec.with_role(ROLE_TTFT)
    return ClassPlan.of(spec, itl_slo=objectives(spec).itl_slo_name,
                        ttft_slo=None if ttft is None else ttft.name,
                        apply=args.classes == "spec",
                        limits=AdmissionLimits(args.max_in_flight, args.max_queue,
                                               args.queue_timeout))


def workloads(args: Any) -> list[Traffic | None]:
    """The workloads to run: the files named (a folder: every ``*.yaml`` in it, sorted), or the
    built-in headline (``None``)."""
    if not args.workload:
        return [None]
    options = replay_options(args)
    found: list[Traffic | None] = []
    for path in args.workload:
        files = sorted(f for f in path.iterdir() if f.suffix in YAML_SUFFIXES) \
            if path.is_dir() else [path]
        if not files:
            raise WorkloadError(str(path), ["no *.yaml workload files in this folder"])
        found += [load_traffic(f, options) for f in files]
    return found


def replay_options(args: Any) -> ReplayOptions:
    """How request logs are replayed: ``--speed``, ``--slice``, the preset's context and the
    spec's classes."""
    start, length = args.slice if args.slice is not None else (0.0, None)
    return ReplayOptions(speed=args.speed, start_seconds=start, duration_seconds=length,
                         context_tokens=get_preset(args.preset).max_model_len,
                         classes=load_checked_spec(args.slo).classes)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.no_plots and importlib.util.find_spec("matplotlib") is None:
        print("governor bench controller: error: the plots need matplotlib "
              f"({install_hint('bench')}), or pass --no-plots", file=sys.stderr)
        return 2
    try:
        scenarios = [build_scenario(args, w) for w in workloads(args)]
    except (SpecError, ValueError, UsageError) as exc:
        print(f"governor bench controller: error: {exc}", file=sys.stderr)
        return 2
    single = len(scenarios) == 1 and not args.workload
    for scenario in scenarios:
        out = args.out if single else args.out / scenario.workload.name
        report(run_all(scenario, args), scenario, args, out)
    return 0


def run_all(scenario: Scenario, args: Any) -> list[PolicyRun]:
    """(a) the default, (c) the controller, then the hindsight grid; with progress on stderr."""
    arrivals = scenario.workload.arrivals(scenario.seed)
    default, *grid = static_jobs(scenario, args.budgets, args.seqs)
    jobs = [default, whatif.Job("(c) controller", None, None), *grid]
    if args.admission:
        jobs += whatif.first_jobs(ceiling(scenario), args.deadline_slack,
                                  args.deadline_calibration)
    minutes = scenario.workload.duration_seconds / 60
    if isinstance(scenario.workload, RequestLog):
        print(f"governor bench controller: replaying {describe(scenario.workload)}",
              file=sys.stderr, flush=True)
    total = len(jobs) + (len(args.bounds) + 1 if args.admission else 0)
    print(f"governor bench controller: {scenario.workload.name}: {len(arrivals)} requests over "
          f"{minutes:g} virtual minutes; {total} runs on {args.jobs} processes …",
          file=sys.stderr, flush=True)
    progress = Progress(f"  {scenario.workload.name} run", total)
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        results = run_jobs(pool, scenario, arrivals, jobs, progress)
        if args.admission:
            # The bounds, at the best static limits without a gate (known only now).
            scores = [score(r, scenario) for r in results]
            best = best_static([s for s, r in zip(scores, results, strict=True)
                                if r.admission is None and not r.controlled])
            assert best.limits is not None
            second = whatif.second_jobs(best.limits, args.bounds, args.deadline_slack,
                                        args.deadline_calibration)
            results += run_jobs(pool, scenario, arrivals, second, progress)
    return results


def static_jobs(scenario: Scenario, budgets: Sequence[int], seqs: Sequence[int]
                ) -> list[whatif.Job]:
    """(a) vLLM's default limits on the preset, then every static limits of the hindsight grid
    (each budget with each seqs value) the preset allows."""
    top = ceiling(scenario)
    grid = [Limits(s, b) for s in seqs for b in budgets if s <= top.max_num_seqs
            and b <= top.max_num_batched_tokens and Limits(s, b) != top]
    return [whatif.Job(f"(a) default static {_label(top)}", top, None),
            *(whatif.Job(f"static {_label(g)}", g, None) for g in grid)]


def run_jobs(pool: ProcessPoolExecutor, scenario: Scenario, arrivals: list[Arrival],
             jobs: Sequence[whatif.Job], progress: Progress) -> list[PolicyRun]:
    """Each job on the pool, in order, each one's end told on ``progress``."""
    results: list[PolicyRun] = []
    for result in pool.map(_job, [(scenario, arrivals, j.name, j.static, j.admission)
                                  for j in jobs]):
        results.append(result)
        progress.done(result.name)
    return results


def best_static(statics: Sequence[Score]) -> Score:
    """The best static limits in hindsight: the most goodput, then the best attainment, then
    the largest budget (:func:`_rank`)."""
    return max(statics, key=_rank)


def report(results: list[PolicyRun], scenario: Scenario, args: Any, out: Path) -> int:
    gated = [r for r in results if r.admission is not None]
    results = [r for r in results if r.admission is None]
    scores = [score(r, scenario) for r in results]
    default, controlled, statics = scores[0], scores[1], [scores[0], *scores[2:]]
    best = best_static(statics)
    name = f"(b) best static {_label(best.limits)}" if best is not default else default.name
    best_run = replace(results[scores.index(best)], name=name)
    best = replace(best, name=name)
    _table([default, best, controlled], statics, best, default)
    _overloads(results[1])
    judged = judge_attainment(controlled, best, scenario.slo)
    print(attainment_line(judged, controlled, best), file=sys.stderr)
    met = {
        # Against the spec's own objective, reachable or not: a workload no limits serve is a
        # miss, which best_static_met tells apart.
        "attainment": judged["met"],
        # Never worse than leaving the defaults.
        "goodput_vs_default": controlled.goodput >= TARGET_GOODPUT_VS_DEFAULT * default.goodput,
        "goodput_vs_best_static": controlled.goodput >= TARGET_GOODPUT_SHARE * best.goodput,
        # No breach observable at all needs no recovery.
        "recovery": controlled.recovery is None or controlled.recovery <= TARGET_RECOVERY_SECONDS,
    }
    plots = [] if args.no_plots else _plots(results, best_run, scenario, out)
    headline = {"default_static": results[0], "best_static": best_run, "controller": results[1]}
    if scenario.classes is not None:
        class_table(scenario.classes, headline)
    summary = {
        "bench": "controller", "workload": scenario.workload.name, "preset": scenario.preset,
        "minutes": scenario.workload.duration_seconds / 60,
        "seed": scenario.seed, "requests": len(results[0].outcomes),
        "slo": {"itl_seconds": scenario.slo.itl_seconds, "ttft_seconds": scenario.slo.ttft_seconds,
                "quantile": scenario.slo.itl_quantile},
        "histograms": {"itl": scenario.itl_histogram.as_dict(),
                       "ttft": scenario.ttft_histogram.as_dict()},
        "pipeline": {"scrape_s": scenario.pipeline.scrape_interval_seconds,
                     "evaluation_s": scenario.pipeline.evaluation_interval_seconds,
                     "alert_for_s": scenario.pipeline.alert_for_seconds,
                     "group_wait_s": scenario.pipeline.group_wait_seconds,
                     "alert_window_s": scenario.pipeline.alert_window_seconds,
                     "resync_s": scenario.pipeline.resync_seconds,
                     "controller_window_s": scenario.short_window_seconds,
                     "cooldown_s": scenario.law.cooldown_seconds},
        "default_static": default.as_dict(best, default),
        "best_static": best.as_dict(best, default),
        "controller": controlled.as_dict(best, default),
        "controller_decisions": _decisions(results[1]),
        "overload_episodes": [
            {"start_s": round(e.start), "end_s": None if e.end is None else round(e.end),
             "replicas_needed": e.replicas_median, "replicas_max": e.replicas_max}
            for e in results[1].overloads],
        "attainment": judged,
        "targets": {"attainment": judged["target"],
                    "goodput_vs_default": TARGET_GOODPUT_VS_DEFAULT,
                    "goodput_vs_best_static": TARGET_GOODPUT_SHARE,
                    "recovery_seconds": TARGET_RECOVERY_SECONDS},
        "met": met, "plots": [str(p) for p in plots],
    }
    if scenario.classes is not None:
        summary["classes"] = class_report(scenario.classes, headline)
    if gated:
        summary["admission"] = _admission_report(scenario, args, results, scores, best,
                                                 best_run, gated)
    if isinstance(scenario.workload, RequestLog):
        summary["request_log"] = dict(scenario.workload.report)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, separators=(",", ":")))
    return 0


def _admission_report(scenario: Scenario, args: Any, ungated: list[PolicyRun],
                      scores: list[Score], best: Score, best_run: PolicyRun,
                      gated: list[PolicyRun]) -> dict[str, Any]:
    """The admission policies side by side (``--admission``): the table and the summary entry."""
    def row(key: str, s: Score, run: PolicyRun | None) -> whatif.Row:
        return whatif.row_of(key, s.name, s.goodput, s.attainment, s.changes, run)

    pairs = [(r, score(r, scenario)) for r in gated]
    tagged = {whatif.tag(r.name): (r, s) for r, s in pairs if whatif.tag(r.name)}
    bounded = [(r, s) for r, s in pairs if not whatif.tag(r.name)]
    # (b*): the best static configuration over the limits and the bound together.
    run_top, top = max([(best_run, best), *bounded],
                       key=lambda pair: _rank(pair[1]))
    rows = {"a": row("a", scores[0], ungated[0]),
            "a+": row("a+", tagged["a+"][1], tagged["a+"][0]),
            "b": row("b", best, best_run),
            "b*": row("b*", replace(top, name="(b*) best " + (
                run_top.name if run_top.admission else f"{_label(best.limits)}, no bound")),
                run_top),
            "b+": row("b+", tagged["b+"][1], tagged["b+"][0]),
            "c": row("c", scores[1], ungated[1]),
            "c+": row("c+", tagged["c+"][1], tagged["c+"][0])}
    assert best.limits is not None
    summary = whatif.summarize(rows, [row(r.name, s, r) for r, s in bounded],
                               args.deadline_slack, args.deadline_calibration, args.bounds,
                               best.limits)
    summary["controller_decisions"] = _decisions(tagged["c+"][0])
    return summary


def _decisions(run: PolicyRun) -> list[dict[str, Any]]:
    """Each change the controller made: its limits, and the deadline slack where it moved it
    (a pass that moved only the slack holds the limits)."""
    return [{"at_s": round(t.at), "trigger": t.trigger, "action": t.decision.action.value,
             "reason": t.decision.reason.value, **t.decision.after.as_dict(),
             **({"deadline_slack": t.decision.admission.after}
                if t.decision.admission is not None else {})}
            for t in run.traces]


def _label(limits: Limits | None) -> str:
    return "controller" if limits is None else \
        f"{limits.max_num_batched_tokens}/{limits.max_num_seqs}"


def _rank(s: Score) -> tuple[float, float, int, int]:
    """Goodput first; ties (several budgets serve every request well) go to the largest
    budget, the one that gives the least away in time to first token."""
    limits = s.limits or Limits(0, 0)
    return s.goodput, s.attainment, limits.max_num_batched_tokens, limits.max_num_seqs


def _table(headline: list[Score], statics: list[Score], best: Score, default: Score) -> None:
    rows = [("policy", "attain", "goodput/s", "vs (a)", "vs (b)", "recovery", "changes")]
    for s in headline:
        d = s.as_dict(best, default)
        recovery = "—" if s.recovery is None else f"{s.recovery:.0f}s"
        rows.append((s.name, f"{s.attainment:.1%}", f"{s.goodput:.2f}",
                     f"{d['goodput_vs_default']:.2f}x", f"{d['goodput_vs_best_static']:.2f}x",
                     recovery, str(s.changes)))
    width = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, width, strict=True)), file=sys.stderr)
    grid = ", ".join(f"{_label(s.limits)}: {s.attainment:.0%}/{s.goodput:.2f}"
                     for s in statics)
    print(f"grid (attainment/goodput): {grid}", file=sys.stderr)


def _overloads(controlled: PolicyRun) -> None:
    """Each span the law judged overloaded, with the replicas its demand needed."""
    for e in controlled.overloads:
        end = "the end" if e.end is None else _clock(e.end)
        print(f"overload {_clock(e.start)} to {end}: {e.replicas_median} replica(s) needed "
              f"(at most {e.replicas_max}) by the controller's scale-out signal",
              file=sys.stderr)


def _clock(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def _plots(results: list[PolicyRun], best: PolicyRun, scenario: Scenario, out: Path) -> list[Path]:
    from governor.bench.controller.plots import plot_comparison, plot_run

    out.mkdir(parents=True, exist_ok=True)
    chosen = [results[0], best, results[1]]
    paths = [plot_run(r, scenario.slo, scenario.workload, out / f"run-{i}.png")
             for i, r in zip("abc", chosen, strict=True)]
    paths.append(plot_comparison(chosen, scenario.slo, out / "comparison.png"))
    return paths
