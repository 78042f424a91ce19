"""Snapshot → families: labels, types, freshness, and a golden exposition from the fake GPUs."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from governor.contracts.metrics import gpu as m
from governor.contracts.simdevice import Faults
from governor.exporters.exposition import Format, render_snapshot
from governor.exporters.gpu.collector import families
from governor.exporters.gpu.fake import FakeNvml
from governor.exporters.gpu.readings import GpuIdentity, GpuReading, Sample, Snapshot
from governor.exporters.gpu.simulated import IDLE, GpuState
from tests.exporters.conftest import FakeClock, make_sampler

DATA = Path(__file__).resolve().parents[2] / "data"
GOLDEN = {Format.TEXT: DATA / "gpu_golden_fake2.prom",
          Format.OPENMETRICS: DATA / "gpu_golden_fake2.openmetrics"}


# GPU 0 as --follow shows a simulated engine on it, held down by heat beside a co-tenant.
ENGINE_ON_GPU0 = GpuState(
    busy=0.625, tensor=0.1875, dram=0.5, tokens_per_second=4096.0,
    faults=Faults(clock_ratio=0.5, clock_reasons=("hw_thermal",), cotenant_sm_ratio=0.25,
                  cotenant_memory_bytes=8 * 2**30),
    engine_memory_bytes=128 * 2**30, temperature_c=71.0, memory_temperature_c=52.0,
    ecc_uncorrected=2)


def golden_snapshot(tmp_path: Path) -> Snapshot:
    """Two fake GPUs after a slow round, every clock pinned: the same bytes on every machine.
    GPU 0 runs a followed engine, GPU 1 is idle."""
    clock = FakeClock(1000.0)
    nvml = FakeNvml(2, clock=clock)
    nvml.states = (ENGINE_ON_GPU0, IDLE)
    sampler = make_sampler(nvml, clock, tmp_path, slow_interval_seconds=30.0)
    sampler.tick()
    clock.advance(30.0)
    snapshot = sampler.tick()
    sampler.close()
    return snapshot


@pytest.mark.parametrize("fmt", [Format.TEXT, Format.OPENMETRICS], ids=lambda f: f.name.lower())
def test_golden_exposition(fmt: Format, tmp_path: Path, update_golden: bool) -> None:
    body = render_snapshot(golden_snapshot(tmp_path), fmt, version="test")
    if update_golden:
        GOLDEN[fmt].write_bytes(body)
    assert body == GOLDEN[fmt].read_bytes(), (
        "exposition changed; if on purpose, rerun with GOVERNOR_UPDATE_GOLDEN=1 and review it")


@pytest.mark.integration
def test_promtool_accepts_the_golden_exposition() -> None:
    done = subprocess.run(["promtool", "check", "metrics"], input=GOLDEN[Format.TEXT].read_bytes(),
                          capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    assert done.stdout.decode().strip() == "", done.stdout.decode()  # no lint warnings


Parsed = dict[str, list[tuple[dict[str, str], float]]]


def parsed(snapshot: Snapshot, *, fresh: bool = True) -> Parsed:
    body = render_snapshot(snapshot, Format.TEXT, version="t", fresh=fresh).decode()
    return {f.name: [(s.labels, s.value) for s in f.samples]
            for f in text_string_to_metric_families(body)}


def test_every_gpu_series_carries_gpu_uuid_and_model(tmp_path: Path) -> None:
    for name, samples in parsed(golden_snapshot(tmp_path)).items():
        if name.startswith("gpu_exporter_"):
            continue
        for labels, _ in samples:
            assert {m.LABEL_GPU, m.LABEL_UUID, m.LABEL_MODEL} <= set(labels), name


def test_identity_lives_in_gpu_info(tmp_path: Path) -> None:
    info = parsed(golden_snapshot(tmp_path))[m.INFO.series]
    labels, value = info[0]
    assert value == 1.0
    assert labels[m.LABEL_DRIVER_VERSION] == "580.159.04-sim"
    assert labels[m.LABEL_CUDA_VERSION] == "13.0"
    assert labels[m.LABEL_PCI_BUS_ID] == "00000000:18:00.0"


def test_counters_are_exposed_with_total(tmp_path: Path) -> None:
    body = render_snapshot(golden_snapshot(tmp_path), Format.TEXT, version="t").decode()
    for counter in (m.ENERGY, m.ECC_UNCORRECTED_ERRORS, m.EXPORTER_ERRORS, m.PCIE_RECEIVED):
        assert f"# TYPE {counter.total} counter" in body


def test_every_error_kind_is_exposed_from_the_start(tmp_path: Path) -> None:
    errors = parsed(golden_snapshot(tmp_path))[m.EXPORTER_ERRORS.name]
    assert {labels[m.LABEL_KIND] for labels, _ in errors} == set(m.ERROR_KINDS)


def test_stale_readings_are_withheld_and_gpus_read_down(tmp_path: Path) -> None:
    stale = parsed(golden_snapshot(tmp_path), fresh=False)
    assert [v for _, v in stale[m.UP.name]] == [0.0, 0.0]
    assert m.UTILIZATION.name not in stale and m.TEMPERATURE.name not in stale
    assert m.EXPORTER_LAST_SUCCESS.name in stale and m.EXPORTER_ERRORS.name in stale


def test_without_nvml_there_is_no_gpu_up_at_all() -> None:
    snapshot = Snapshot(sequence=3, taken_at=1.0, taken_monotonic=1.0, source="nvml",
                        nvml_up=False, nvml_message="no NVIDIA driver on this machine")
    names = parsed(snapshot)
    assert m.UP.name not in names
    assert names[m.EXPORTER_NVML_UP.name] == [({}, 0.0)]
    assert m.EXPORTER_LAST_SUCCESS.name not in names  # never succeeded: absent, not zero


def test_a_lost_gpu_reads_0_and_keeps_its_xid_count() -> None:
    lost = GpuReading(GpuIdentity(1, "GPU-b", "H200", "0:2"), up=False,
                      samples=(Sample(m.XID_ERRORS.name, 2.0, ((m.LABEL_XID, "79"),)),))
    alive = GpuReading(GpuIdentity(0, "GPU-a", "H200", "0:1"), up=True,
                       samples=(Sample(m.POWER.name, 300.0),))
    snapshot = Snapshot(sequence=1, taken_at=1.0, taken_monotonic=1.0, source="nvml",
                        nvml_up=True, nvml_message="", gpus=(alive, lost))
    names = parsed(snapshot)
    assert {labels[m.LABEL_GPU]: v for labels, v in names[m.UP.name]} == {"0": 1.0, "1": 0.0}
    assert names[m.XID_ERRORS.name] == [
        ({m.LABEL_GPU: "1", m.LABEL_UUID: "GPU-b", m.LABEL_MODEL: "H200", m.LABEL_XID: "79"}, 2.0)]


def test_families_are_in_a_stable_order(tmp_path: Path) -> None:
    snapshot = golden_snapshot(tmp_path)
    first = [f.name for f in families(snapshot, fresh=True, version="t")]
    shuffled = replace(snapshot, gpus=tuple(reversed(snapshot.gpus)))
    assert [f.name for f in families(shuffled, fresh=True, version="t")] == first


def test_label_values_are_escaped() -> None:
    hostile = GpuReading(GpuIdentity(0, 'GPU-"}\n', 'H200\\"x', ""), up=True,
                         samples=(Sample(m.POWER.name, 1.0),))
    snapshot = Snapshot(sequence=1, taken_at=1.0, taken_monotonic=1.0, source="nvml",
                        nvml_up=True, nvml_message="", gpus=(hostile,))
    names = parsed(snapshot)
    assert names[m.POWER.name][0][0][m.LABEL_UUID] == 'GPU-"}\n'
