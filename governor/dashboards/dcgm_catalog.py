"""The tables of docs/dcgm.md, printed from the declarations and the board itself
(``python -m governor.dashboards.dcgm_catalog``), so the documentation cannot drift from them:
every dcgm-exporter field Governor reads under each release's name, and which panel of the GPU
board reads which names."""

from __future__ import annotations

import json
import sys
from typing import Any, Final

from governor.contracts.metrics import dcgm
from governor.contracts.promql import format_number
from governor.dashboards.dcgm_board import dcgm_board
from governor.dashboards.readback import panels
from governor.dashboards.render import dashboard_json
from governor.slo.fleet import SOURCE_DCGM, GpuTarget, Targets
from governor.slo.model import SPEC_VERSION, SloSpec

PERIOD_SECONDS: Final = 30 * 86400

READ_FROM: Final = {
    dcgm.FROM_CSV: "4.5.3-4.8.2 CSV",
    dcgm.FROM_HEADER: "DCGM 4.6.1 header",
    dcgm.FROM_NOTES: "release notes",
    dcgm.FROM_DCGM_4_7: "DCGM 4.7 reference (unverified)",
}
RELEASE_TITLES: Final = ("≤ 4.8", "4.9", "4.10")


def _named(reading: dcgm.Reading, release: str, previous: str | None) -> str:
    field = reading.in_release(release)
    if field is None:
        return "—"
    if previous == field.name:
        return "unchanged"
    unit = f" ({field.unit})" if field.unit else ""
    return f"`{field.name}`{unit}"


def _reading_row(reading: dcgm.Reading) -> str:
    cells, previous = [], None
    for release in dcgm.RELEASES:
        cells.append(_named(reading, release, previous))
        field = reading.in_release(release)
        previous = field.name if field else None
    factors = sorted({f"`* {format_number(f.to_base)}`" for f in reading.fields
                      if f.to_base != 1})
    ids = " → ".join(dict.fromkeys(str(f.field_id) for f in reversed(reading.fields)))
    sources = ", ".join(dict.fromkeys(READ_FROM[f.source] for f in reversed(reading.fields)))
    default = "yes" if reading.default else "add the row"
    return (f"| {reading.what} | {' | '.join(cells)} | {', '.join(factors) or '—'} | {ids} "
            f"| {default} | {sources} |")


def readings_table() -> str:
    """Every field Governor reads: its name in each release, the factor to Governor's base
    unit, DCGM's field id, whether the default CSV collects it, and where its names were read."""
    rows = [f"| reading | {' | '.join(RELEASE_TITLES)} | to Governor's unit | DCGM id "
            "| default CSV | names read from |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    rows += [_reading_row(reading) for reading in (*dcgm.READINGS, *dcgm.UNPINNED)]
    return "\n".join(rows)


def _board() -> dict[str, Any]:
    """The GPU board of a spec whose GPUs are dcgm-exporter's (what it reads is all the same)."""
    spec = SloSpec(SPEC_VERSION, "inference", PERIOD_SECONDS, (),
                   targets=Targets(gpu=GpuTarget("dcgm", source=SOURCE_DCGM)))
    loaded: dict[str, Any] = json.loads(dashboard_json(dcgm_board(spec, "slo.yaml").build()))
    return loaded


def _panel_row(panel: dict[str, Any]) -> str:
    if panel["type"] == "text":
        return f"| {panel['title']} | not in DCGM | not in DCGM | not in DCGM |"
    text = "\n".join(target["expr"] for target in panel.get("targets", []))
    cells = []
    for release in dcgm.RELEASES:
        names = [field.name for reading in (*dcgm.READINGS, *dcgm.UNPINNED)
                 if (field := reading.in_release(release)) is not None
                 and f"{field.name}{{" in text]
        recorded = "the GPU state rules (health.yml)" if "gpu:health" in text else None
        cells.append(", ".join(f"`{name}`" for name in names) or recorded or "Prometheus's own")
    return f"| {panel['title']} | {' | '.join(cells)} |"


def panels_table() -> str:
    """Which names of each release every panel of the GPU board reads."""
    rows = [f"| panel | {' | '.join(RELEASE_TITLES)} |", "| --- | --- | --- | --- |"]
    rows += [_panel_row(panel) for panel in panels(_board())]
    return "\n".join(rows)


if __name__ == "__main__":
    sys.stdout.write(readings_table() + "\n\n" + panels_table() + "\n")
