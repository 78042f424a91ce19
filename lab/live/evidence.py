"""What a live drill records at each poll beside the verdict: the verdict's own inputs (the
``verdict:*`` series the rules recorded) and a few raw readings of the engine and the GPU, so a
result can say *why* the verdict said what it said.

Reading returns Prometheus's samples; shaping them is pure and tested without a Prometheus::

    >>> flatten([{"metric": {"__name__": "verdict:slowdown:ratio", "cause": "gpu_shared",
    ...                      "instance": "127.0.0.1:8000"}, "value": [0, "1.93421"]}])
    {'verdict:slowdown:ratio{cause=gpu_shared}': 1.934}
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from governor.common.prometheus_api import PrometheusError, PrometheusHTTP
from governor.contracts.declaration import Metric
from governor.contracts.metrics import gpu, vllm
from governor.contracts.metrics import verdict as v

# The verdict's inputs and intermediate series a drill's cause turns on.
INPUTS: Final[tuple[Metric, ...]] = (
    v.BURN, v.CLIENT_QUANTILE, v.EXCESS, v.ENGINE_ITL_QUANTILE, v.ENGINE_ITL_MEDIAN,
    v.ENGINE_ITL_MEDIAN_BASELINE, v.STEP_TOKENS, v.RUNNING, v.WAITING, v.PREEMPTIONS,
    v.KV_USAGE, v.TTFT_PART, v.GPU_SM_ACTIVE, v.GPU_TENSOR_ACTIVE, v.GPU_DRAM_ACTIVE,
    v.GPU_CLOCK_DEFICIT, v.GPU_COTENANT, v.SLOWDOWN, v.FAULT,
)
# Labels that tell one series of an input from another (the instance is the one target's).
_KEY_LABELS: Final = ("slo", v.LABEL_CAUSE, v.LABEL_PART, v.LABEL_REASON)
_MIB: Final = 1024**2

# Raw readings: the engine's preemptions so far, the GPU's memory, its processes holding
# memory, its SM clock, power, and the clock-event reasons held now.
RAW: Final[Mapping[str, str]] = {
    "preemptions_total": f"sum({vllm.NUM_PREEMPTIONS.total})",
    "gpu_memory_used_gib": f"sum({gpu.MEMORY_USED.name}) / {1024**3}",
    "gpu_processes_over_256mib": f"count({gpu.PROCESS_MEMORY_USED.name} > {256 * _MIB})",
    "gpu_process_sm_ratio_max": f"max({gpu.PROCESS_SM_UTILIZATION.name})",
    "gpu_sm_clock_mhz": f'max({gpu.CLOCK.name}{{{gpu.LABEL_CLOCK}="sm"}}) / 1e6',
    "gpu_power_watts": f"max({gpu.POWER.name})",
    "gpu_clock_reasons": f"{gpu.CLOCK_EVENT_ACTIVE.name} == 1",
}


def inputs_selector() -> str:
    """One selector for every input series (a regular expression over the names)."""
    names = "|".join(re.escape(metric.name) for metric in INPUTS)
    return f'{{__name__=~"{names}"}}'


def _rounded(value: float) -> float:
    return float(f"{value:.4g}")


def flatten(samples: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Samples as ``name{label=value,…}`` → value (4 significant digits; NaN left out)."""
    out: dict[str, float] = {}
    for sample in samples:
        labels = sample.get("metric") or {}
        try:
            value = float(sample["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        if math.isnan(value):
            continue
        keys = ",".join(f"{k}={labels[k]}" for k in _KEY_LABELS if k in labels)
        name = str(labels.get("__name__", "?")) + (f"{{{keys}}}" if keys else "")
        out[name] = _rounded(value) if math.isfinite(value) else value
    return dict(sorted(out.items()))


def reasons(samples: Iterable[Mapping[str, Any]]) -> list[str]:
    """The clock-event reasons held now, by name.

    >>> reasons([{"metric": {"reason": "sw_power_cap"}, "value": [0, "1"]}])
    ['sw_power_cap']
    """
    return sorted({str((s.get("metric") or {}).get(gpu.LABEL_REASON, "?")) for s in samples})


def read(prometheus: PrometheusHTTP) -> dict[str, Any]:
    """The inputs and the raw readings now; an ``error`` key for what could not be read."""
    row: dict[str, Any] = {}
    try:
        row["inputs"] = flatten(prometheus.instant(inputs_selector()))
        for name, query in RAW.items():
            samples = prometheus.instant(query)
            if name == "gpu_clock_reasons":
                row[name] = reasons(samples)
            else:
                values = flatten(samples)
                row[name] = next(iter(values.values()), None)
    except (OSError, PrometheusError, ValueError) as exc:
        row["error"] = str(exc)[:200]
    return row
