"""Closed-loop fidelity: ``vllm bench serve``'s random workload replayed on the simulator.

``vllm bench serve --dataset-name random --ignore-eos --max-concurrency C`` keeps C requests in
flight: each stream sends its next prompt (exactly ``input_len`` random tokens, ``output_len``
tokens out, EOS ignored) as soon as its last one finishes. The first C start together, so
the engine sees waves of simultaneous prefills; that is where vLLM's default budget breaks a
120 ms inter-token P99 on an H200. This module replays the same workload in virtual time and
compares it with a measured table (``lab/results/closed-loop-h200.json``), which the
preset was **not** fitted to: its error is out of sample::

    python -m lab.calibration.sim_fidelity --closed-loop --concurrency 1,32,128,256

Figures are the ones ``vllm bench serve`` reports: TTFT and ITL percentiles over every request
and every gap between streamed outputs, and output tokens per second over the whole run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from governor.inference.engines.base import BatchingLimits
from governor.inference.engines.sim.presets import Preset
from governor.inference.engines.sim.virtual import RequestRecord, VirtualSim

MS = 1e-3
# What the table was measured with (vLLM's API-server budget on an H200, a 256 running cap).
MEASURED_LIMITS = BatchingLimits(max_num_seqs=256, max_num_batched_tokens=8192)
DEFAULT_MEASURED = Path("lab/results/closed-loop-h200.json")
FIGURES = ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "output_tokens_per_second")
# The targets: medians within ±15%, tails within ±25%, the SLO breach reproduced.
TOLERANCE = {"ttft_p50_ms": 0.15, "itl_p50_ms": 0.15, "output_tokens_per_second": 0.15,
             "ttft_p99_ms": 0.25, "itl_p99_ms": 0.25}


@dataclass(frozen=True, slots=True)
class ClosedLoop:
    concurrency: int
    input_len: int = 512
    output_len: int = 256
    prompts_per_stream: int = 4

    @property
    def num_prompts(self) -> int:
        return self.concurrency * self.prompts_per_stream


@dataclass(frozen=True, slots=True)
class Row:
    """One concurrency's figures, named as ``vllm bench serve`` reports them."""

    concurrency: int
    ttft_p50_ms: float
    ttft_p99_ms: float
    itl_p50_ms: float
    itl_p99_ms: float
    output_tokens_per_second: float

    def as_dict(self) -> dict[str, float]:
        return {k: (v if isinstance(v, int) else round(v, 3)) for k, v in asdict(self).items()}


def simulate(preset: Preset, workload: ClosedLoop, *, seed: int = 0,
             limits: BatchingLimits = MEASURED_LIMITS) -> Row:
    """Replay the closed loop in virtual time (prefix caching off: random prompts share none)."""
    remaining = [workload.prompts_per_stream - 1] * workload.concurrency
    stream_of: dict[str, int] = {}

    def next_prompt(sim: VirtualSim, record: RequestRecord) -> None:
        stream = stream_of[record.request_id]
        if remaining[stream] > 0:
            remaining[stream] -= 1
            rid = sim.submit(arrival=record.finish_time, prompt=workload.input_len,
                             output_tokens=workload.output_len)
            stream_of[rid] = stream

    sim = VirtualSim(preset.with_overrides(enable_prefix_caching=False), limits=limits, seed=seed,
                     on_finish=next_prompt)
    for stream in range(workload.concurrency):
        rid = sim.submit(arrival=0.0, prompt=workload.input_len,
                         output_tokens=workload.output_len)
        stream_of[rid] = stream
    sim.run_until_idle()
    records = sim.records()
    ttfts = [r.time_to_first_token for r in records]
    itls = [x for r in records for x in r.inter_token_latencies]
    duration = max(r.finish_time for r in records)
    outputs = sum(r.num_output_tokens for r in records)
    ttft50, ttft99 = np.percentile(ttfts, (50, 99)) / MS
    itl50, itl99 = np.percentile(itls, (50, 99)) / MS
    return Row(workload.concurrency, float(ttft50), float(ttft99), float(itl50), float(itl99),
               outputs / duration)


def from_vllm_bench(result: dict[str, Any]) -> Row:
    """A row from the JSON ``vllm bench serve --save-result`` writes (percentiles 50 and 99)."""
    return Row(int(result["max_concurrency"]), float(result["median_ttft_ms"]),
               float(result["p99_ttft_ms"]), float(result["median_itl_ms"]),
               float(result["p99_itl_ms"]), float(result["output_throughput"]))


@dataclass(frozen=True, slots=True)
class Measured:
    rows: dict[int, Row]
    workload: dict[str, Any]
    source: str

    @classmethod
    def load(cls, path: Path) -> Measured:
        data = json.loads(path.read_text(encoding="utf-8"))
        rows = {int(r["concurrency"]): Row(**{k: r[k] for k in ("concurrency", *FIGURES)})
                for r in data["rows"]}
        return cls(rows, data.get("workload", {}), str(path))


@dataclass(frozen=True, slots=True)
class Comparison:
    simulated: Row
    measured: Row
    slo_seconds: float

    def error(self, figure: str) -> float:
        return float(getattr(self.simulated, figure)) / float(getattr(self.measured, figure)) - 1

    def within(self, figure: str) -> bool:
        return abs(self.error(figure)) <= TOLERANCE[figure]

    @property
    def breach_reproduced(self) -> bool:
        """The ITL P99 is on the same side of the SLO in both."""
        limit = self.slo_seconds / MS
        return (self.simulated.itl_p99_ms > limit) == (self.measured.itl_p99_ms > limit)

    def as_dict(self) -> dict[str, Any]:
        return {
            "concurrency": self.simulated.concurrency,
            **{f"{f}_error": round(self.error(f), 4) for f in FIGURES},
            "within_tolerance": {f: self.within(f) for f in FIGURES},
            "breach_reproduced": self.breach_reproduced,
        }


def render(rows: Sequence[Row], comparisons: Sequence[Comparison], slo_seconds: float) -> str:
    head = ["concurrency", "figure", "measured", "simulated", "error", "tolerance"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    by_c = {c.simulated.concurrency: c for c in comparisons}
    for row in rows:
        comparison = by_c.get(row.concurrency)
        for figure in FIGURES:
            sim = float(getattr(row, figure))
            if comparison is None:
                lines.append(f"| {row.concurrency} | {figure} | — | {sim:,.1f} | — | — |")
                continue
            measured = float(getattr(comparison.measured, figure))
            mark = "" if comparison.within(figure) else " ✗"
            lines.append(f"| {row.concurrency} | {figure} | {measured:,.1f} | {sim:,.1f} | "
                         f"{comparison.error(figure):+.1%}{mark} | ±{TOLERANCE[figure]:.0%} |")
    for c in comparisons:
        side = "breach" if c.measured.itl_p99_ms > slo_seconds / MS else "no breach"
        ok = "reproduced" if c.breach_reproduced else "NOT reproduced"
        lines.append(f"\nconcurrency {c.simulated.concurrency}: measured {side} of the "
                     f"{slo_seconds / MS:.0f} ms ITL P99 SLO, {ok} by the simulator")
    return "\n".join(lines)


def summary(comparisons: Sequence[Comparison]) -> dict[str, Any]:
    """Out-of-sample error in one line: cells within tolerance, worst error, breaches."""
    cells = [(c, f) for c in comparisons for f in FIGURES]
    if not cells:
        return {"cells": 0}
    worst = max(cells, key=lambda cf: abs(cf[0].error(cf[1])))
    return {
        "cells": len(cells),
        "within_tolerance": sum(c.within(f) for c, f in cells),
        "worst_error": round(worst[0].error(worst[1]), 4),
        "worst_cell": f"{worst[0].simulated.concurrency}/{worst[1]}",
        "median_abs_error": round(float(np.median([abs(c.error(f)) for c, f in cells])), 4),
        "breaches_reproduced": sum(c.breach_reproduced for c in comparisons),
        "concurrencies": len(comparisons),
    }
