"""Sim fidelity: replay the H200 workloads of docs/h200-measurements.md in virtual time, cell by
cell.

```python -m lab.calibration.sim_fidelity`` prints every
measured figure next to the simulated one and the relative error, and exits 1 when a cell is off
by more than the tolerance. The workloads, as the original H200 run describes them:

* decode: B requests of 128-token prompts and 256 new tokens submitted together
  (``max_num_seqs`` 256, budget 8192); ITL percentiles over every token, decode tokens/s;
* prefill: one request alone, 1 output token; TTFT;
* budget: 64 requests decoding continuously while long prompts (2000 tokens at 4/s or 7000 at
  1/s, 1 output token) arrive at a steady rate; ITL of the decoders and TTFT of the long
  prompts over a 20 s window after a warm-up, at budgets 8192 / 2048 / 512.

the original H200 run leaves the decoders' own lengths open; they are
``DecoderWorkload.decoder_prompt_tokens``
prompts that generate ``decoder_output_tokens`` each and are replaced by a fresh one when the
last token reaches them (a closed loop of 64 clients), started at staggered points of their
lives so that they do not finish together. Prefix caching is off, as in the measured runs. The
original H200 run was timed by the caller in the AsyncLLM process, so every latency here is a
delivery through the sim's frontend model (:mod:`.frontend`), not a step end.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from governor.common.cli import EnvArgumentParser, parse_duration_seconds
from governor.inference.engines.base import BatchingLimits
from governor.inference.engines.sim.presets import Preset, get_preset
from governor.inference.engines.sim.virtual import RequestRecord, VirtualSim
from lab.calibration import closed_loop, closed_loop_live

MS = 1e-3
DECODER_COUNT = 64
WARMUP_SECONDS = 10.0
WINDOW_SECONDS = 20.0
MEASURED_MAX_NUM_SEQS = 256
SPEED_TARGET_TOKENS_PER_SECOND = 100_000
MEASURED_BUDGET = 8192

# docs/h200-measurements.md: real vLLM 0.25 on an H200, Llama-3-8B shape.
DECODE_BATCHES = (1, 8, 32, 64, 128, 256)
DECODE_ITL_P50_MS = (4.85, 5.00, 5.47, 6.07, 7.45, 11.24)
DECODE_ITL_P99_MS = (5.49, 5.74, 6.00, 6.94, 8.77, 13.93)
DECODE_TOKENS_PER_SECOND = (206.0, 1600.0, 5854.0, 10552.0, 17193.0, 22772.0)
PREFILL_PROMPTS = (128, 512, 1024, 2048, 4096, 8000)
PREFILL_TTFT_MS = (11.8, 16.3, 28.9, 51.8, 101.9, 211.5)
BUDGET_COLUMNS = ("ITL p50", "ITL p90", "ITL p99", "ITL max", "TTFT p50", "TTFT p99")


@dataclass(frozen=True, slots=True)
class DecoderWorkload:
    """What the original H200 run leaves open about the budget runs' requests (our
    reconstruction)."""

    decoder_prompt_tokens: int = 128
    decoder_output_tokens: int = 256
    long_prompt_output_tokens: int = 256


@dataclass(frozen=True, slots=True)
class BudgetRow:
    prompt_tokens: int
    prompts_per_second: float
    budget: int
    measured_ms: tuple[float, float, float, float, float, float]


BUDGET_ROWS = (
    BudgetRow(2000, 4.0, 8192, (7.37, 11.3, 35.4, 41.3, 61.1, 68.5)),
    BudgetRow(2000, 4.0, 2048, (7.40, 10.5, 36.6, 55.7, 68.5, 76.5)),
    BudgetRow(2000, 4.0, 512, (7.49, 13.9, 15.8, 17.4, 85.0, 94.0)),
    BudgetRow(7000, 1.0, 8192, (6.73, 8.70, 33.4, 194.8, 199.1, 206.7)),
    BudgetRow(7000, 1.0, 2048, (6.76, 10.3, 55.5, 93.0, 214.8, 233.6)),
    BudgetRow(7000, 1.0, 512, (6.85, 15.4, 19.3, 28.1, 285.3, 291.1)),
)


# Cells the simulator does not bring within the tolerance, and why: the calibration test holds
# every other cell to ±15% and expects exactly these to miss it.
UNREPRODUCED: dict[tuple[str, str, str], str] = {
    ("budget", "2000 @ 4/s, budget 2048", "ITL max"): (
        "One sample. With async scheduling the ~50 ms of a 2000-token prompt's first chunk "
        "reach the decoders as two gaps (the decode step before it is held until the chunk "
        "step is prepared, then the chunk's remainder), so the sim's worst gap here is ~36 ms. "
        "Three repetitions on the H200 (lab/results/budget_h200.md) measured 40.4, "
        "43.0 and 50.0 ms: none reached the original H200 run's 55.7 ms."
    ),
}


@dataclass(frozen=True, slots=True)
class Cell:
    table: str
    row: str
    column: str
    measured: float
    simulated: float

    @property
    def error(self) -> float:
        return self.simulated / self.measured - 1.0

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.table, self.row, self.column)


def _measured(preset: Preset) -> Preset:
    """The preset as the measured runs configured vLLM: prefix caching off."""
    return preset.with_overrides(enable_prefix_caching=False)


def _percentiles_ms(values: Sequence[float], qs: Sequence[float]) -> list[float]:
    return [float(v) / MS for v in np.percentile(np.asarray(values), qs)]


def decode_cells(preset: Preset, seed: int) -> Iterator[Cell]:
    limits = BatchingLimits(MEASURED_MAX_NUM_SEQS, MEASURED_BUDGET)
    for i, batch in enumerate(DECODE_BATCHES):
        sim = VirtualSim(_measured(preset), limits=limits, seed=seed)
        for _ in range(batch):
            sim.submit(arrival=0.0, prompt=128, output_tokens=256)
        sim.run_until_idle()
        itls = [x for record in sim.records() for x in record.inter_token_latencies]
        p50, p99 = _percentiles_ms(itls, (50, 99))
        row = f"B={batch}"
        yield Cell("decode", row, "ITL p50", DECODE_ITL_P50_MS[i], p50)
        yield Cell("decode", row, "ITL p99", DECODE_ITL_P99_MS[i], p99)
        tokens_per_second = batch / float(np.mean(itls))
        yield Cell("decode", row, "tokens/s", DECODE_TOKENS_PER_SECOND[i], tokens_per_second)


def prefill_cells(preset: Preset, seed: int) -> Iterator[Cell]:
    for prompt, measured in zip(PREFILL_PROMPTS, PREFILL_TTFT_MS, strict=True):
        sim = VirtualSim(_measured(preset), seed=seed)
        request_id = sim.submit(arrival=0.0, prompt=prompt, output_tokens=1)
        sim.run_until_idle()
        ttft = sim.record(request_id).time_to_first_token / MS
        yield Cell("prefill", f"{prompt} tokens", "TTFT", measured, ttft)


@dataclass(frozen=True, slots=True)
class BudgetRun:
    itls: list[float]  # the decoders', seconds, in the window
    ttfts: list[float]  # the long prompts', seconds, arrived in the window
    generation_tokens: int  # all tokens the run generated, warm-up included
    wall_seconds: float  # what simulating it took


def budget_run(
    preset: Preset, row: BudgetRow, *, seed: int, workload: DecoderWorkload = DecoderWorkload()
) -> BudgetRun:
    """Replay one budget-table row: the decoders' ITLs and the long prompts' TTFTs."""
    started = time.perf_counter()
    decoder_prompt = workload.decoder_prompt_tokens
    decoder_output = workload.decoder_output_tokens
    rng = random.Random(seed)
    decoders: set[str] = set()

    def replace_finished(sim: VirtualSim, record: RequestRecord) -> None:
        if record.request_id in decoders:
            decoders.add(
                sim.submit(
                    arrival=record.finish_time, prompt=decoder_prompt, output_tokens=decoder_output
                )
            )

    sim = VirtualSim(
        _measured(preset),
        limits=BatchingLimits(MEASURED_MAX_NUM_SEQS, row.budget),
        seed=seed,
        on_finish=replace_finished,
    )
    for _ in range(DECODER_COUNT):
        remaining = rng.randint(1, decoder_output)
        decoders.add(sim.submit(arrival=0.0, prompt=decoder_prompt, output_tokens=remaining))
    end = WARMUP_SECONDS + WINDOW_SECONDS
    long_prompts = []
    arrival = 1.0
    while arrival < end:
        long_prompts.append(
            sim.submit(
                arrival=arrival,
                prompt=row.prompt_tokens,
                output_tokens=workload.long_prompt_output_tokens,
            )
        )
        arrival += 1.0 / row.prompts_per_second
    sim.run_until(end)
    itls: list[float] = []
    for request_id in decoders:
        times = sim.record(request_id).token_times
        itls.extend(b - a for a, b in itertools.pairwise(times) if WARMUP_SECONDS <= b < end)
    ttfts: list[float] = []
    for request_id in long_prompts:
        record = sim.record(request_id)
        if record.arrival_time >= WARMUP_SECONDS and not math.isnan(record.first_token_time):
            ttfts.append(record.time_to_first_token)
    wall = time.perf_counter() - started
    return BudgetRun(itls, ttfts, sim.counters.generation_tokens, wall)


def row_name(row: BudgetRow) -> str:
    return f"{row.prompt_tokens} @ {row.prompts_per_second:g}/s, budget {row.budget}"


def budget_cells(
    preset: Preset, seed: int, workload: DecoderWorkload = DecoderWorkload()
) -> Iterator[Cell]:
    for row in BUDGET_ROWS:
        run = budget_run(preset, row, seed=seed, workload=workload)
        simulated = [
            *_percentiles_ms(run.itls, (50, 90, 99, 100)),
            *_percentiles_ms(run.ttfts, (50, 99)),
        ]
        name = row_name(row)
        for column, measured, value in zip(BUDGET_COLUMNS, row.measured_ms, simulated, strict=True):
            yield Cell("budget", name, column, measured, value)


def all_cells(preset: Preset, seed: int = 0) -> list[Cell]:
    return [*decode_cells(preset, seed), *prefill_cells(preset, seed), *budget_cells(preset, seed)]


def _marks(cells: Sequence[Cell], tolerance: float) -> tuple[dict[Cell, str], list[str]]:
    """A mark per cell out of tolerance (a note number for the documented ones) and the notes."""
    marks: dict[Cell, str] = {}
    notes: list[str] = []
    for cell in cells:
        if abs(cell.error) <= tolerance:
            continue
        reason = UNREPRODUCED.get(cell.key)
        if reason is None:
            marks[cell] = " ✗"
            continue
        if reason not in notes:
            notes.append(reason)
        marks[cell] = f" [{notes.index(reason) + 1}]"
    return marks, notes


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 1000 else f"{value:.1f}" if value >= 100 else f"{value:.2f}"


def _summary(cells: Sequence[Cell], tolerance: float, notes: Sequence[str]) -> list[str]:
    within = sum(abs(c.error) <= tolerance for c in cells)
    worst = max(cells, key=lambda c: abs(c.error))
    return [
        "",
        f"{within}/{len(cells)} cells within ±{tolerance:.0%}; worst {worst.error:+.1%} "
        f"({worst.row}, {worst.column})",
        *(f"[{i}] {note}" for i, note in enumerate(notes, 1)),
    ]


def render(cells: Sequence[Cell], tolerance: float) -> str:
    """A Markdown table: measured, simulated, their ratio and the error of every cell."""
    marks, notes = _marks(cells, tolerance)
    lines = [
        "| table | row | figure | measured | simulated | sim/measured | error |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for cell in cells:
        lines.append(
            f"| {cell.table} | {cell.row} | {cell.column} | {_number(cell.measured)} | "
            f"{_number(cell.simulated)} | {cell.simulated / cell.measured:.2f} | "
            f"{cell.error:+.1%}{marks.get(cell, '')} |"
        )
    return "\n".join(lines + _summary(cells, tolerance, notes))


def render_grid(cells: Sequence[Cell], tolerance: float) -> str:
    """The same cells laid out like docs/h200-measurements.md's tables: ``measured → simulated
    (error)``."""
    marks, notes = _marks(cells, tolerance)
    lines: list[str] = []
    for table in dict.fromkeys(c.table for c in cells):
        group = [c for c in cells if c.table == table]
        columns = list(dict.fromkeys(c.column for c in group))
        by_key = {(c.row, c.column): c for c in group}
        lines.append(f"| {table} | " + " | ".join(columns) + " |")
        lines.append("| --- |" + " ---: |" * len(columns))
        for row in dict.fromkeys(c.row for c in group):
            texts = [
                f"{_number(c.measured)} → {_number(c.simulated)} ({c.error:+.0%}{marks.get(c, '')})"
                for c in (by_key[(row, column)] for column in columns)
            ]
            lines.append(f"| {row} | " + " | ".join(texts) + " |")
        lines.append("")
    return "\n".join(lines[:-1] + _summary(cells, tolerance, notes))


def failures(cells: Sequence[Cell], tolerance: float) -> list[Cell]:
    """Cells off by more than the tolerance that are not documented in ``UNREPRODUCED``."""
    return [c for c in cells if abs(c.error) > tolerance and c.key not in UNREPRODUCED]


def _tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < 10:
        raise argparse.ArgumentTypeError(f"tolerance must be in (0, 10): {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = EnvArgumentParser(
        prog="python -m lab.calibration.sim_fidelity",
        description="Replay the H200 workloads of docs/h200-measurements.md on the simulator, "
                    "cell by cell.",
        env_prefix="GOVERNOR_SIM_FIDELITY_",
    )
    parser.add_argument("--preset", default="llama-3-8b@h200", help="sim preset to check")
    parser.add_argument("--seed", type=int, default=0, help="simulation seed")
    parser.add_argument(
        "--grid",
        action="store_true",
        help="lay the cells out like the measured tables instead of one row per cell",
    )
    parser.add_argument(
        "--tolerance",
        type=_tolerance,
        default=0.15,
        help="largest relative error allowed per cell (0.15 = ±15%%)",
    )
    loop = parser.add_argument_group(
        "closed loop (validation)", "vllm bench serve's random workload in closed loop, compared "
        "with a table the preset was not fitted to")
    loop.add_argument("--closed-loop", action="store_true",
                      help="replay the closed-loop workload instead of the calibration tables")
    loop.add_argument("--concurrency", type=_counts, default=(1, 32, 128, 256),
                      help="streams kept in flight, comma-separated")
    loop.add_argument("--input-len", type=_count, default=512, help="prompt tokens, exactly")
    loop.add_argument("--output-len", type=_count, default=256,
                      help="output tokens, exactly (EOS ignored)")
    loop.add_argument("--num-prompts-per-stream", type=_count, default=2,
                      help="prompts each stream sends, one after the other")
    loop.add_argument("--measured", type=Path, default=closed_loop.DEFAULT_MEASURED,
                      help="the measured table to compare with (skipped when absent)")
    loop.add_argument("--itl-slo", type=parse_duration_seconds, default=0.12,
                      help="the inter-token P99 SLO whose breach must be reproduced")
    loop.add_argument("--real-time", action="store_true",
                      help="measure the sim in real time, as governor serve runs it, over HTTP "
                           "on this machine, instead of replaying it in virtual time")
    loop.add_argument("--logs", type=Path, default=Path("bench-out/sim-real-time.log"),
                      help="with --real-time: the service's log")
    return parser


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def _counts(text: str) -> tuple[int, ...]:
    values = tuple(_count(part) for part in text.split(",") if part.strip())
    if not values:
        raise argparse.ArgumentTypeError(f"expected comma-separated counts: {text!r}")
    return values


def _real_time_rows(args: argparse.Namespace, preset: Preset,
                    loops: Sequence[closed_loop.ClosedLoop]) -> list[closed_loop.Row]:
    args.logs.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    with closed_loop_live.sim_service(preset.name, args.logs, seed=args.seed) as url:
        for loop in loops:
            rows.append(closed_loop_live.measure(url, preset.name, loop, seed=args.seed))
            print(json.dumps({"mode": "real-time", **rows[-1].as_dict()}), flush=True)
    return rows


def closed_loop_main(args: argparse.Namespace, preset: Preset) -> int:
    """One JSON line per concurrency, the comparison table, and the out-of-sample summary."""
    loops = [closed_loop.ClosedLoop(c, args.input_len, args.output_len,
                                    args.num_prompts_per_stream) for c in args.concurrency]
    if args.real_time:
        rows = _real_time_rows(args, preset, loops)
    else:
        rows = [closed_loop.simulate(preset, loop, seed=args.seed) for loop in loops]
        for row in rows:
            print(json.dumps(row.as_dict()))
    measured = closed_loop.Measured.load(args.measured) if args.measured.is_file() else None
    if measured is None:
        print(f"\n(no measured table at {args.measured}: nothing to compare with)")
        return 0
    comparisons = [closed_loop.Comparison(r, measured.rows[r.concurrency], args.itl_slo)
                   for r in rows if r.concurrency in measured.rows]
    mode = (f"real time, over HTTP on this machine ({os.cpu_count()} cores)" if args.real_time
            else "virtual time")
    print(f"\nvalidation (out of sample), {mode}: sim preset {preset.name} against "
          f"{measured.source}, which the preset was not fitted to\n")
    print(closed_loop.render(rows, comparisons, args.itl_slo))
    print(json.dumps({"validation": closed_loop.summary(comparisons),
                      "mode": "real-time" if args.real_time else "virtual"}))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        preset = get_preset(args.preset)
    except ValueError as exc:
        print(f"sim-fidelity: {exc}", file=sys.stderr)
        return 2
    if args.closed_loop:
        return closed_loop_main(args, preset)
    started = time.perf_counter()
    cells = all_cells(preset, args.seed)
    wall = time.perf_counter() - started
    print(f"sim preset {preset.name} vs real vLLM 0.25 on an H200 "
          "(docs/h200-measurements.md), ms\n")
    print(render_grid(cells, args.tolerance) if args.grid else render(cells, args.tolerance))
    speed = budget_run(preset, BUDGET_ROWS[0], seed=args.seed)
    rate = speed.generation_tokens / speed.wall_seconds
    target = SPEED_TARGET_TOKENS_PER_SECOND
    print(
        f"\nreplayed every table in {wall:.1f} s; virtual time ran "
        f"{WARMUP_SECONDS + WINDOW_SECONDS:g} simulated s of the first budget row "
        f"({speed.generation_tokens:,} tokens) in {speed.wall_seconds:.2f} s: "
        f"{rate:,.0f} generated tokens per wall second "
        f"({rate / target:.1f}x the {target:,} target)"
    )
    print("calibration: the preset was fitted to these tables, so this is its fit, not a test of "
          "it; --closed-loop compares it with a table kept out of the fit")
    return 1 if failures(cells, args.tolerance) else 0


if __name__ == "__main__":
    sys.exit(main())
