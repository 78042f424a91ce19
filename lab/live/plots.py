"""One figure of a live-loop comparison: per policy, the ITL and TTFT tails per window and the
token budget in force, with the SLO lines and the controller's decisions marked."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lab.live.liverun import LiveRun


def plot_live(runs: Sequence[LiveRun], scores: Sequence[dict[str, Any]], slo: dict[str, float],
              path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only; never a display
    import matplotlib.pyplot as plt

    fig, (itl, ttft, budget) = plt.subplots(3, 1, figsize=(12, 10), sharex=True,
                                            gridspec_kw={"height_ratios": [3, 2, 2]})
    for run, s in zip(runs, scores, strict=True):
        starts = [w["start"] + 10 for w in s["windows"]]
        line = itl.plot(starts, [w["itl_tail_ms"] for w in s["windows"]], drawstyle="steps-mid",
                        label=f"{s['label']} ({s['attainment']:.0%}, {s['goodput_rps']:.1f}/s)")
        colour = line[0].get_color()
        ttft.plot(starts, [w["ttft_tail_ms"] for w in s["windows"]], drawstyle="steps-mid",
                  color=colour)
        limits = run.limit_series("max_num_batched_tokens")
        if limits:
            budget.plot([t for t, _ in limits], [v for _, v in limits], color=colour,
                        drawstyle="steps-post")
        for change in s["decisions"]:
            itl.axvline(change["at_s"], color=colour, linestyle=":", linewidth=0.8)
    itl.axhline(slo["itl_seconds"] * 1000, color="black", linestyle="--", label="SLO")
    itl.set_yscale("log")
    itl.set_ylabel(f"ITL p{slo['itl_quantile'] * 100:g} per window (ms)")
    itl.legend(loc="upper left", fontsize=8)
    itl.set_title("Live loop: each policy on the same arrivals (dotted: controller decisions)")
    ttft.axhline(slo["ttft_seconds"] * 1000, color="black", linestyle="--")
    ttft.set_yscale("log")
    ttft.set_ylabel(f"TTFT p{slo['ttft_quantile'] * 100:g} (ms)")
    budget.set_ylabel("max_num_batched_tokens")
    budget.set_xlabel("seconds since the run started")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
