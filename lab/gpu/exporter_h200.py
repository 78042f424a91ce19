"""The GPU exporter on a real GPU: readings under load, sampling cost, and a scrape vs nvidia-smi.

Run on an NVIDIA machine (the H200 of the device tool), from the repository root::

    python -m lab.gpu.exporter_h200 --out OUT_DIR

1. Sampling cost: the exporter's own sampler over the real NVML, per GPU per round, CPU and wall,
   classic reads and the GPM tick apart (a run with GPM off is the difference), slow rounds apart;
   and the bare NVML calls it makes, for comparison with the cost of each call alone.
2. ``python -m governor.exporters`` against the GPU; scrapes while idle, during a bf16 matmul,
during a
   memory-bound copy (written as ``gpu_h200_{idle,matmul,copy}.prom``).
3. One scrape (keep-alive HTTP) against one ``nvidia-smi --query-gpu=<25 fields> --format=csv``
   (what nvidia_gpu_exporter runs per scrape), P50 over repeated runs, and the ratio.

``--fake`` runs the same flow on simulated GPUs without torch or nvidia-smi (a dry run for CI
machines). Results: ``gpu_h200_measurements.json`` and a summary on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # the repository: lab/gpu/ is two below it
sys.path.insert(0, str(ROOT))

from governor.common.commands import Exporter  # noqa: E402
from governor.common.process import Child, free_port, running  # noqa: E402 (after the path set-up)
from governor.contracts.endpoints import LOCAL_HOST  # noqa: E402
from governor.contracts.metrics import gpu as m  # noqa: E402
from governor.exporters.gpu import classic, fields, gpm  # noqa: E402 (after the path set-up above)
from governor.exporters.gpu import nvml as nv  # noqa: E402
from governor.exporters.gpu.fake import FakeNvml  # noqa: E402
from governor.exporters.gpu.sampler import Sampler, SamplerConfig  # noqa: E402

SMI_FIELDS = [
    "index", "uuid", "name", "driver_version", "pci.bus_id", "pstate", "temperature.gpu",
    "temperature.memory", "utilization.gpu", "utilization.memory", "memory.total", "memory.used",
    "memory.free", "memory.reserved", "power.draw", "power.limit", "enforced.power.limit",
    "clocks.sm", "clocks.mem", "clocks.gr", "clocks.video", "clocks_event_reasons.active",
    "ecc.errors.corrected.aggregate.total", "ecc.errors.uncorrected.aggregate.total",
    "pcie.link.gen.current",
]
SMI_SPARE_FIELDS = ["pcie.link.width.current", "clocks.max.sm", "clocks.max.mem", "fan.speed",
                    "persistence_mode", "compute_mode", "serial", "vbios_version"]


def p50(values: list[float]) -> float:
    return statistics.median(values)


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def timed(call: Callable[[], Any], repeat: int) -> dict[str, float]:
    """P50 wall and mean CPU of ``call`` in microseconds."""
    walls = []
    cpu_start = time.thread_time()
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        walls.append(time.perf_counter() - start)
    cpu = (time.thread_time() - cpu_start) / repeat
    return {"wall_us_p50": p50(walls) * 1e6, "cpu_us_mean": cpu * 1e6}


# ---- 1. sampling cost --------------------------------------------------------------------------

def sampler_cost(nvml: nv.NvmlApi, *, gpm_on: bool, rounds: int, source: str) -> dict[str, Any]:
    """Rounds 0.2 s apart with a slow round every fifth; CPU and wall per GPU per round."""
    config = SamplerConfig(interval_seconds=0.2, slow_interval_seconds=1.0, gpm=gpm_on, xid=False,
                           source=source)
    sampler = Sampler(nvml, config)
    fast_cpu: list[float] = []
    slow_cpu: list[float] = []
    fast_wall: list[float] = []
    slow_wall: list[float] = []
    phases: dict[str, list[float]] = {}
    try:
        sampler.tick()  # initialises NVML, seeds GPM
        time.sleep(0.2)
        gpus = max(sampler.latest().gpu_count, 1)
        for _ in range(rounds):
            cpu_start, wall_start = time.thread_time(), time.perf_counter()
            snapshot = sampler.tick()
            cpu, wall = time.thread_time() - cpu_start, time.perf_counter() - wall_start
            slow = dict(snapshot.phase_seconds)["slow"] > 0
            (slow_cpu if slow else fast_cpu).append(cpu / gpus)
            (slow_wall if slow else fast_wall).append(wall / gpus)
            if not slow:
                for phase, seconds in snapshot.phase_seconds:
                    phases.setdefault(phase, []).append(seconds / gpus)
            time.sleep(0.2)
        errors = dict(sampler.latest().errors)
    finally:
        sampler.close()
    return {
        "gpus": gpus,
        "fast_round_cpu_us_p50": p50(fast_cpu) * 1e6,
        "fast_round_wall_us_p50": p50(fast_wall) * 1e6,
        "slow_round_cpu_us_p50": p50(slow_cpu) * 1e6 if slow_cpu else None,
        "slow_round_wall_us_p50": p50(slow_wall) * 1e6 if slow_wall else None,
        "fast_round_phase_wall_us_p50": {k: p50(v) * 1e6 for k, v in phases.items()},
        "errors": {k: v for k, v in errors.items() if v},
        "rounds": {"fast": len(fast_cpu), "slow": len(slow_cpu)},
    }


def profile_rounds(nvml: nv.NvmlApi, source: str, rounds: int = 20) -> list[str]:
    """Where a fast round's time goes with the real driver: cProfile's top entries."""
    import cProfile
    import io
    import pstats

    sampler = Sampler(nvml, SamplerConfig(interval_seconds=0.2, slow_interval_seconds=3600,
                                          xid=False, source=source))
    profiler = cProfile.Profile()
    try:
        sampler.tick()
        for _ in range(rounds):
            time.sleep(0.2)
            profiler.enable()
            sampler.tick()
            profiler.disable()
    finally:
        sampler.close()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(15)
    return text.getvalue().splitlines()


def nvml_floor(nvml: nv.NvmlApi) -> dict[str, Any]:
    """The bare calls the sampler makes for one GPU, timed one by one."""
    nvml.nvmlInit()
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        calls: dict[str, Callable[[], Any]] = {
            reading.name: partial(reading.read, nvml, handle) for reading in classic.FAST
        }
        calls["processes"] = partial(nvml.nvmlDeviceGetComputeRunningProcesses, handle)
        out: dict[str, Any] = {name: timed(call, 200) for name, call in calls.items()}
        out["classic_total_wall_us"] = sum(v["wall_us_p50"] for v in out.values())
        for label, specs in (("fields_fast", fields.FAST), ("fields_slow", fields.SLOW)):
            ids = [spec.field_id for spec in specs]
            out[label] = timed(partial(nvml.nvmlDeviceGetFieldValues, handle, ids), 20)
            values = nvml.nvmlDeviceGetFieldValues(handle, ids)
            out[label]["per_field"] = {
                str(v.fieldId): {"nvmlReturn": int(v.nvmlReturn), "latencyUsec": int(v.latencyUsec)}
                for v in values
            }
        for label, reading in (("bar1", classic.SLOW[0]), ("power_limit", classic.SLOW[1])):
            out[label] = timed(partial(reading.read, nvml, handle), 50)
        out["gpm"] = gpm_floor(nvml, handle)
    finally:
        nvml.nvmlShutdown()
    return out


def gpm_floor(nvml: nv.NvmlApi, handle: Any) -> dict[str, Any]:
    if not gpm.supported(nvml, handle):
        return {"supported": False}
    out: dict[str, Any] = {"supported": True}
    for label, metrics in (("fast_6", gpm.FAST), ("slow_10", gpm.SLOW)):
        rotator = gpm.GpmRotator(nvml, lambda s: nvml.nvmlGpmSampleGet(handle, s), metrics)
        try:
            rotator.tick(False)
            ticks_cpu, ticks_wall = [], []
            for _ in range(15):
                time.sleep(0.11)  # GPM wants more than 100 ms between samples
                cpu, wall = time.thread_time(), time.perf_counter()
                result = rotator.tick(False)
                ticks_cpu.append(time.thread_time() - cpu)
                ticks_wall.append(time.perf_counter() - wall)
            out[label] = {"tick_wall_us_p50": p50(ticks_wall) * 1e6,
                          "tick_cpu_us_p50": p50(ticks_cpu) * 1e6,
                          "answered": len(result.fast), "failed": list(result.failed)}
        finally:
            rotator.close()
    sample = nvml.nvmlGpmSampleAlloc()
    try:
        out["sample_get"] = timed(lambda: nvml.nvmlGpmSampleGet(handle, sample), 50)
    finally:
        nvml.nvmlGpmSampleFree(sample)
    return out


def cold_costs(nvml: nv.NvmlApi, rounds: int = 15, gap: float = 0.2) -> dict[str, Any]:
    """Each call alone, once every ``gap`` seconds as the sampler makes it (NVML answers a call
    repeated back to back from a cache, which hides the real cost), P50 wall in microseconds."""
    nvml.nvmlInit()
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        calls: dict[str, Callable[[], Any]] = {
            r.name: partial(r.read, nvml, handle) for r in (*classic.FAST, *classic.SLOW)}
        calls["processes"] = partial(nvml.nvmlDeviceGetComputeRunningProcesses, handle)
        for spec in (*fields.FAST, *fields.SLOW):
            calls[spec.name] = partial(nvml.nvmlDeviceGetFieldValues, handle, [spec.field_id])
        calls["fields_fast_batch"] = partial(nvml.nvmlDeviceGetFieldValues, handle,
                                             [s.field_id for s in fields.FAST])
        walls: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(rounds):
            time.sleep(gap)
            for name, call in calls.items():
                start = time.perf_counter()
                call()
                walls[name].append(time.perf_counter() - start)
        out: dict[str, Any] = {name: round(p50(w) * 1e6, 1) for name, w in walls.items()}
        out["gpm_per_metric"] = gpm_per_metric(nvml, handle)
    finally:
        nvml.nvmlShutdown()
    return out


def gpm_per_metric(nvml: nv.NvmlApi, handle: Any) -> dict[str, float]:
    """nvmlGpmMetricsGet for one metric id at a time over the same pair of samples."""
    if not gpm.supported(nvml, handle):
        return {}
    first, second = nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()
    try:
        nvml.nvmlGpmSampleGet(handle, first)
        time.sleep(0.2)
        nvml.nvmlGpmSampleGet(handle, second)
        out = {}
        for metric in (*gpm.FAST, *gpm.SLOW):
            request = nvml.c_nvmlGpmMetricsGet_t()
            request.version, request.numMetrics = nv.GPM_METRICS_GET_VERSION, 1
            request.sample1, request.sample2 = first, second
            request.metrics[0].metricId = metric.metric_id
            walls = []
            for _ in range(5):
                start = time.perf_counter()
                nvml.nvmlGpmMetricsGet(request)
                walls.append(time.perf_counter() - start)
            out[str(metric.metric_id)] = round(p50(walls) * 1e6, 1)
        return out
    finally:
        nvml.nvmlGpmSampleFree(first)
        nvml.nvmlGpmSampleFree(second)


# ---- 2. the exporter under load ----------------------------------------------------------------

class Scraper:
    """A keep-alive HTTP/1.1 client that costs little, so the timing is the exporter's."""

    def __init__(self, port: int) -> None:
        self._sock = socket.create_connection(("127.0.0.1", port))
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buffer = b""

    def get(self, path: str = "/metrics", accept: str = "text/plain") -> tuple[int, bytes]:
        self._sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nAccept: {accept}\r\n\r\n".encode())
        while b"\r\n\r\n" not in self._buffer:
            self._buffer += self._recv()
        head, self._buffer = self._buffer.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n")
        length = next(int(line.split(b":")[1]) for line in lines[1:]
                      if line.lower().startswith(b"content-length:"))
        while len(self._buffer) < length:
            self._buffer += self._recv()
        body, self._buffer = self._buffer[:length], self._buffer[length:]
        return int(lines[0].split()[1]), body

    def _recv(self) -> bytes:
        chunk = self._sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("the exporter closed the connection")
        return chunk

    def close(self) -> None:
        self._sock.close()


@contextlib.contextmanager
def exporter(port: int, fake: int, log_path: Path) -> Iterator[Child]:
    argv = Exporter(fake_gpus=fake or None, host=LOCAL_HOST, port=port, interval="1s").python()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    # /health answers 200 when ok or degraded: either way it serves.
    child = Child("the exporter", argv, f"http://127.0.0.1:{port}/health", log_path, env=env,
                  cwd=ROOT, fresh_log=True, grace_seconds=15)
    with running([child], limit_seconds=60) as (started,):
        yield started


class Workload:
    """A GPU kernel loop in a thread: ``matmul`` (bf16 8192^3) or ``copy`` (2 GiB device copy)."""

    def __init__(self, kind: str) -> None:
        self.kind, self._stop, self.iterations = kind, threading.Event(), 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: str | None = None
        self.started = threading.Event()

    def _run(self) -> None:
        try:
            import torch

            if self.kind == "matmul":
                a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
                b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
                step: Callable[[], Any] = lambda: a @ b  # noqa: E731
            else:
                src = torch.empty(2 << 30, device="cuda", dtype=torch.uint8)
                dst = torch.empty_like(src)
                step = lambda: dst.copy_(src)  # noqa: E731
            torch.cuda.synchronize()
            self.started.set()
            self._began = time.perf_counter()
            while not self._stop.is_set():
                for _ in range(10):
                    step()
                torch.cuda.synchronize()
                self.iterations += 10
            self.seconds = time.perf_counter() - self._began
        except Exception as exc:  # recorded in the results; the other steps still run
            self.error = f"{type(exc).__name__}: {exc}"
            self.started.set()

    def __enter__(self) -> Workload:
        self._thread.start()
        self.started.wait(120)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def rate(self) -> dict[str, float]:
        seconds = getattr(self, "seconds", 0.0) or 1e-9
        if self.kind == "matmul":
            return {"tflops": 2 * 8192**3 * self.iterations / seconds / 1e12}
        return {"copy_tb_per_s_read_plus_write": 2 * (2 << 30) * self.iterations / seconds / 1e12}


def scrape_to(port: int, path: Path) -> dict[str, float]:
    scraper = Scraper(port)
    try:
        status, body = scraper.get()
    finally:
        scraper.close()
    path.write_bytes(body)
    if status != 200:
        raise RuntimeError(f"scrape answered {status}")
    return key_readings(body.decode())


def key_readings(text: str) -> dict[str, float]:
    """The readings of GPU 0 (and the exporter's own counters) that the summary quotes."""
    from prometheus_client.parser import text_string_to_metric_families

    wanted = {m.TENSOR_ACTIVE.name, m.DRAM_BANDWIDTH_UTILIZATION.name, m.SM_ACTIVE.name,
              m.SM_OCCUPANCY.name, m.UTILIZATION.name, m.POWER.name, m.EXPORTER_CPU.total,
              m.EXPORTER_COLLECTIONS.total}
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text) for sample in family.samples
        if sample.name in wanted and sample.labels.get(m.LABEL_GPU, "0") == "0"
    }


def health(port: int) -> Any:
    scraper = Scraper(port)
    try:
        status, body = scraper.get("/health", accept="application/json")
    finally:
        scraper.close()
    return {"status": status, "body": json.loads(body)}


# ---- 3. scrape vs nvidia-smi ---------------------------------------------------------------------

def scrape_timing(port: int, count: int) -> dict[str, float]:
    scraper = Scraper(port)
    walls = []
    try:
        for _ in range(20):
            scraper.get()
        for _ in range(count):
            start = time.perf_counter()
            status, _body = scraper.get()
            walls.append(time.perf_counter() - start)
            assert status == 200
    finally:
        scraper.close()
    return {"p50_ms": p50(walls) * 1e3, "p99_ms": p99(walls) * 1e3, "n": count}


def smi_fields() -> list[str]:
    """The 25 query fields, replacing any this driver's nvidia-smi rejects."""
    chosen = [f for f in SMI_FIELDS if _smi_ok([f])]
    for spare in SMI_SPARE_FIELDS:
        if len(chosen) >= 25:
            break
        if _smi_ok([spare]):
            chosen.append(spare)
    return chosen


def _smi_ok(query: list[str]) -> bool:
    done = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(query)}", "--format=csv"],
                          capture_output=True, timeout=30, check=False)
    return done.returncode == 0


def smi_timing(query: list[str], count: int) -> dict[str, Any]:
    argv = ["nvidia-smi", f"--query-gpu={','.join(query)}", "--format=csv"]
    walls = []
    for _ in range(count):
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, timeout=30, check=True)
        walls.append(time.perf_counter() - start)
    return {"p50_ms": p50(walls) * 1e3, "p99_ms": p99(walls) * 1e3, "n": count,
            "fields": len(query)}


# ---- driver ------------------------------------------------------------------------------------

def step(results: dict[str, Any], name: str, out: Path, action: Callable[[], Any]) -> Any:
    """Run one step; an exception is recorded and the next step still runs."""
    started = time.perf_counter()
    try:
        value = action()
        results[name] = value
        return value
    except Exception as exc:
        results[name] = {"error": f"{type(exc).__name__}: {exc}"}
        return None
    finally:
        results.setdefault("step_seconds", {})[name] = round(time.perf_counter() - started, 2)
        (out / "gpu_h200_measurements.json").write_text(json.dumps(results, indent=2, default=str))
        print(f"[{name}] {json.dumps(results[name], default=str)[:600]}", flush=True)


def load_nvml(fake: int) -> nv.NvmlApi:
    return FakeNvml(fake) if fake else nv.import_pynvml()


def environment(nvml: nv.NvmlApi) -> dict[str, Any]:
    nvml.nvmlInit()
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        info = {"gpu": nv.text(nvml.nvmlDeviceGetName(handle)),
                "gpus": nvml.nvmlDeviceGetCount(),
                "driver": nv.text(nvml.nvmlSystemGetDriverVersion()),
                "python": platform.python_version(), "cpus": os.cpu_count()}
    finally:
        nvml.nvmlShutdown()
    for package in ("aiohttp", "prometheus_client", "pynvml", "torch"):
        with contextlib.suppress(Exception):
            module = __import__(package)
            info[package] = getattr(module, "__version__", getattr(module, "__file__", "?"))
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for scrapes and results")
    parser.add_argument("--fake", type=int, default=0, help="dry run on N simulated GPUs")
    parser.add_argument("--workload-seconds", type=float, default=4.0,
                        help="time under each workload before its scrape (>= 2 rounds)")
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    nvml = load_nvml(args.fake)
    source = "fake" if args.fake else "nvml"
    results: dict[str, Any] = {}
    step(results, "environment", out, lambda: environment(nvml))
    step(results, "nvml_floor", out, lambda: nvml_floor(nvml))
    step(results, "cold_costs", out, lambda: cold_costs(nvml))
    step(results, "profile", out, lambda: profile_rounds(nvml, source))
    step(results, "sampler_gpm_on", out, lambda: sampler_cost(nvml, gpm_on=True, rounds=40,
                                                              source=source))
    step(results, "sampler_gpm_off", out, lambda: sampler_cost(nvml, gpm_on=False, rounds=40,
                                                               source=source))
    port = free_port()
    with exporter(port, args.fake, out / "gpu_h200_exporter.log"):
        time.sleep(2.5)  # two rounds: the first GPM ratios need two samples
        step(results, "health", out, lambda: health(port))
        step(results, "scrape_idle", out, lambda: scrape_to(port, out / "gpu_h200_idle.prom"))
        gpu_work = not args.fake
        for kind in ("matmul", "copy"):
            def run_under(kind: str = kind) -> dict[str, Any]:
                if not gpu_work:
                    time.sleep(args.workload_seconds)
                    return scrape_to(port, out / f"gpu_h200_{kind}.prom")
                with Workload(kind) as work:
                    if work.error:
                        raise RuntimeError(work.error)
                    time.sleep(args.workload_seconds)
                    readings = scrape_to(port, out / f"gpu_h200_{kind}.prom")
                return {**readings, **work.rate()}
            step(results, f"scrape_{kind}", out, run_under)
        time.sleep(1.5)  # back to idle before timing
        step(results, "scrape_timing", out, lambda: scrape_timing(port, 1000))
    if shutil.which("nvidia-smi"):
        query = step(results, "smi_fields", out, smi_fields) or SMI_FIELDS
        step(results, "smi_timing", out, lambda: smi_timing(query, 20))
    summarize(results, out)
    return 0


def summarize(results: dict[str, Any], out: Path) -> None:
    summary: dict[str, Any] = {}
    with contextlib.suppress(KeyError, TypeError, ZeroDivisionError):
        on, off = results["sampler_gpm_on"], results["sampler_gpm_off"]
        fast_on, fast_off = on["fast_round_cpu_us_p50"], off["fast_round_cpu_us_p50"]
        slow_on = on["slow_round_cpu_us_p50"] or fast_on
        # Interval 1 s; a slow round every S seconds replaces one fast round.
        for slow_every in (10, 30, 60):
            per_second_us = ((slow_every - 1) * fast_on + slow_on) / slow_every
            summary[f"core_percent_per_gpu_at_1s_slow_{slow_every}s"] = per_second_us / 1e4
        summary["fast_round_core_percent_per_gpu_at_1s"] = fast_on / 1e4
        summary["classic_round_cpu_us_per_gpu"] = fast_off  # the whole round with GPM off
        summary["gpm_round_cost_difference_us_per_gpu"] = fast_on - fast_off
        summary["fast_round_cpu_us_per_gpu"] = fast_on
        summary["slow_round_cpu_us_per_gpu"] = slow_on
    with contextlib.suppress(KeyError, TypeError, ZeroDivisionError):
        floor = results["nvml_floor"]
        summary["gpm_tick_6_metrics_cpu_us"] = floor["gpm"]["fast_6"]["tick_cpu_us_p50"]
        summary["gpm_tick_6_metrics_wall_us"] = floor["gpm"]["fast_6"]["tick_wall_us_p50"]
        summary["gpm_tick_10_slow_metrics_wall_us"] = floor["gpm"]["slow_10"]["tick_wall_us_p50"]
        summary["classic_calls_wall_us"] = floor["classic_total_wall_us"]
    with contextlib.suppress(KeyError, TypeError, ZeroDivisionError):
        summary["scrape_p50_ms"] = results["scrape_timing"]["p50_ms"]
        summary["nvidia_smi_p50_ms"] = results["smi_timing"]["p50_ms"]
        summary["smi_over_scrape"] = summary["nvidia_smi_p50_ms"] / summary["scrape_p50_ms"]
    results["summary"] = summary
    (out / "gpu_h200_measurements.json").write_text(json.dumps(results, indent=2, default=str))
    print("SUMMARY " + json.dumps(summary), flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
