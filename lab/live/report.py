"""Score live-loop runs offline, with exactly the definitions of ``governor bench controller``.

Each ``run-*.json.gz`` that :mod:`lab.live.runs` writes holds every request's arrival
and streamed-event times, the controller's audit lines and what Prometheus saw. From them:

* **attainment**: the share of 20 s windows whose exact ITL and TTFT tails meet the SLOs
  (:func:`~governor.bench.controller.scoring.windows_from_times`, the function the simulated runs
  use);
* **goodput**: requests per second that met the TTFT SLO and whose own ITL tail met its SLO;
* **worst recovery**: the longest stretch in which the controller's own ITL query (as
  Prometheus answered it during the run, for the worst replica at each step) stayed above the
  SLO;
* **changes**: limit changes the controller applied, and **reversals**: consecutive changes of
  the token budget in opposite directions (a tighten undone, then tightened again) — the
  oscillation the law must never show under steady load.

A run with several replicas (``start --replicas N``) is scored over every request, as a client
of the fleet sees it, and per replica (the requests :func:`lab.live.replay.replica_of` sent
there); each decision names its target.

``python -m lab.live report RESULTS --out DIR [--slo SPEC]`` scores at the thresholds of the
spec the stack ran on (``start --slo``) and writes ``controller-<gpu>.json`` (over stock ``vllm
serve`` ``controller-<gpu>-stock-vllm.json``, with several replicas ``…-x<N>.json``, with
data-parallel ranks ``…-dp<N>.json``) and a comparison plot.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from governor.bench.api import (
    WindowScore,
    attainment,
    goodput,
    series_episodes,
    windows_from_times,
    worst_recovery,
)
from governor.controller.slo import objectives
from governor.generation.catalog import load_checked_spec
from lab.live.liverun import LiveRun
from lab.live.predict import admitted_ttft_p99_ms
from lab.live.replay import Trace, replica_of
from lab.live.stack import STOCK_SERVER

TARGETS = {"attainment": 0.95, "goodput_vs_best_static": 0.95, "goodput_vs_default": 1.3,
           "recovery_seconds": 60.0}


def scoring_slo(path: Path) -> dict[str, Any]:
    """The thresholds the runs are scored at: the controller's SLOs in the spec the stack ran
    on (``slo.yaml``: 120 ms / 1 s; a spec on stock vLLM's histograms sits at vLLM's edges)."""
    targets = objectives(load_checked_spec(path)).slo
    return {"itl_seconds": targets.itl_seconds, "itl_quantile": targets.itl_quantile,
            "ttft_seconds": targets.ttft_seconds, "ttft_quantile": targets.ttft_quantile}


def reversals(changes: Sequence[dict[str, Any]]) -> int:
    """Consecutive token-budget moves in opposite directions."""
    moves = [c["after"]["max_num_batched_tokens"] - c["before"]["max_num_batched_tokens"]
             for c in changes]
    signs = [m > 0 for m in moves if m != 0]
    return sum(a != b for a, b in itertools.pairwise(signs))


def _attainment_and_goodput(traces: Sequence[Trace], slo: dict[str, float], window: float,
                            duration: float) -> tuple[list[WindowScore], dict[str, float]]:
    itl_slo, ttft_slo = slo["itl_seconds"], slo["ttft_seconds"]
    windows = windows_from_times(((t.arrival, t.token_times) for t in traces), width=window,
                                 end=duration, itl_q=slo["itl_quantile"],
                                 ttft_q=slo["ttft_quantile"])
    outcomes = [t.outcome(slo["itl_quantile"]) for t in traces]
    return windows, {
        "attainment": round(attainment(windows, itl_slo=itl_slo, ttft_slo=ttft_slo), 4),
        "goodput_rps": round(goodput(outcomes, start=0.0, end=duration, itl_slo=itl_slo,
                                     ttft_slo=ttft_slo), 3)}


def score(run: LiveRun, slo: dict[str, float], window: float) -> dict[str, Any]:
    itl_slo = slo["itl_seconds"]
    windows, scored = _attainment_and_goodput(run.traces, slo, window, run.duration)
    episodes = series_episodes(run.series("itl_tail"), itl_slo)
    changes = run.changes()
    per_replica = {}
    if run.replicas > 1:
        for replica in range(run.replicas):
            mine = [t for i, t in enumerate(run.traces)
                    if replica_of(i, run.replicas) == replica]
            per_replica[str(replica)] = _attainment_and_goodput(mine, slo, window,
                                                                run.duration)[1]
    return {
        "policy": run.data["policy"], "label": run.label, "limits": run.data["limits"],
        **scored,
        **({"replicas": per_replica} if per_replica else {}),
        "worst_recovery_seconds": _round(worst_recovery(episodes, run.duration)),
        "breach_episodes": len(episodes),
        "changes": len(changes),
        "reversals": reversals(changes),
        "requests": len(run.traces),
        "finished": sum(t.finished for t in run.traces),
        "errors": sum(t.status not in (0, 200, 429) for t in run.traces),
        # Refused by the deadline gate (429), and the first-token tail of those served.
        "refused": sum(t.status == 429 for t in run.traces),
        "admitted_ttft_p99_ms": admitted_ttft_p99_ms([t.ttft for t in run.traces
                                                      if t.finished]),
        "gate_slack_at_start": (run.data.get("admission") or {}).get("deadline_slack"),
        "decisions": [{"at_s": c["at_s"], "action": c["action"], "reason": c["reason"],
                       **({"target": c["target"]} if run.replicas > 1 else {}),
                       **c["after"]} for c in changes],
        "windows": [{"start": w.start, "itl_tail_ms": _ms(w.itl_tail),
                     "ttft_tail_ms": _ms(w.ttft_tail)} for w in windows],
    }


def _label_repeats(runs: Sequence[LiveRun], scores: Sequence[dict[str, Any]]) -> None:
    """A policy run more than once is labelled by its run, "controller (run-1)", so tables,
    windows and plots keep every run apart."""
    counts = collections.Counter(s["label"] for s in scores)
    for run, s in zip(runs, scores, strict=True):
        if counts[s["label"]] > 1:
            s["label"] = f"{s['label']} ({run.name.rsplit('-', 1)[0]})"


def data_parallel_size(environment: dict[str, str]) -> int:
    """The ``data-parallel-size`` the engine was started with (``start --engine-arg``), 1 if
    none.

    >>> data_parallel_size({"engine_args": "gpu_memory_utilization=0.85 data-parallel-size=2"})
    2
    """
    for pair in environment.get("engine_args", "").split():
        key, _, value = pair.partition("=")
        if key.replace("-", "_") == "data_parallel_size" and value.isdecimal():
            return int(value)
    return 1


def _ms(value: float) -> float | None:
    return None if math.isnan(value) else round(value * 1000, 2)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def summarise(scores: list[dict[str, Any]]) -> dict[str, Any]:
    """Ratios against the default and the best static run; the targets met or missed."""
    default = next((s for s in scores if s["policy"] == "default"), None)
    statics = [s for s in scores if s["policy"] in ("static", "default")]
    best = max(statics, key=lambda s: (s["goodput_rps"], s["attainment"]), default=None)
    for s in scores:
        s["goodput_vs_default"] = _ratio(s["goodput_rps"], default["goodput_rps"]) \
            if default else None
        s["goodput_vs_best_static"] = _ratio(s["goodput_rps"], best["goodput_rps"]) \
            if best else None
    met: dict[str, bool | None] = {}
    for s in scores:
        if s["policy"] == "controller":
            s["met"] = _met(s)
            # a target holds only if it held in every controller run
            met = {k: _all(met.get(k, True), v) for k, v in s["met"].items()}
    return {"best_static": best["label"] if best else None, "targets": TARGETS, "met": met}


def _met(controller: dict[str, Any]) -> dict[str, bool | None]:
    recovery = controller["worst_recovery_seconds"]
    return {
        "attainment": controller["attainment"] >= TARGETS["attainment"],
        "goodput_vs_best_static": _at_least(controller["goodput_vs_best_static"],
                                            TARGETS["goodput_vs_best_static"]),
        "goodput_vs_default": _at_least(controller["goodput_vs_default"],
                                        TARGETS["goodput_vs_default"]),
        "recovery": recovery is None or recovery <= TARGETS["recovery_seconds"],
        "no_oscillation": controller["reversals"] == 0,
    }


def _all(a: bool | None, b: bool | None) -> bool | None:
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 4) if b > 0 else None


def _at_least(value: float | None, target: float) -> bool | None:
    return None if value is None else value >= target


def table(scores: Sequence[dict[str, Any]]) -> str:
    rows = [("policy", "attain", "goodput/s", "vs default", "vs best", "recovery", "changes",
             "refused", "served TTFT p99", "sim predicted attain/goodput")]
    for s in scores:
        recovery = s["worst_recovery_seconds"]
        sim = s.get("simulated")
        predicted = f"{sim['attainment']:.1%} / {sim['goodput_rps']:.2f}" if sim else "—"
        ttft = s.get("admitted_ttft_p99_ms")
        rows.append((s["label"], f"{s['attainment']:.1%}", f"{s['goodput_rps']:.2f}",
                     _x(s["goodput_vs_default"]), _x(s["goodput_vs_best_static"]),
                     "—" if recovery is None else f"{recovery:.0f}s", str(s["changes"]),
                     str(s.get("refused", 0)), "—" if ttft is None else f"{ttft:.0f} ms",
                     predicted))
    width = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, width, strict=True)) for r in rows)


def _x(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def report(args: argparse.Namespace) -> int:
    paths = sorted(p for folder in args.results for p in Path(folder).glob("run-*.json.gz"))
    if not paths:
        print("python -m lab.live report: no run-*.json.gz found", flush=True)
        return 2
    runs = [LiveRun.load(p) for p in paths]
    slo = scoring_slo(args.slo)
    scores = [score(run, slo, args.window) for run in runs]
    _label_repeats(runs, scores)
    if args.predict != "none":
        from lab.live.predict import predict

        for run, s in zip(runs, scores, strict=True):
            if run.replicas > 1:
                continue  # the benchmark's simulator models one engine behind one controller
            s["simulated"] = {"preset": args.predict, **predict(
                run, slo=args.slo, preset=args.predict, window=args.window)}
    summary = summarise(scores)
    first = runs[0].data
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    gpu = (first["environment"].get("gpu") or first["environment"].get("engine", "live"))
    card = next((c for c in ("H200", "H100") if c in gpu), None)
    name = card.lower() if card else first["environment"].get("engine", "live")
    if first["environment"].get("server") == STOCK_SERVER:
        name += "-stock-vllm"
    if first["environment"].get("admission", "none") != "none":
        name += "-gated"
    if runs[0].replicas > 1:
        name += f"-x{runs[0].replicas}"
    ranks = data_parallel_size(first["environment"])
    if ranks > 1:
        name += f"-dp{ranks}"
    result = {
        "bench": "controller (live)", "slo": slo, "window_seconds": args.window,
        "workload": {**first["workload"], "seed": first["seed"]},
        "environment": first["environment"], **summary,
        "runs": [{k: v for k, v in s.items() if k != "windows"} for s in scores],
        "windows": {s["label"]: s["windows"] for s in scores},
    }
    path = out / f"controller-{name}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(table(scores))
    print(json.dumps({"best_static": summary["best_static"], "met": summary["met"]}))
    from lab.live.plots import plot_live

    plot_live(runs, scores, slo, out / f"controller-{name}.png")
    return 0
