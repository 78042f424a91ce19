"""The versions an inference server runs on, as one info series on its ``/metrics``.

vLLM exports its cache configuration (``vllm:cache_config_info``) but not its own version, nor
torch's or the CUDA torch was built for; the GPU exporter reads the driver and the CUDA version
it supports from NVML (``gpu_info``). ``governor serve`` and the admin middleware inside stock
``vllm serve`` add the rest, so a board can say what a fleet runs::

    >>> RUNTIME_INFO.series
    'governor_runtime_info'
"""

from __future__ import annotations

from typing import Final

from governor.contracts.declaration import Metric

LABEL_VLLM_VERSION: Final = "vllm_version"
LABEL_TORCH_VERSION: Final = "torch_version"
LABEL_TORCH_CUDA_VERSION: Final = "torch_cuda_version"
NONE: Final = "none"  # a package that is not installed (the sim engine needs neither)
RUNTIME_INFO: Final = Metric(
    "governor_runtime", "info",
    "Versions the inference server runs on: vLLM, torch, and the CUDA torch was built for "
    "(none: not installed, or a CPU build).", "",
    (LABEL_VLLM_VERSION, LABEL_TORCH_VERSION, LABEL_TORCH_CUDA_VERSION))
