"""``governor bench exporter``: scrape latency with N fake GPUs, beside prometheus_client's server.

Both servers run the same sampler over the same simulated GPUs in their own process; they differ
only in how a scrape is answered:

* ``governor``: ``governor exporter`` itself (aiohttp; the body is rendered once per snapshot);
* ``baseline``: ``prometheus_client.start_http_server`` (threaded WSGI) with a collector that
  renders the latest snapshot on every scrape, as Python exporters are usually written.

The scrapers fire together every ``--period`` (0.1 s: bursts of N simultaneous scrapes, the
way several Prometheus servers and federation land on one target), each on its own keep-alive
connection (a thin HTTP/1.1 client, see :class:`Connection`); ``--period 0`` scrapes back to
back instead (throughput). Every answer is checked: status 200, one ``gpu_up`` per GPU, all up
(after the round; one in 25 is also parsed in full). Scrapes ask for gzip, as Prometheus does.
Latency is client-side; server CPU per scrape is read from ``/proc``.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from governor.bench.progress import Progress
from governor.common.cli import EnvArgumentParser, parse_duration_seconds, positive_int
from governor.common.commands import Exporter
from governor.common.process import Child, free_port, running
from governor.contracts.endpoints import LOCAL_HOST
from governor.contracts.metrics import gpu as m
from governor.exporters.config import package_version
from governor.exporters.gpu.collector import age_family, families
from governor.exporters.gpu.fake import FakeNvml
from governor.exporters.gpu.sampler import Sampler, SamplerConfig

_UP_LINE = f"\n{m.UP.name}{{".encode()
_FULL_PARSE_EVERY = 25


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0-100) of a non-empty sample."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def check_body(status: int, body: bytes, gpus: int, *, full: bool) -> str | None:
    """Why this answer is wrong, or None. ``full`` also parses the whole exposition.

    The quick check (status, one ``gpu_up`` series per GPU) runs for every scrape inside the
    timed loop, so it is a C-speed count; the rest runs on the kept bodies after the round.
    """
    if status != 200:
        return f"status {status}"
    if body.count(_UP_LINE) != gpus:
        return f"expected {gpus} gpu_up series, got {body.count(_UP_LINE)}"
    if not full:
        return None
    ups = [line for line in body.split(b"\n") if line.startswith(_UP_LINE[1:])]
    if not all(line.endswith(b" 1.0") for line in ups):
        return "a gpu_up series is not 1"
    try:
        names = {family.name for family in text_string_to_metric_families(body.decode())}
    except ValueError as exc:
        return f"unparsable exposition: {exc}"
    if m.UP.name not in names or m.SM_ACTIVE.name not in names:
        return "exposition lacks gpu_up or gpu_sm_active_ratio"
    return None


# ---- the baseline server -------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class LiveCollector:
    """Renders the latest snapshot on every scrape (the baseline's way)."""

    sampler: Sampler
    version: str

    def collect(self) -> Iterable[Metric]:
        snapshot = self.sampler.latest()
        age = time.monotonic() - snapshot.taken_monotonic
        return [*families(snapshot, fresh=True, version=self.version), age_family(age)]


def serve_baseline(port: int, gpus: int, interval_seconds: float) -> None:
    """prometheus_client's threaded server over the same sampler; runs until SIGTERM."""
    sampler = Sampler(FakeNvml(gpus), SamplerConfig(interval_seconds=interval_seconds,
                                                    source="fake"))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LiveCollector(sampler, package_version()))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    sampler_thread = threading.Thread(target=sampler.run, args=(stop,), daemon=True)
    sampler_thread.start()
    start_http_server(port, addr="127.0.0.1", registry=registry)
    stop.wait()
    sampler_thread.join(5)
    sampler.close()


# ---- the client ----------------------------------------------------------------------------------

@dataclass
class Round:
    scrapers: int
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # Every answer, checked after the round so that checking delays no other scraper.
    kept: list[tuple[bytes, bool]] = field(default_factory=list)  # (body, gzipped)
    wall_seconds: float = 0.0
    server_cpu_seconds: float = 0.0
    # How late the client's own 5 ms sleeps wake: what the machine, not the server, adds.
    loop_lag: list[float] = field(default_factory=list)

    def verify_kept(self, gpus: int) -> None:
        for i, (body, gzipped) in enumerate(self.kept):
            try:
                plain = gzip.decompress(body) if gzipped else body
            except (OSError, EOFError) as exc:
                self.errors.append(f"bad gzip: {exc}")
                continue
            problem = check_body(200, plain, gpus, full=i % _FULL_PARSE_EVERY == 0)
            if problem:
                self.errors.append(problem)
        self.kept = []

    def summary(self) -> dict[str, Any]:
        lat = self.latencies or [math.nan]
        return {
            "scrapers": self.scrapers, "scrapes": len(self.latencies), "errors": len(self.errors),
            "first_errors": self.errors[:3],
            "p50_ms": percentile(lat, 50) * 1e3, "p99_ms": percentile(lat, 99) * 1e3,
            "max_ms": max(lat) * 1e3,
            "scrapes_per_second": len(self.latencies) / max(self.wall_seconds, 1e-9),
            "server_cpu_us_per_scrape": self.server_cpu_seconds / max(len(self.latencies), 1) * 1e6,
            "client_loop_lag_p99_ms": percentile(self.loop_lag or [math.nan], 99) * 1e3,
        }


class Connection:
    """One keep-alive HTTP/1.1 connection that sends GETs and reads Content-Length bodies.

    Deliberately thin: aiohttp's client spends more CPU per request than the server under test
    (about 0.3 ms on a small VM), and with the client on the same CPUs that would be measured as
    the exporter's latency. The server still sees an ordinary HTTP client.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 request: bytes, address: tuple[str, int]) -> None:
        self._reader, self._writer, self._request = reader, writer, request
        self._address = address

    @classmethod
    async def open(cls, url: str) -> Connection:
        parts = urlsplit(url)
        address = (parts.hostname or "127.0.0.1", parts.port or 80)
        reader, writer = await asyncio.open_connection(*address)
        request = (f"GET {parts.path or '/'} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                   "Accept: text/plain\r\nAccept-Encoding: gzip\r\n\r\n").encode()
        return cls(reader, writer, request, address)

    async def get(self) -> tuple[int, bytes, bool]:
        """(status, body as sent, whether it is gzipped): Prometheus asks for gzip, so do we."""
        if self._writer.is_closing():  # the server closed the last one: a client reconnects
            self._reader, self._writer = await asyncio.open_connection(*self._address)
        self._writer.write(self._request)
        head = await self._reader.readuntil(b"\r\n\r\n")
        status_line, *lines = head.split(b"\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(b":") for h in lines)}
        if b"content-length" in headers:
            body = await self._reader.readexactly(int(headers[b"content-length"]))
        else:
            body = await self._reader.read()
        if status_line.startswith(b"HTTP/1.0") or headers.get(b"connection") == b"close":
            self._writer.close()  # prometheus_client's wsgiref server closes every connection
        return int(status_line.split()[1]), body, headers.get(b"content-encoding") == b"gzip"

    def close(self) -> None:
        self._writer.close()


async def _scraper(url: str, count: int, gpus: int, period: float, result: Round,
                   opened: list[int], go: asyncio.Event) -> None:
    connection = await Connection.open(url)
    opened.append(1)
    try:
        await go.wait()
        origin = time.perf_counter()
        for i in range(count):
            delay = origin + i * period - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            started = time.perf_counter()
            try:
                status, body, gzipped = await asyncio.wait_for(connection.get(), 30)
            except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as exc:
                result.errors.append(f"{type(exc).__name__}: {exc}")
                connection.close()
                connection = await Connection.open(url)
                continue
            result.latencies.append(time.perf_counter() - started)
            if status != 200:
                result.errors.append(f"status {status}")
            else:
                result.kept.append((body, gzipped))
    finally:
        connection.close()


async def _lag_probe(lags: list[float], nap: float = 0.005) -> None:
    while True:
        started = time.perf_counter()
        await asyncio.sleep(nap)
        lags.append(max(0.0, time.perf_counter() - started - nap))


async def scrape_round(
    url: str, scrapers: int, per_scraper: int, gpus: int, period: float = 0.0, pid: int = 0
) -> Round:
    result = Round(scrapers)
    go = asyncio.Event()
    opened: list[int] = []
    tasks = [asyncio.create_task(_scraper(url, per_scraper, gpus, period, result, opened, go))
             for _ in range(scrapers)]
    deadline = time.perf_counter() + 30
    while len(opened) < scrapers and time.perf_counter() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.01)  # every connection open before the first scrape
    cpu_before = cpu_seconds(pid) if pid else 0.0
    started = time.perf_counter()
    go.set()
    probe = asyncio.create_task(_lag_probe(result.loop_lag))
    await asyncio.gather(*tasks)
    result.wall_seconds = time.perf_counter() - started
    probe.cancel()
    result.server_cpu_seconds = cpu_seconds(pid) - cpu_before if pid else 0.0
    result.verify_kept(gpus)
    return result


# ---- orchestration -------------------------------------------------------------------------------

def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process, from /proc (Linux)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def _server(name: str, argv: list[str], url: str, gpus: int) -> Iterator[Child]:
    """The server, ready once ``url`` serves every GPU; its output is dropped."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path])}
    child = Child(name, argv, url, Path(os.devnull), env=env,
                  accept=lambda body: check_body(200, body, gpus, full=True) is None)
    with running([child], limit_seconds=30) as (server,):
        yield server


def run(gpus: int, scraper_counts: Sequence[int], requests: int, period: float) -> dict[str, Any]:
    port_ours, port_base = free_port(), free_port()
    servers = {
        "governor": Exporter(fake_gpus=gpus, host=LOCAL_HOST, port=port_ours,
                             log_level="warning").python(),
        "baseline": [sys.executable, "-m", "governor.bench.exporter", "--serve-baseline",
                     "--gpus", str(gpus), "--port", str(port_base)],
    }
    urls = {"governor": f"http://127.0.0.1:{port_ours}/metrics",
            "baseline": f"http://127.0.0.1:{port_base}/metrics"}
    report: dict[str, Any] = {"gpus": gpus, "requests_per_round": requests, "period": period,
                              "cpus": os.cpu_count(), "load_average_before": os.getloadavg()[0],
                              "rows": []}
    results: dict[str, list[dict[str, Any]]] = {}
    progress = Progress("governor bench exporter", len(servers) * len(scraper_counts))
    for name, argv in servers.items():  # one server at a time: they must not share the CPUs
        with _server(name, argv, urls[name], gpus) as server:
            asyncio.run(scrape_round(urls[name], 4, 25, gpus))  # warm-up: connections, caches
            results[name] = []
            for n in scraper_counts:
                results[name].append(asyncio.run(scrape_round(
                    urls[name], n, max(1, requests // n), gpus, period, server.pid)).summary())
                progress.done(f"{name} with {n} scrapers")
    report["load_average_after"] = os.getloadavg()[0]
    for i, n in enumerate(scraper_counts):
        report["rows"].append({"scrapers": n, "governor": results["governor"][i],
                               "baseline": results["baseline"][i]})
    return report


def render(report: dict[str, Any]) -> str:
    period = report["period"]
    mode = f"bursts every {period * 1e3:g} ms" if period else "back to back"
    lines = [f"scrape latency, {report['gpus']} fake GPUs, scrapers firing together ({mode}), "
             "client-side ms; baseline = prometheus_client's threaded server rendering each scrape",
             f"machine: {report['cpus']} CPUs, load average {report['load_average_before']:.1f} "
             f"before, {report['load_average_after']:.1f} after (client and server share them)",
             f"{'scrapers':>8} {'server':<9} {'p50':>7} {'p99':>7} {'max':>8} {'cpu us':>7} "
             f"{'scrapes':>7} {'errors':>6} {'client lag p99':>14}"]
    for row in report["rows"]:
        for name in ("governor", "baseline"):
            r = row[name]
            lines.append(f"{row['scrapers']:>8} {name:<9} {r['p50_ms']:>7.2f} {r['p99_ms']:>7.2f} "
                         f"{r['max_ms']:>8.2f} {r['server_cpu_us_per_scrape']:>7.0f} "
                         f"{r['scrapes']:>7} {r['errors']:>6} "
                         f"{r['client_loop_lag_p99_ms']:>14.2f}")
        ours, base = row["governor"], row["baseline"]
        cpu_ratio = base["server_cpu_us_per_scrape"] / max(ours["server_cpu_us_per_scrape"], 1e-9)
        lines.append(f"{'':>8} {'ratio':<9} {base['p50_ms'] / ours['p50_ms']:>6.1f}x "
                     f"{base['p99_ms'] / ours['p99_ms']:>6.1f}x {'':>8} {cpu_ratio:>6.1f}x"
                     "  (baseline / governor)")
    return "\n".join(lines)


def period_seconds(text: str) -> float:
    """A duration, or 0 for back-to-back scraping."""
    return 0.0 if text.strip() in {"0", "0s", "0ms"} else parse_duration_seconds(text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = EnvArgumentParser(prog="governor bench exporter", description=__doc__,
                               env_prefix="GOVERNOR_BENCH_")
    parser.add_argument("--gpus", type=positive_int, default=8, help="simulated GPUs")
    parser.add_argument("--scrapers", type=positive_int, action="append", default=None,
                        help="concurrent scrapers, repeatable (default 10 and 100)")
    parser.add_argument("--requests", type=positive_int, default=1000,
                        help="scrapes per round, shared among the scrapers")
    parser.add_argument("--period", type=period_seconds, default=0.1,
                        help="each scraper scrapes every period (0: back to back)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON only")
    parser.add_argument("--serve-baseline", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=positive_int, default=9401, help=argparse.SUPPRESS)
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.serve_baseline:
        serve_baseline(args.port, args.gpus, 1.0)
        return 0
    report = run(args.gpus, args.scrapers or [10, 100], args.requests, args.period)
    if not args.json:
        print(render(report))
    print(json.dumps(report))
    failed = sum(row[name]["errors"] for row in report["rows"] for name in ("governor", "baseline"))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
