"""``governor_runtime_info`` on stock vLLM's ``/metrics``: the versions of vLLM, torch and
torch's CUDA, from the admin middleware (one series, value 1).

A gauge rather than prometheus_client's Info, so that with ``--api-server-count`` above 1
(vLLM's multiprocess registry) every API process writes the same series and ``/metrics`` shows
it once; a second middleware in one process finds it registered and leaves it::

    export_runtime_info(REGISTRY)
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

from governor.common.versions import runtime_versions
from governor.contracts.metrics.runtime import RUNTIME_INFO


def export_runtime_info(registry: CollectorRegistry) -> bool:
    """Set the series on ``registry``; False where it already is (another middleware)."""
    versions = runtime_versions()
    try:
        gauge = Gauge(RUNTIME_INFO.series, RUNTIME_INFO.help, list(versions), registry=registry,
                      multiprocess_mode="max")
    except ValueError:  # registered by an earlier middleware of this process
        return False
    gauge.labels(**versions).set(1)
    return True
