"""Sim fidelity: replay REFERENCE.md §6's H200 workloads in virtual time, cell by cell.

``python -m inference.engines.sim.fidelity`` (or ``governor bench sim-fidelity``) prints every
measured figure next to the simulated one and the relative error, and exits 1 when a cell is off
by more than the tolerance. The workloads, as §6 describes them:

* decode: B requests of 128-token prompts and 256 new tokens submitted together
  (``max_num_seqs`` 256, budget 8192); ITL percentiles over every token, decode tokens/s;
* prefill: one request alone, 1 output token; TTFT;
* budget: 64 requests decoding continuously while long prompts (2000 tokens at 4/s or 7000 at
  1/s, 1 output token) arrive at a steady rate; ITL of the decoders and TTFT of the long
  prompts over a 20 s window after a warm-up, at budgets 8192 / 2048 / 512.

§6 leaves the decoders' own lengths open; they are ``DECODER_PROMPT_TOKENS`` prompts that
generate ``DECODER_OUTPUT_TOKENS`` each and are replaced by a fresh one when they finish (a
closed loop of 64 clients), started at staggered points of their lives so that they do not
finish together. Prefix caching is off, as in the measured runs.
"""

from __future__ import annotations

import argparse
import itertools
import math
import random
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from common.cli import EnvArgumentParser
from inference.engines.base import BatchingLimits
from inference.engines.sim.presets import Preset, get_preset
from inference.engines.sim.virtual import RequestRecord, VirtualSim

MS = 1e-3
DECODER_COUNT = 64
WARMUP_SECONDS = 10.0
WINDOW_SECONDS = 20.0
MEASURED_MAX_NUM_SEQS = 256
MEASURED_BUDGET = 8192

# REFERENCE.md §6: real vLLM 0.25 on an H200, Llama-3-8B shape.
DECODE_BATCHES = (1, 8, 32, 64, 128, 256)
DECODE_ITL_P50_MS = (4.85, 5.00, 5.47, 6.07, 7.45, 11.24)
DECODE_ITL_P99_MS = (5.49, 5.74, 6.00, 6.94, 8.77, 13.93)
DECODE_TOKENS_PER_SECOND = (206.0, 1600.0, 5854.0, 10552.0, 17193.0, 22772.0)
PREFILL_PROMPTS = (128, 512, 1024, 2048, 4096, 8000)
PREFILL_TTFT_MS = (11.8, 16.3, 28.9, 51.8, 101.9, 211.5)
BUDGET_COLUMNS = ("ITL p50", "ITL p90", "ITL p99", "ITL max", "TTFT p50", "TTFT p99")


@dataclass(frozen=True, slots=True)
class DecoderWorkload:
    """What §6 leaves open about the budget runs' requests (our reconstruction)."""

    decoder_prompt_tokens: int = 128
    decoder_output_tokens: int = 256
    long_prompt_output_tokens: int = 1


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


def budget_run(
    preset: Preset, row: BudgetRow, *, seed: int, workload: DecoderWorkload = DecoderWorkload()
) -> tuple[list[float], list[float]]:
    """The decoders' ITLs and the long prompts' TTFTs (seconds) in the measured window."""
    decoder_prompt = workload.decoder_prompt_tokens
    decoder_output = workload.decoder_output_tokens
    rng = random.Random(seed)
    decoders: set[str] = set()

    def replace_finished(sim: VirtualSim, record: RequestRecord) -> None:
        if record.request_id in decoders:
            decoders.add(
                sim.submit(arrival=sim.now, prompt=decoder_prompt, output_tokens=decoder_output)
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
    return itls, ttfts


def budget_cells(
    preset: Preset, seed: int, workload: DecoderWorkload = DecoderWorkload()
) -> Iterator[Cell]:
    for row in BUDGET_ROWS:
        itls, ttfts = budget_run(preset, row, seed=seed, workload=workload)
        simulated = [
            *_percentiles_ms(itls, (50, 90, 99, 100)),
            *_percentiles_ms(ttfts, (50, 99)),
        ]
        name = f"{row.prompt_tokens} @ {row.prompts_per_second:g}/s, budget {row.budget}"
        for column, measured, value in zip(BUDGET_COLUMNS, row.measured_ms, simulated, strict=True):
            yield Cell("budget", name, column, measured, value)


def all_cells(preset: Preset, seed: int = 0) -> list[Cell]:
    return [*decode_cells(preset, seed), *prefill_cells(preset, seed), *budget_cells(preset, seed)]


def render(cells: Sequence[Cell], tolerance: float) -> str:
    """A Markdown table: measured, simulated and error of every cell."""
    lines = [
        "| table | row | figure | measured | simulated | error |",
        "| --- | --- | --- | ---: | ---: | ---: |",
    ]
    for cell in cells:
        flag = "" if abs(cell.error) <= tolerance else " ✗"
        lines.append(
            f"| {cell.table} | {cell.row} | {cell.column} | {cell.measured:,.2f} | "
            f"{cell.simulated:,.2f} | {cell.error:+.1%}{flag} |"
        )
    worst = max(cells, key=lambda c: abs(c.error))
    lines.append("")
    lines.append(
        f"{sum(abs(c.error) <= tolerance for c in cells)}/{len(cells)} cells within "
        f"±{tolerance:.0%}; worst {worst.error:+.1%} ({worst.row}, {worst.column})"
    )
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = EnvArgumentParser(
        prog="governor bench sim-fidelity",
        description="Replay REFERENCE.md §6's H200 workloads on the simulator, cell by cell.",
        env_prefix="GOVERNOR_SIM_FIDELITY_",
    )
    parser.add_argument("--preset", default="llama-3-8b@h200", help="sim preset to check")
    parser.add_argument("--seed", type=int, default=0, help="simulation seed")
    parser.add_argument(
        "--tolerance", type=float, default=0.15, help="largest relative error allowed per cell"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        preset = get_preset(args.preset)
    except ValueError as exc:
        print(f"sim-fidelity: {exc}", file=sys.stderr)
        return 2
    cells = all_cells(preset, args.seed)
    print(f"sim preset {preset.name} vs real vLLM 0.25 on an H200 (REFERENCE.md §6), ms\n")
    print(render(cells, args.tolerance))
    return 0 if all(abs(c.error) <= args.tolerance for c in cells) else 1


if __name__ == "__main__":
    sys.exit(main())
