"""The GPU board on dcgm-exporter (targets.gpu.source: dcgm): Governor's panels where DCGM has
the field, every release's names in one unit, and "Not in DCGM" where it has none."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from governor.contracts.metrics import dcgm, gpu_health
from governor.contracts.metrics import gpu as g
from governor.contracts.metrics.scrape import SCRAPE_DURATION, SCRAPE_SAMPLES
from governor.dashboards.readback import panels
from governor.dashboards.render import render_all
from governor.generation.catalog import load_checked_spec
from tests.dashboards.boards import CASES, ROOT, boards, metric_references


@functools.cache
def _files() -> tuple[tuple[str, str], ...]:
    return tuple(render_all(load_checked_spec(CASES["dcgm"])).items())


def dcgm_board() -> dict[str, Any]:
    """The GPU board of tests/alerts/testdata/dcgm.yaml (rendered once per session)."""
    return boards(dict(_files()))["governor-gpu"]


def governor_board() -> dict[str, Any]:
    return boards()["governor-gpu"]


def titled(board: dict[str, Any], title: str) -> dict[str, Any]:
    return next(p for p in panels(board) if p["title"] == title)


def exprs(panel: dict[str, Any]) -> str:
    return "\n".join(t["expr"] for t in panel.get("targets", []))


NOT_IN_DCGM = ("Memory by process", "Processes per GPU", "Sampling round", "Round phases",
               "Exporter errors")
# The GPU state is recorded by the rules from DCGM's fields (health.yml), as on Governor's.
DECLARED = {field.name for reading in (*dcgm.READINGS, *dcgm.UNPINNED)
            for field in reading.fields} | {
    SCRAPE_DURATION.name, SCRAPE_SAMPLES.name, gpu_health.STATE.name, gpu_health.REASON.name}


def test_it_is_the_gpu_board_with_the_same_uid_rows_and_variables() -> None:
    mine, governors = dcgm_board(), governor_board()
    assert mine["uid"] == governors["uid"] and mine["title"] == governors["title"]
    rows = [[p["title"] for p in board["panels"] if p["type"] == "row"]
            for board in (mine, governors)]
    assert rows[0] == rows[1]
    assert [v["name"] for v in mine["templating"]["list"]] == [
        v["name"] for v in governors["templating"]["list"]]
    assert "dcgm-exporter" in mine["description"]


def test_every_governor_panel_is_there_or_said_not_to_be_in_dcgm() -> None:
    mine = {p["title"]: p for p in panels(dcgm_board())}
    for panel in panels(governor_board()):
        if panel["title"] in mine:
            assert mine[panel["title"]]["type"] == panel["type"] or \
                panel["title"] in NOT_IN_DCGM, panel["title"]
        else:
            assert panel["title"] in NOT_IN_DCGM, f"{panel['title']} is missing"
    said = [p for p in panels(dcgm_board()) if p["type"] == "text"]
    assert [p["title"] for p in said] == ["Processes per GPU", "Memory by process",
                                          "Exporter internals"]
    assert all("**Not in DCGM.**" in p["options"]["content"] for p in said)
    internals = said[2]["options"]["content"]
    assert "sampling round" in internals and "NVML errors" in internals


def test_the_board_reads_only_dcgm_fields_and_prometheus_own_series() -> None:
    for panel in panels(dcgm_board()):
        for target in panel.get("targets", []):
            names = metric_references(target["expr"])
            assert names and names <= DECLARED, (panel["title"], names - DECLARED)
            assert not any(name.startswith("gpu_") for name in names)


@pytest.mark.parametrize(("title", "readings"), [
    ("SM active", [dcgm.SM_ACTIVE]), ("SM occupancy", [dcgm.SM_OCCUPANCY]),
    ("Tensor pipes active", [dcgm.TENSOR_ACTIVE]), ("DRAM bandwidth", [dcgm.DRAM_ACTIVE]),
    ("GPU utilization", [dcgm.GPU_UTIL]), ("Memory used", [dcgm.FB_USED, dcgm.FB_CAPACITY]),
    ("Power", [dcgm.POWER, dcgm.POWER_LIMIT]), ("Clocks", [dcgm.SM_CLOCK, dcgm.MEMORY_CLOCK]),
    ("Temperature", [dcgm.GPU_TEMP, dcgm.MEMORY_TEMP]),
    ("Throttled share of time", [dcgm.POWER_VIOLATION, dcgm.THERMAL_VIOLATION]),
    ("XID errors", [dcgm.XID]),
    ("Memory errors", [dcgm.ECC_UNCORRECTED, dcgm.ECC_CORRECTED, dcgm.ROW_REMAP_PENDING,
                       dcgm.ROW_REMAP_FAILED]),
    ("PCIe traffic", [dcgm.PCIE_TX, dcgm.PCIE_RX]), ("GPUs answering", [dcgm.PRESENCE]),
])
def test_each_panel_reads_its_fields_under_every_releases_name(
        title: str, readings: list[dcgm.Reading]) -> None:
    text = exprs(titled(dcgm_board(), title))
    for reading in readings:
        for field in reading.fields:
            assert f"{field.name}{{" in text, (title, field.name)


@pytest.mark.parametrize(("title", "unit", "conversions"), [
    ("Clocks", "hertz", ["DCGM_FI_DEV_SM_CLOCK{", "* 1000000"]),
    ("GPU utilization", "percentunit", ["DCGM_FI_DEV_GPU_UTIL{", "* 0.01"]),
    ("Memory used", "bytes", ["* 1048576"]),
    ("Throttled share of time", "percentunit", ["* 0.000000001"]),
])
def test_old_units_are_converted_to_the_panels_unit(title: str, unit: str,
                                                     conversions: list[str]) -> None:
    panel = titled(dcgm_board(), title)
    assert panel["fieldConfig"]["defaults"]["unit"] == unit
    assert unit == titled(governor_board(), title)["fieldConfig"]["defaults"]["unit"]
    text = exprs(panel)
    for piece in conversions:
        assert piece in text, (title, piece)


def test_fields_left_out_of_the_default_csv_are_named_where_they_are_shown() -> None:
    opt_in = [reading for reading in dcgm.READINGS if not reading.default]
    shown = set()
    for panel in panels(dcgm_board()):
        for reading in opt_in:
            if f"{reading.fields[0].name}{{" in exprs(panel):
                shown.add(reading.what)
                about = panel["description"]
                assert "Not collected by default" in about, panel["title"]
                assert all(field.name in about for field in reading.fields), reading.what
    assert len(shown) == len(opt_in) - 1  # the clock-event reasons: the alerts only


def test_the_variables_list_gpus_from_either_releases_temperature() -> None:
    variables = {v["name"]: v for v in dcgm_board()["templating"]["list"]}
    names = "DCGM_FI_DEV_GPU_TEMP_CELSIUS|DCGM_FI_DEV_GPU_TEMP"
    assert variables["job"]["query"] == f'label_values({{__name__=~"{names}"}}, job)'
    assert variables["job"]["current"]["value"] == "nvidia-dcgm-exporter"
    assert variables["namespace"]["current"]["value"] == "gpu-operator"
    assert variables["gpu"]["query"].startswith(f'label_values({{__name__=~"{names}", job=~')


def test_a_governor_spec_keeps_governors_board() -> None:
    assert g.UP.name in "\n".join(exprs(p) for p in panels(governor_board()))
    assert "DCGM_FI" not in str(governor_board())


def test_the_tables_of_docs_dcgm_are_the_catalogs() -> None:
    from governor.dashboards import dcgm_catalog

    text = (ROOT / "docs" / "dcgm.md").read_text(encoding="utf-8")
    for table in (dcgm_catalog.readings_table(), dcgm_catalog.panels_table()):
        assert table in text, "regenerate them: python -m governor.dashboards.dcgm_catalog"
    titles = {p["title"] for p in panels(dcgm_board())}
    assert all(f"| {title} |" in text for title in titles)
