"""How much one scrape of each job may bring: the ``sample_limit`` of every scrape job in the
generated ``prometheus.yml`` and the ``sampleLimit`` of every generated ServiceMonitor and
PodMonitor, from this one table.

Past its limit Prometheus fails that scrape (``up`` 0) rather than store its samples, so a
target exposing label values without end costs its own series, never the server's memory or
every other target's. Each limit is about ten times what the job exposes at its largest: a vLLM
server of eight data-parallel ranks, a node of eight GPUs and their processes, a controller of
256 targets with every label at its bound, the probe's few targets.
"""

from __future__ import annotations

from typing import Final

# The jobs by their role (the spec's ``targets`` names them: ``targets.inference.job``, …;
# the probe's job is ``probe``).
SAMPLE_LIMITS: Final = {"inference": 50_000, "gpu": 20_000, "controller": 200_000,
                        "probe": 20_000}
