"""The metric table of docs/exporter.md, printed from the declarations the collector exposes.

Every ``gpu_*`` metric's type, help, labels, NVML source, DCGM counterpart and cadence are
declared once, in :mod:`governor.contracts.metrics.gpu`; the table is printed from there
(``python -m governor.exporters.gpu.catalog``), so the documentation cannot drift from the code.
"""

from __future__ import annotations

import sys

from governor.contracts.metrics import gpu as m


def _row(metric: m.GpuMetric) -> str:
    labels = ", ".join(metric.extra_labels) or "—"
    return (f"| `{metric.series}` | {metric.kind} | {labels} | {metric.nvml or '—'} "
            f"| {metric.dcgm or '—'} | {metric.cadence} |")


def markdown_table() -> str:
    """The metric table of docs/exporter.md (``python -m governor.exporters.gpu.catalog``)."""
    rows = ["| metric | type | labels | NVML source | dcgm-exporter (`DCGM_FI_…`) | cadence |",
            "| --- | --- | --- | --- | --- | --- |"]
    rows += [_row(metric) for metric in (*m.HEALTH, *m.PER_GPU)]
    return "\n".join(rows)


if __name__ == "__main__":
    sys.stdout.write(markdown_table() + "\n")
