"""``governor bench hostile``: a well-behaved stream's inter-token latency, alone and while
hostile clients flood the service with 4 MiB prompts.

The service runs the simulated ``llama-3-8b@h200`` in real time, with a body limit that lets a
4 MiB prompt through to the service's own checks. First one client streams chats back to back
and its inter-token latency (ITL) is measured at the client; then the same client runs again
while 20 others, in a process of their own, send 4 MiB prompts as fast as they are answered.
Each such prompt is read, decoded and validated in the service's text threads and refused
(400 ``context_length_exceeded``) by its length in bytes, before it is tokenized. The two ITL
distributions are printed side by side with the difference; the target is a P99 rise under
10 ms::

    governor bench hostile                        # about a minute
    governor bench hostile --tokenizer-threads 2  # the service with two text threads
    governor bench hostile --json                 # the report as JSON only

The hostile clients run in a process of their own at the lowest CPU priority, standing in for
clients on other machines: on a small machine, what is measured is the service's cost of their
prompts, not the cost of generating them.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from multiprocessing.synchronize import Event
from typing import Any

import aiohttp
import numpy as np

from governor.bench.load import LoadSpec, run_load
from governor.bench.progress import Progress
from governor.bench.service import free_port, start
from governor.common.cli import EnvArgumentParser, positive_int
from governor.inference.config import ServiceConfig

MODEL = "bench"
PRESET = "llama-3-8b@h200"
TARGET_RISE_SECONDS = 0.010
MIB = 1024 * 1024


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


def run(clients: int, prompt_bytes: int, requests: int, tokens: int,
        tokenizer_threads: int) -> dict[str, Any]:
    port = free_port()
    argv = [sys.executable, "-m", "governor", "serve", "--engine", "sim", "--preset", PRESET,
            "--served-model-name", MODEL, "--port", str(port), "--host", "127.0.0.1",
            "--max-body-bytes", str(prompt_bytes + MIB),
            "--tokenizer-threads", str(tokenizer_threads)]
    progress = Progress("governor bench hostile", 3)
    report: dict[str, Any] = {"preset": PRESET, "clients": clients, "prompt_bytes": prompt_bytes,
                              "requests": requests, "tokens": tokens,
                              "tokenizer_threads": tokenizer_threads, "cpus": os.cpu_count()}
    with start("governor", argv, port, MODEL) as server:
        measure_stream(server.url, 2, tokens)  # warm-up
        progress.done("warm-up")
        report["alone"] = measure_stream(server.url, requests, tokens)
        progress.done("alone")
        report.update(_under_flood(server.url, clients, prompt_bytes, requests, tokens))
        progress.done(f"beside {clients} clients sending {prompt_bytes / MIB:g} MiB prompts")
    report["p99_rise_seconds"] = report["flood"]["p99"] - report["alone"]["p99"]
    report["target_met"] = report["p99_rise_seconds"] < TARGET_RISE_SECONDS
    return report


def _under_flood(url: str, clients: int, prompt_bytes: int, requests: int,
                 tokens: int) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    results: multiprocessing.Queue[dict[str, int]] = context.Queue()
    flooder = context.Process(target=flood, args=(url, clients, prompt_bytes, stop, results),
                              name="hostile-clients")
    flooder.start()
    started = time.monotonic()
    try:
        time.sleep(3.0)  # the flood at full speed before the measurement starts
        measured = measure_stream(url, requests, tokens)
    finally:
        stop.set()
    answers = results.get(timeout=180)
    seconds = time.monotonic() - started
    flooder.join(timeout=30)
    sent = sum(answers.values())
    return {"flood": measured, "flood_answers": answers, "flood_seconds": seconds,
            "flood_mib_per_second": sent * prompt_bytes / MIB / seconds}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def render(report: dict[str, Any]) -> str:
    alone, flood_ = report["alone"], report["flood"]
    lines = [
        f"one stream of {report['tokens']} tokens at a time, {report['requests']} streams per "
        f"run, sim {report['preset']} in real time, {report['tokenizer_threads']} text "
        f"thread(s), {report['cpus']} CPUs",
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
    parser = EnvArgumentParser(prog="governor bench hostile", description=__doc__)
    parser.add_argument("--clients", type=positive_int, default=20,
                        help="hostile clients sending large prompts")
    parser.add_argument("--prompt-mib", type=positive_int, default=4,
                        help="size of each hostile prompt, MiB")
    parser.add_argument("--requests", type=positive_int, default=20,
                        help="streams measured per run")
    parser.add_argument("--tokens", type=positive_int, default=200,
                        help="tokens per measured stream")
    parser.add_argument("--tokenizer-threads", type=positive_int,
                        default=ServiceConfig().tokenizer_threads,
                        help="the service's --tokenizer-threads")
    parser.add_argument("--json", action="store_true", help="print the report as JSON only")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    report = run(args.clients, args.prompt_mib * MIB, args.requests, args.tokens,
                 args.tokenizer_threads)
    if not args.json:
        print(render(report))
    print(json.dumps(report))
    return 0
