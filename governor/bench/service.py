"""``governor bench service``: the service's own overhead, next to a bare aiohttp baseline.

The service runs on the sim engine in zero-cost mode (``--time-scale 0``: engine steps take no
time), so every CPU second the server process spends is overhead: HTTP, validation, the sim's
bookkeeping, SSE encoding, metrics with exemplars and spans. The same load then runs against
``bare_server`` (aiohttp streaming the same chunks and nothing else). Reported per concurrency:
server CPU µs per streamed token and per request, client-side latency P50/P99, throughput, and
the ratio to the baseline.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from governor.bench.load import LoadSpec, run_load, summarize
from governor.bench.progress import Progress
from governor.common.cli import EnvArgumentParser, positive_int
from governor.common.commands import Serve
from governor.common.process import Child, free_port, running
from governor.contracts.endpoints import LOCAL_HOST

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process, from /proc (Linux)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


@dataclass(frozen=True)
class Server:
    name: str
    child: Child
    url: str
    model: str


@contextlib.contextmanager
def start(name: str, argv: list[str], port: int, model: str) -> Iterator[Server]:
    url = f"http://127.0.0.1:{port}"
    # Its stdout is dropped; warnings (stderr) reach the terminal, apart from the report.
    child = Child(name, argv, f"{url}/health", Path(os.devnull),
                  env={**os.environ, "GOVERNOR_SERVE_LOG_LEVEL": "warning"}, log_stderr=False)
    with running([child]):
        yield Server(name, child, url, model)


def measure(server: Server, concurrency: int, requests: int, max_tokens: int) -> dict[str, Any]:
    spec = LoadSpec(url=server.url, model=server.model, requests=requests,
                    concurrency=concurrency, max_tokens=max_tokens)
    before = cpu_seconds(server.child.pid)
    load = asyncio.run(run_load(spec))
    cpu = cpu_seconds(server.child.pid) - before
    summary = summarize(load)
    tokens = summary["output_tokens_per_second"] * summary["wall_seconds"]
    summary["server_cpu_seconds"] = cpu
    summary["server_cpu_us_per_token"] = cpu / tokens * 1e6 if tokens else None
    summary["server_cpu_us_per_request"] = cpu / max(summary["ok"], 1) * 1e6
    return summary


def run(concurrencies: Sequence[int], requests: int, tokens: int,
        request_log: Path | None = None) -> dict[str, Any]:
    """Each concurrency against governor serve and the bare baseline; with ``request_log``, also
    against governor serve writing its request log there (``governor+log``)."""
    port = free_port()
    serve = Serve(engine="sim", preset="tiny", time_scale=0, port=port, host=LOCAL_HOST,
                  served_model_name="bench", max_in_flight=4096)
    bare = [sys.executable, "-m", "governor.bench.bare_server", "--port", str(port + 1)]
    report: dict[str, Any] = {"tokens_per_request": tokens, "rows": []}
    with contextlib.ExitStack() as stack:
        ours = stack.enter_context(start("governor", serve.python(), port, "bench"))
        base = stack.enter_context(start("bare-aiohttp", bare, port + 1, "bench"))
        servers = [ours, base]
        if request_log is not None:
            logged = dataclasses.replace(serve, port=port + 2,
                                     request_log=str(request_log)).python()
            servers.append(stack.enter_context(start("governor+log", logged, port + 2, "bench")))
        _measure_all(servers, concurrencies, requests, tokens, report)
    return report


def _measure_all(servers: Sequence[Server], concurrencies: Sequence[int], requests: int,
                 tokens: int, report: dict[str, Any]) -> None:
    for server in servers:
        measure(server, 8, 50, tokens)  # warm-up: imports, JIT-less caches, connections
    progress = Progress("governor bench service", len(servers) * len(concurrencies))
    for concurrency in concurrencies:
        row: dict[str, Any] = {"concurrency": concurrency}
        for server in servers:
            # Five times the requests for the one-token runs: /proc counts CPU in 10 ms
            # ticks, and a one-token request costs well under a millisecond.
            row[server.name] = {
                "stream": measure(server, concurrency, requests, tokens),
                "single_token": measure(server, concurrency, 5 * requests, 1),
            }
            progress.done(f"{server.name} at concurrency {concurrency}")
        report["rows"].append(row)


def _fmt(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}"


def render(report: dict[str, Any]) -> str:
    header = (f"{'conc':>4} {'server':<13} {'µs/token':>9} {'µs/req':>8} {'tok/s':>9} "
              f"{'req/s(1tok)':>11} {'p50 ms(1tok)':>12} {'p99 ms(1tok)':>12} {'ITL p99 ms':>10}")
    lines = [header]
    for row in report["rows"]:
        for name in ("governor", "governor+log", "bare-aiohttp"):
            if name not in row:
                continue
            stream, single = row[name]["stream"], row[name]["single_token"]
            lines.append(
                f"{row['concurrency']:>4} {name:<13} "
                f"{_fmt(stream['server_cpu_us_per_token']):>9} "
                f"{_fmt(single['server_cpu_us_per_request'], digits=0):>8} "
                f"{_fmt(stream['output_tokens_per_second'], digits=0):>9} "
                f"{_fmt(single['requests_per_second'], digits=0):>11} "
                f"{_fmt(single['latency_seconds']['p50'], 1e3, 2):>12} "
                f"{_fmt(single['latency_seconds']['p99'], 1e3, 2):>12} "
                f"{_fmt(stream['itl_seconds']['p99'], 1e3, 2):>10}")
        ours, base = row["governor"], row["bare-aiohttp"]
        ratio_token = ours["stream"]["server_cpu_us_per_token"] / base["stream"][
            "server_cpu_us_per_token"]
        ratio_request = ours["single_token"]["server_cpu_us_per_request"] / base["single_token"][
            "server_cpu_us_per_request"]
        lines.append(f"{'':>4} {'ratio':<13} {ratio_token:>8.2f}x {ratio_request:>7.2f}x")
        if "governor+log" in row:
            lines.append(_log_cost(row))
    return "\n".join(lines)


def _log_cost(row: dict[str, Any]) -> str:
    """governor+log against governor: what the request log costs, side by side."""
    with_log, without = row["governor+log"]["stream"], row["governor"]["stream"]
    itl = [s["itl_seconds"][q] for s in (with_log, without) for q in ("p50", "p99")]
    cpu = with_log["server_cpu_us_per_token"] / without["server_cpu_us_per_token"]
    return (f"{'':>4} {'log/no log':<13} {cpu:>8.2f}x  ITL p50 {itl[0] * 1e3:.2f} vs "
            f"{itl[2] * 1e3:.2f} ms ({itl[0] / itl[2]:.2f}x), p99 {itl[1] * 1e3:.2f} vs "
            f"{itl[3] * 1e3:.2f} ms ({itl[1] / itl[3]:.2f}x)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = EnvArgumentParser(prog="governor bench service", description=__doc__)
    parser.add_argument("--concurrency", type=positive_int, action="append", default=None,
                        help="client concurrency, repeatable (default 1 and 64)")
    parser.add_argument("--requests", type=positive_int, default=400,
                        help="requests per measurement")
    parser.add_argument("--tokens", type=positive_int, default=128,
                        help="streamed tokens per request")
    parser.add_argument("--json", action="store_true", help="print the report as JSON only")
    parser.add_argument("--request-log", type=Path, default=None, metavar="FILE",
                        help="also run governor serve --request-log FILE (governor+log) and "
                             "print what the log costs beside the run without it")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    report = run(args.concurrency or [1, 64], args.requests, args.tokens, args.request_log)
    if not args.json:
        print(render(report))
    print(json.dumps(report))
    return 0
