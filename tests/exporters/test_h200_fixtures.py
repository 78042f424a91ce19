"""Scrapes of the exporter on a real H200 (lab/gpu/exporter_h200.py): what the GPU did
shows.

``gpu_h200_{idle,matmul,copy}.prom`` were scraped from ``python -m governor.exporters`` on an H200
(driver 580.159.04) while idle, during a bf16 8192^3 matmul loop and during a 2 GiB device copy
loop; ``gpu_h200_measurements.json`` holds that run's timings, which docs/exporter.md quotes.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from governor.contracts.metrics import gpu as m
from governor.exporters.gpu import catalog

DATA = Path(__file__).resolve().parents[1] / "data"
EXPORTER_DOC = Path(__file__).resolve().parents[2] / "docs" / "exporter.md"
WORKLOADS = ("idle", "matmul", "copy")


def readings(workload: str) -> dict[str, float]:
    """GPU 0's unlabelled-beyond-identity series of one scrape."""
    text = (DATA / f"gpu_h200_{workload}.prom").read_text()
    return {sample.name: sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples
            if sample.labels.get(m.LABEL_GPU) == "0"
            and set(sample.labels) == {m.LABEL_GPU, m.LABEL_UUID, m.LABEL_MODEL}}


@pytest.fixture(scope="module")
def scrapes() -> dict[str, dict[str, float]]:
    return {workload: readings(workload) for workload in WORKLOADS}


def test_tensor_activity_rises_under_the_matmul(scrapes: dict[str, dict[str, float]]) -> None:
    tensor = {w: scrapes[w][m.TENSOR_ACTIVE.name] for w in WORKLOADS}
    assert tensor["matmul"] > 0.8
    assert tensor["matmul"] > tensor["copy"] + 0.5
    assert tensor["matmul"] > tensor["idle"] + 0.5


def test_dram_bandwidth_rises_under_the_copy(scrapes: dict[str, dict[str, float]]) -> None:
    dram = {w: scrapes[w][m.DRAM_BANDWIDTH_UTILIZATION.name] for w in WORKLOADS}
    assert dram["copy"] > 0.7
    assert dram["copy"] > dram["matmul"] + 0.5
    assert dram["idle"] < 0.05


def test_the_gpu_was_busy_under_both_and_idle_before(scrapes: dict[str, dict[str, float]]) -> None:
    for workload in ("matmul", "copy"):
        assert scrapes[workload][m.SM_ACTIVE.name] > 0.9
        assert scrapes[workload][m.POWER.name] > 2 * scrapes["idle"][m.POWER.name]
    assert scrapes["idle"][m.SM_ACTIVE.name] < 0.05


def test_the_scrapes_come_from_an_h200() -> None:
    text = (DATA / "gpu_h200_copy.prom").read_text()
    info = next(f for f in text_string_to_metric_families(text) if f.name == m.INFO.series)
    assert "H200" in info.samples[0].labels[m.LABEL_MODEL]
    assert info.samples[0].labels[m.LABEL_DRIVER_VERSION] == "580.159.04"


def test_every_family_in_the_scrapes_is_catalogued() -> None:
    # The text parser names a family as declared, an info family with its _info.
    known = {metric.series if metric.kind == "info" else metric.name
             for metric in (*m.HEALTH, *m.PER_GPU)}
    for workload in WORKLOADS:
        text = (DATA / f"gpu_h200_{workload}.prom").read_text()
        assert {f.name for f in text_string_to_metric_families(text)} <= known


@pytest.mark.integration
@pytest.mark.parametrize("workload", WORKLOADS)
def test_promtool_accepts_the_real_scrapes(workload: str) -> None:
    done = subprocess.run(["promtool", "check", "metrics"],
                          input=(DATA / f"gpu_h200_{workload}.prom").read_bytes(),
                          capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()


def readme_section() -> str:
    """The exporter's page of the manual (the metric table and the measured numbers)."""
    return EXPORTER_DOC.read_text()


def test_the_readme_quotes_the_measured_numbers() -> None:
    summary = json.loads((DATA / "gpu_h200_measurements.json").read_text())["summary"]
    section = readme_section()
    assert f"{summary['smi_over_scrape']:.0f}\u00d7" in section
    assert f"{summary['scrape_p50_ms']:.3f} ms" in section
    assert f"{summary['nvidia_smi_p50_ms']:.1f} ms" in section
    assert f"{summary['fast_round_core_percent_per_gpu_at_1s']:.3f} %" in section
    assert f"{summary['core_percent_per_gpu_at_1s_slow_30s']:.3f} %" in section


def test_the_readme_metric_table_is_the_catalog() -> None:
    assert catalog.markdown_table() in readme_section(), (
        "regenerate the table: python -m governor.exporters.gpu.catalog")
