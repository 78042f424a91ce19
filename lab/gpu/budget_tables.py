"""The H200 budget-vs-latency tables (docs/h200-measurements.md), re-measured with raw samples.

One ``AsyncLLM`` in this process (vLLM's in-process frontend, as the original H200 run was
timed), one engine start:

1. a lone prompt of each length on the idle engine (TTFT, one output token);
2. the decoders start: a closed loop of 64 requests (128-token prompts, 256 tokens each);
3. a lone prompt of each length among the busy decoders, no other long prompt: its prefill
   step's length on the engine core's clock and in the decoders' ITL;
4. per workload (2000-token prompts at 4/s, then 7000 at 1/s, 256 tokens each): for each
   repetition, for each budget (8192, 2048, 512) moved live with the project's retuning plugin,
   a settle, then a 20 s window.

Recorded throughout (``budget_recorder``): every output event of every request
(``RequestOutputKind.DELTA``: time, request, tokens), a loop-lag probe (a task sleeping 1 ms),
every garbage-collection pass (the heap is frozen after start-up, as vLLM's API server does),
and the engine core's own step log (``budget_steplog``). The raw samples are saved compressed per
phase; ``budget_summary.json`` and ``budget_summary.md`` hold the cells of every window next to
the original H200 run's (``budget_analysis``). On the H200, where the command must end within
10 minutes, windows that would not finish before ``--deadline-seconds`` are skipped and listed.

    PYTHONPATH=. python -m lab.gpu.budget_tables --model DIR --out OUT          # GPU
    PYTHONPATH=. python -m lab.gpu.budget_tables --model DIR --out OUT --smoke  # CPU

vLLM must find the project's ``vllm.general_plugins`` entry point (the project installed, or its
wheel unpacked on ``PYTHONPATH``); under ``spawn`` this module also registers the plugin and the
step log in the engine-core process, which imports it as ``__mp_main__``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import json
import random
import sys
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from governor.common.cli import EnvArgumentParser, parse_duration_seconds
from governor.contracts.engine_core import EngineCoreReport
from lab.gpu import budget_steplog
from lab.gpu.budget_analysis import (
    Window,
    index,
    lone_rows,
    prompt_rows,
    render,
    render_lone,
    render_prompts,
    stats_as_json,
    window_stats,
)
from lab.gpu.budget_recorder import Kind, Recorder, load, save
from lab.gpu.budget_workload import H200, SMOKE, Plan, exact_prompt

PROBE_SECONDS = 0.001
# Left at the deadline for stopping the load, the last save and the summary.
RESERVE_SECONDS = 12.0


def patch_engine_core() -> None:
    """The utility methods this run calls in the engine-core process."""
    from governor.vllm import plugin

    plugin.register()
    budget_steplog.install()


if __name__ == "__mp_main__":  # the engine-core process, started by vLLM with spawn
    patch_engine_core()


def log(*parts: Any) -> None:
    print(f"[{time.strftime('%H:%M:%S')}]", *parts, flush=True)


class Bench:
    """The engine, the recorder and the load of one run."""

    def __init__(self, llm: Any, recorder: Recorder, plan: Plan,
                 prompts: dict[int, list[str]]) -> None:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        self.llm, self.recorder, self.plan, self.prompts = llm, recorder, plan, prompts
        def params(max_tokens: int) -> Any:
            return SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True,
                                  output_kind=RequestOutputKind.DELTA)

        self._params = params
        self.stopping = False
        self.prompt_checks: dict[int, int] = {}  # tokens vLLM counted, per intended length
        self._tasks: set[asyncio.Task[None]] = set()
        self._used = 0

    def prompt(self, length: int) -> str:
        self._used += 1
        choices = self.prompts[length]
        return choices[self._used % len(choices)]

    async def one(self, kind: Kind, length: int, max_tokens: int, slot: int = -1) -> None:
        """Send one request and record every output event until it finishes."""
        prompt = self.prompt(length)
        rid = self.recorder.request(kind, slot=slot, prompt_tokens=length, max_tokens=max_tokens)
        first = True
        async for out in self.llm.generate(prompt, self._params(max_tokens), request_id=f"r{rid}"):
            self.recorder.event(rid, len(out.outputs[0].token_ids))
            if first:
                first = False
                self.prompt_checks.setdefault(length, len(out.prompt_token_ids or ()))

    def spawn(self, step: Awaitable[None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(step)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def decoder(self, slot: int, first_tokens: int) -> None:
        tokens = first_tokens
        while not self.stopping:
            await self.one(Kind.DECODER, self.plan.decoder_prompt_tokens, tokens, slot)
            tokens = self.plan.decoder_output_tokens

    def start_decoders(self) -> None:
        rng = random.Random(0)
        for slot in range(self.plan.decoders):
            # Staggered lives, so that the decoders do not finish (and prefill) together.
            self.spawn(self.decoder(slot, rng.randint(1, self.plan.decoder_output_tokens)))

    async def arrivals(self, length: int, per_second: float, stop: asyncio.Event) -> None:
        """Long prompts at a steady interval (not Poisson), as the original H200 run has them."""
        due = self.recorder.now()
        while not stop.is_set():
            self.spawn(self.one(Kind.LONG, length, self.plan.long_output_tokens))
            due += 1.0 / per_second
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, due - self.recorder.now()))

    async def lone(self, kind: Kind, length: int, runs: int) -> None:
        for _ in range(runs):
            started = self.recorder.now()
            await self.one(kind, length, 1)
            await asyncio.sleep(max(0.0, started + self.plan.lone_gap_seconds
                                    - self.recorder.now()))

    async def probe(self, stop: asyncio.Event) -> None:
        """How late the loop wakes a task that asked for 1 ms: the frontend's stalls."""
        while not stop.is_set():
            before = self.recorder.now()
            await asyncio.sleep(PROBE_SECONDS)
            woke = self.recorder.now()
            self.recorder.probe(woke, woke - before - PROBE_SECONDS)

    async def utility(self, name: str, *args: Any) -> Any:
        return await self.llm.engine_core.call_utility_async(name, *args)

    async def set_budget(self, budget: int) -> dict[str, Any]:
        from governor.vllm.plugin import UTILITY_SET

        report: dict[str, Any] = await self.utility(UTILITY_SET, None, budget)
        if report.get("max_num_batched_tokens") != budget:
            raise RuntimeError(f"the engine did not take budget {budget}: {report}")
        return report

    async def collect_steps(self) -> None:
        self.recorder.steps(await self.utility(budget_steplog.UTILITY_STEPS))

    async def stop(self, grace_seconds: float) -> None:
        """Let every request in flight finish (the decoders stop looping), then cancel."""
        self.stopping = True
        pending = list(self._tasks)
        if pending:
            _, late = await asyncio.wait(pending, timeout=grace_seconds)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)


@dataclasses.dataclass
class Measurement:
    """What the summary needs besides the raw samples."""

    plan: Plan
    out: Path
    deadline: float  # on the monotonic clock
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)
    windows: list[Window] = dataclasses.field(default_factory=list)
    window_reports: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    skipped: list[str] = dataclasses.field(default_factory=list)
    raw_files: list[str] = dataclasses.field(default_factory=list)

    def save_phase(self, name: str, recorder: Recorder) -> None:
        path = self.out / f"budget_raw_{name}.npz"
        save(path, recorder.cut())
        self.raw_files.append(path.name)
        log(f"saved {path.name} ({path.stat().st_size / 2**20:.1f} MiB)")

    def time_left(self) -> float:
        return self.deadline - time.monotonic()


async def workload(bench: Bench, run: Measurement, length: int, per_second: float) -> None:
    plan = bench.plan
    stop = asyncio.Event()
    feeder = asyncio.ensure_future(bench.arrivals(length, per_second, stop))
    await bench.set_budget(plan.start_budget)
    await asyncio.sleep(plan.warmup_seconds)
    for rep in range(1, plan.repetitions + 1):
        for budget in plan.budgets:
            name = f"{length} @ {per_second:g}/s, budget {budget}, rep {rep}"
            need = plan.settle_seconds + plan.window_seconds + RESERVE_SECONDS
            if run.time_left() < need:
                run.skipped.append(name)
                log("skipped (deadline):", name)
                continue
            await bench.set_budget(budget)
            await asyncio.sleep(plan.settle_seconds)
            await bench.collect_steps()
            start = bench.recorder.now()
            await asyncio.sleep(plan.window_seconds)
            window = Window(length, budget, rep, start, bench.recorder.now())
            from governor.vllm.plugin import UTILITY_REPORT

            report = await bench.utility(UTILITY_REPORT)
            await bench.collect_steps()
            run.windows.append(window)
            run.window_reports.append({"window": name, **report})
            retuning = EngineCoreReport.from_dict(report).retuning
            if retuning is not None:
                log(f"{name}: {retuning.steps_since_change} steps, the largest "
                    f"{retuning.largest_step_tokens_since_change} tokens")
    stop.set()
    await feeder


def _engine_args(model: str, plan: Plan) -> Any:
    from vllm.engine.arg_utils import AsyncEngineArgs

    known = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
    kwargs = {k: v for k, v in plan.engine if k in known}
    dropped = sorted(k for k, _ in plan.engine if k not in known)
    if dropped:
        log("this vLLM's AsyncEngineArgs lacks", dropped, "- left out")
    return AsyncEngineArgs(model=model, **kwargs)


def _versions(llm: Any) -> dict[str, Any]:
    import torch
    import vllm

    cache = llm.vllm_config.cache_config
    blocks = getattr(cache, "num_gpu_blocks", None)
    return {
        "vllm": vllm.__version__, "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "kv_cache_tokens": blocks * cache.block_size if blocks else None,
        "async_scheduling": getattr(llm.vllm_config.scheduler_config, "async_scheduling", None),
        "python": sys.version.split()[0],
    }


def _prompts(model: Path, plan: Plan) -> dict[int, list[str]]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    lengths = {plan.decoder_prompt_tokens, *plan.lone_prompt_tokens,
               *(length for length, _ in plan.workloads)}
    return {n: [exact_prompt(tokenizer, n, seed=1000 * n + i) for i in range(plan.distinct_prompts)]
            for n in sorted(lengths)}


async def _phases(bench: Bench, run: Measurement) -> None:
    plan = bench.plan
    await bench.collect_steps()  # starts the engine core's step log
    await bench.set_budget(plan.start_budget)
    warmups = [bench.spawn(bench.one(Kind.WARMUP, plan.decoder_prompt_tokens, 16))
               for _ in range(8)]
    await asyncio.gather(*warmups)
    await bench.one(Kind.WARMUP, max(plan.lone_prompt_tokens), 4)
    for length in plan.lone_prompt_tokens:
        await bench.lone(Kind.LONE_IDLE, length, plan.lone_idle_runs)
    bench.start_decoders()
    await asyncio.sleep(plan.warmup_seconds)
    for length in plan.lone_prompt_tokens:
        await bench.lone(Kind.LONE_BUSY, length, plan.lone_busy_runs)
    await bench.collect_steps()
    run.save_phase("lone", bench.recorder)
    for length, per_second in plan.workloads:
        await workload(bench, run, length, per_second)
        await bench.collect_steps()
        run.save_phase(f"w{length}", bench.recorder)


def _summary(run: Measurement, bench: Bench) -> None:
    ix = index(load([run.out / name for name in run.raw_files]))
    stats = [window_stats(ix, w) for w in run.windows]
    lone = lone_rows(ix)
    prompts = prompt_rows(ix, run.windows)
    summary = {
        "meta": run.meta, "plan": dataclasses.asdict(run.plan),
        "windows": [dataclasses.asdict(w) for w in run.windows],
        "window_reports": run.window_reports, "skipped": run.skipped,
        "prompt_tokens_seen_by_vllm": bench.prompt_checks, "raw_files": run.raw_files,
        "stats": stats_as_json(stats), "lone": [dataclasses.asdict(r) for r in lone],
        "prompts": [dataclasses.asdict(r) for r in prompts],
    }
    (run.out / "budget_summary.json").write_text(json.dumps(summary, indent=1, default=str))
    text = "\n\n".join([render(stats), render_lone(lone), render_prompts(prompts)])
    (run.out / "budget_summary.md").write_text(text + "\n")
    print(text, flush=True)


async def measure(model: Path, run: Measurement) -> None:
    from vllm.v1.engine.async_llm import AsyncLLM

    patch_engine_core()
    prompts = _prompts(model, run.plan)
    started = time.monotonic()
    llm = AsyncLLM.from_engine_args(_engine_args(str(model), run.plan))
    run.meta = {"engine_start_seconds": round(time.monotonic() - started, 1), **_versions(llm)}
    log("engine ready:", run.meta)
    # As vLLM's API server does after start-up: nothing built so far is ever collected again.
    gc.collect()
    gc.freeze()
    run.meta["gc_frozen_objects"] = gc.get_freeze_count()
    recorder = Recorder(time.monotonic)
    bench = Bench(llm, recorder, run.plan, prompts)
    stop_gc = recorder.watch_gc()
    probe_stop = asyncio.Event()
    probe = asyncio.ensure_future(bench.probe(probe_stop))
    try:
        await _phases(bench, run)
    except Exception as error:
        # A GPU call is too scarce to lose what was measured before a failure.
        run.meta["error"] = f"{type(error).__name__}: {error}"
        log("measurement failed:", run.meta["error"])
        run.save_phase("partial", recorder)
    finally:
        probe_stop.set()
        await probe
        await bench.stop(grace_seconds=10.0)
        stop_gc()
    _summary(run, bench)
    llm.shutdown()


def _full_vocab(model: Path) -> Path:
    """The model with every id decodable (see ``vllm_proof.full_vocab_model``): the random
    model's tokens then detokenize to text, like the real Llama-3 tokenizer's."""
    from lab.gpu.vllm_proof import full_vocab_model

    return full_vocab_model(model, Path(tempfile.mkdtemp()) / "model")


def _parser() -> EnvArgumentParser:
    parser = EnvArgumentParser(prog="python -m lab.gpu.budget_tables",
                               description=__doc__.split("\n\n")[0],
                               env_prefix="GOVERNOR_BUDGET_")
    parser.add_argument("--model", type=Path, required=True,
                        help="model directory (config.json, tokenizer.json); weights are dummy")
    parser.add_argument("--out", type=Path, required=True, help="where results are written")
    parser.add_argument("--smoke", action="store_true",
                        help="small sizes and CPU engine options, to rehearse without a GPU")
    parser.add_argument("--deadline-seconds", type=parse_duration_seconds, default=540.0,
                        help="skip windows that would end later than this after the start "
                             "(seconds, or 9m)")
    return parser


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()
    args = _parser().parse_args(argv)
    if not (args.model / "config.json").is_file():
        print(f"budget_tables: {args.model} has no config.json", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    run = Measurement(plan=SMOKE if args.smoke else H200, out=args.out,
              deadline=started + args.deadline_seconds)
    asyncio.run(measure(_full_vocab(args.model), run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
