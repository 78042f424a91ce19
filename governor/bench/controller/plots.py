"""PNG plots of the benchmark: latency over time with the SLO line and the decisions marked."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never a display

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from governor.bench.controller.loop import PolicyRun
from governor.bench.controller.request_logs import Traffic
from governor.bench.controller.scoring import WindowScore
from governor.controller.model import Param, SloTargets

COLOURS = {"tighten": "tab:red", "undo": "tab:purple", "relax": "tab:green"}


def plot_run(run: PolicyRun, slo: SloTargets, workload: Traffic, path: Path) -> Path:
    """Three panels: inter-token P99 (windows and Prometheus's view), TTFT P99, the limits."""
    fig, (itl, ttft, knobs) = plt.subplots(3, 1, figsize=(12, 9), sharex=True,
                                           gridspec_kw={"height_ratios": [3, 2, 2]})
    mids = [(w.start + w.end) / 2 / 60 for w in run.windows]
    itl.plot(mids, [w.itl_tail * 1000 for w in run.windows], drawstyle="steps-mid",
             label=f"ITL p{slo.itl_quantile * 100:g} per window (exact)")
    itl.plot([t / 60 for t, _ in run.observed], [v * 1000 for _, v in run.observed],
             alpha=0.6, linewidth=0.8, label="…as Prometheus sees it (30 s window)")
    itl.axhline(slo.itl_seconds * 1000, color="black", linestyle="--", label="SLO")
    for episode in run.episodes:
        end = episode.recovered_at if episode.recovered_at is not None else run.duration
        itl.axvspan(episode.observable_at / 60, end / 60, color="tab:orange", alpha=0.15)
    _mark(itl, run)
    itl.set_ylabel("inter-token latency (ms)")
    itl.set_yscale("log")
    itl.legend(loc="upper left", fontsize=8)
    itl.set_title(f"{run.name}: ITL and TTFT tails; shaded: the breach shows in the "
                  "controller's query")
    ttft.plot(mids, [w.ttft_tail for w in run.windows], drawstyle="steps-mid", color="tab:brown",
              label=f"TTFT p{slo.ttft_quantile * 100:g} per window")
    if slo.ttft_seconds is not None:
        ttft.axhline(slo.ttft_seconds, color="black", linestyle="--", label="SLO")
    ttft.set_ylabel("time to first token (s)")
    ttft.legend(loc="upper left", fontsize=8)
    _limits_panel(knobs, run, workload)
    knobs.set_xlabel("minutes")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _mark(ax: Axes, run: PolicyRun) -> None:
    for trace in run.traces:
        colour = COLOURS.get(trace.decision.action.value, "grey")
        ax.axvline(trace.at / 60, color=colour, linewidth=0.8, alpha=0.8)
        changed = [p for p in Param if trace.decision.after.get(p) != trace.decision.before.get(p)]
        if changed:
            ax.annotate(f"{trace.decision.reason.value}\n→{trace.decision.after.get(changed[0])}",
                        (trace.at / 60, ax.get_ylim()[1]), fontsize=6, rotation=90,
                        va="top", ha="right", color=colour)


def _limits_panel(ax: Axes, run: PolicyRun, workload: Traffic) -> None:
    times = [t / 60 for t, _ in run.limits] + [run.duration / 60]
    budgets = [lim.max_num_batched_tokens for _, lim in run.limits]
    ax.step(times, [*budgets, budgets[-1]], where="post", color="tab:blue",
            label="max_num_batched_tokens")
    ax.set_ylabel("token budget")
    ax.set_ylim(0, max(budgets) * 1.1)
    offered = ax.twinx()
    grid = [i * workload.duration_seconds / 400 for i in range(401)]
    rates = [workload.rates(t) for t in grid]
    for name in rates[0]:
        offered.plot([t / 60 for t in grid], [r[name] for r in rates],
                     alpha=0.5, linestyle="--", label=f"{name}/s (offered)")
    offered.set_ylabel("requests per second")
    ax.legend(loc="upper left", fontsize=8)
    offered.legend(loc="upper right", fontsize=8)


def plot_comparison(runs: Sequence[PolicyRun], slo: SloTargets, path: Path) -> Path:
    """:func:`comparison_figure`, written to ``path``."""
    fig = comparison_figure(runs, slo)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def comparison_figure(runs: Sequence[PolicyRun], slo: SloTargets) -> Figure:
    """Each policy's tail per window against each SLO it is judged on: inter-token latency,
    and time to first token where the spec has that SLO, each titled with the share of
    windows that failed it, so the plot shows which SLO a low attainment is made of."""
    judged: list[tuple[str, float, float, Callable[[WindowScore], float]]] = [
        ("ITL", slo.itl_quantile, slo.itl_seconds, lambda w: w.itl_tail)]
    if slo.ttft_seconds is not None:
        judged.append(("TTFT", slo.ttft_quantile, slo.ttft_seconds, lambda w: w.ttft_tail))
    fig, axes = plt.subplots(len(judged), 1, figsize=(12, 4.5 * len(judged)), sharex=True,
                             squeeze=False)
    for ax, (what, quantile, threshold, tail) in zip(axes[:, 0], judged, strict=True):
        shares = []
        for run in runs:
            values = [tail(w) for w in run.windows]
            ax.plot([(w.start + w.end) / 2 / 60 for w in run.windows],
                    [v * 1000 for v in values], drawstyle="steps-mid", label=run.name)
            failed = sum(v > threshold for v in values if math.isfinite(v))
            shares.append(f"{run.name.split(' ')[0]} {failed / max(1, len(values)):.0%}")
        ax.axhline(threshold * 1000, color="black", linestyle="--", label="SLO")
        ax.set_yscale("log")
        ax.set_ylabel(f"{what} p{quantile * 100:g} per window (ms)")
        ax.set_title(f"{what}: windows over the SLO: {', '.join(shares)}", loc="left",
                     fontsize=10)
        ax.legend(fontsize=8)
    axes[-1, 0].set_xlabel("minutes")
    fig.tight_layout()
    return fig
