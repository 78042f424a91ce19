"""--names dcgm: the fake GPUs under dcgm-exporter 4.8's names, labels and units."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from prometheus_client.parser import text_string_to_metric_families

from governor.contracts.metrics import dcgm
from governor.contracts.metrics import gpu as m
from governor.contracts.simdevice import Faults
from governor.exporters.config import NAMES_DCGM, ExporterConfig
from governor.exporters.dcgm import DcgmView
from governor.exporters.gpu.fake import FakeNvml
from governor.exporters.gpu.readings import Sample, Snapshot
from governor.exporters.gpu.sampler import Sampler
from governor.exporters.server import create_app
from tests.exporters.conftest import ENGINE, FakeClock, engines_on, make_sampler

ClientFactory = Callable[[web.Application], Awaitable[TestClient]]  # type: ignore[type-arg]
REFERENCE = Path(__file__).resolve().parents[1] / "data" / "dcgm" / "exporter-4.5.3-4.8.2.prom"
# Labels of a GPU's series in dcgm-exporter's exposition, Kubernetes' pod mapping left out.
POD_LABELS = {dcgm.LABEL_POD, dcgm.LABEL_NAMESPACE, dcgm.LABEL_CONTAINER}
THROTTLED = Faults(clock_ratio=0.5, clock_reasons=("hw_thermal",))

Families = dict[str, tuple[str, list[tuple[dict[str, str], float]]]]


def families(text: str) -> Families:
    return {f.name: (f.type, [(s.labels, s.value) for s in f.samples])
            for f in text_string_to_metric_families(text)}


def sampler_with_engine(clock: FakeClock, tmp_path: Path) -> tuple[FakeNvml, Sampler]:
    nvml = engines_on(FakeNvml(2, clock=clock), 0, state=replace(ENGINE, faults=THROTTLED))
    sampler = make_sampler(nvml, clock, tmp_path, slow_interval_seconds=30.0)
    sampler.tick()
    clock.advance(30.0)
    sampler.tick()
    return nvml, sampler


def rendered(snapshot: Snapshot, view: DcgmView | None = None) -> Families:
    return families((view or DcgmView("gpu-node-1")).render(snapshot, fresh=True).decode())


def gpu_value(found: Families, name: str, gpu: str) -> float:
    return next(v for labels, v in found[name][1] if labels[dcgm.LABEL_GPU] == gpu)


def test_every_series_has_the_name_type_and_labels_dcgm_exporter_4_8_gives_it(
    clock: FakeClock, tmp_path: Path,
) -> None:
    _, sampler = sampler_with_engine(clock, tmp_path)
    ours = rendered(sampler.latest())
    reference = families(REFERENCE.read_text())
    expected = {field.name for reading, field in ((r, r.in_release(dcgm.RELEASE_4_8))
                                                  for r in (*dcgm.READINGS, *dcgm.UNPINNED))
                if field is not None}
    assert set(ours) == expected
    for name, (kind, samples) in ours.items():
        if name in reference:
            ref_kind, ref_samples = reference[name]
            assert kind == ref_kind, name
            ref_labels = {k for labels, _ in ref_samples for k in labels} - POD_LABELS
            assert {k for labels, _ in samples for k in labels} == ref_labels, name
        assert len(samples) == 2, name  # both GPUs


def test_values_are_in_dcgm_s_units(clock: FakeClock, tmp_path: Path) -> None:
    nvml, sampler = sampler_with_engine(clock, tmp_path)
    found = rendered(sampler.latest())
    assert gpu_value(found, "DCGM_FI_DEV_SM_CLOCK", "0") == 990  # MHz, held at half
    assert gpu_value(found, "DCGM_FI_DEV_SM_CLOCK", "1") == 345
    assert gpu_value(found, "DCGM_FI_DEV_FB_USED", "0") == 100 * 1024  # MiB
    assert gpu_value(found, "DCGM_FI_DEV_GPU_UTIL", "0") == 50  # percent
    assert gpu_value(found, "DCGM_FI_PROF_SM_ACTIVE", "0") == 0.5  # ratio
    assert gpu_value(found, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "0") == 0x40
    assert gpu_value(found, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "1") == 0x1  # idle
    assert gpu_value(found, "DCGM_FI_DEV_THERMAL_VIOLATION", "0") == 30e9  # ns
    labels = found["DCGM_FI_DEV_GPU_TEMP"][1][0][0]
    assert labels[dcgm.LABEL_UUID] == nvml.uuid(0)
    assert labels[dcgm.LABEL_DEVICE] == "nvidia0"
    assert labels[dcgm.LABEL_HOSTNAME_UNTIL_4_8_2] == "gpu-node-1"


def with_xids(snapshot: Snapshot, counts: dict[str, float]) -> Snapshot:
    """``snapshot`` with GPU 0's XID counters at ``counts`` (code → count)."""
    gpu0, *others = snapshot.gpus
    xids = tuple(Sample(m.XID_ERRORS.name, n, ((m.LABEL_XID, code),))
                 for code, n in counts.items())
    return replace(snapshot, gpus=(replace(gpu0, samples=gpu0.samples + xids), *others))


def test_the_xid_gauge_holds_the_last_code_labelled_with_it(
    clock: FakeClock, tmp_path: Path,
) -> None:
    _, sampler = sampler_with_engine(clock, tmp_path)
    snapshot, view = sampler.latest(), DcgmView("h")
    last = []
    for counts in ({}, {"31": 1.0}, {"31": 1.0, "79": 1.0}, {"31": 1.0, "79": 1.0},
                   {"31": 2.0, "79": 1.0}):
        rows = rendered(with_xids(snapshot, counts), view)["DCGM_FI_DEV_XID_ERRORS"][1]
        gpu0 = next(row for row in rows if row[0][dcgm.LABEL_GPU] == "0")
        assert gpu0[0][dcgm.LABEL_XID_CODE] == str(int(gpu0[1]))
        last.append((gpu0[1], gpu0[0][dcgm.LABEL_XID_MESSAGE]))
    assert last == [(0.0, "No Error"), (31.0, "GPU memory page fault"),
                    (79.0, "GPU has fallen off the bus"), (79.0, "GPU has fallen off the bus"),
                    (31.0, "GPU memory page fault")]


def test_a_stale_snapshot_renders_nothing(clock: FakeClock, tmp_path: Path) -> None:
    _, sampler = sampler_with_engine(clock, tmp_path)
    assert DcgmView("h").render(sampler.latest(), fresh=False) == b""


async def test_the_server_serves_dcgm_names_in_the_text_format_only(
    aiohttp_client: ClientFactory, clock: FakeClock, tmp_path: Path,
) -> None:
    _, sampler = sampler_with_engine(clock, tmp_path)
    config = ExporterConfig(fake_gpus=2, names=NAMES_DCGM, staleness_seconds=100.0)
    app = create_app(config, sampler=sampler, monotonic=clock, run_sampler=False,
                     hostname="node")
    client = await aiohttp_client(app)
    response = await client.get("/metrics", headers={"Accept": "application/openmetrics-text"})
    assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    found = families(await response.text())
    assert "DCGM_FI_DEV_GPU_TEMP" in found and not any(n.startswith("gpu_") for n in found)
    assert found["DCGM_FI_DEV_GPU_TEMP"][1][0][0][dcgm.LABEL_HOSTNAME_UNTIL_4_8_2] == "node"


def test_nvlink_throughput_follows_the_traffic_on_the_gpus_links(
    clock: FakeClock, tmp_path: Path,
) -> None:
    """The two profiling rows a fleet adds to the collector CSV, in bytes per second."""
    busy = replace(ENGINE, faults=Faults(link_ratio=0.25))
    nvml = engines_on(FakeNvml(2, clock=clock), 0, state=busy)
    sampler = make_sampler(nvml, clock, tmp_path, slow_interval_seconds=30.0)
    sampler.tick()
    clock.advance(30.0)
    sampler.tick()
    found = rendered(sampler.latest())
    for field in (dcgm.NVLINK_TX.fields[0], dcgm.NVLINK_RX.fields[0]):
        assert found[field.name][0] == "gauge"
        assert gpu_value(found, field.name, "0") == pytest.approx(0.25 * 450e9)
        assert gpu_value(found, field.name, "1") == 0


def test_a_mig_gpu_is_shown_as_its_gpu_instances_as_dcgm_exporter_shows_one(
    clock: FakeClock, tmp_path: Path,
) -> None:
    """dcgm-exporter's default device option (f): a MIG GPU's instances, not the GPU; each
    instance's own frame buffer and activity, the GPU's clocks and heat, no GPU_UTIL."""
    nvml = engines_on(FakeNvml(2, clock=clock, mig={1: ("3g.71gb", "1g.18gb")}), 1)
    sampler = make_sampler(nvml, clock, tmp_path, slow_interval_seconds=30.0)
    sampler.tick()
    clock.advance(30.0)
    sampler.tick()
    found = rendered(sampler.latest())

    def on_gpu1(name: str) -> dict[tuple[str, str], float]:
        rows = [(labels, v) for labels, v in found[name][1] if labels[dcgm.LABEL_GPU] == "1"]
        return {(labels[dcgm.LABEL_MIG_PROFILE], labels[dcgm.LABEL_MIG_INSTANCE]): v
                for labels, v in rows}

    instances = {("3g.71gb", "1"), ("1g.18gb", "2")}
    for name in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_FB_USED",
                 "DCGM_FI_DEV_FB_FREE", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_XID_ERRORS"):
        assert set(on_gpu1(name)) == instances, name  # and no row for the GPU itself
    assert on_gpu1("DCGM_FI_DEV_SM_CLOCK") == dict.fromkeys(instances, 1980)  # the GPU's
    used, free = on_gpu1("DCGM_FI_DEV_FB_USED"), on_gpu1("DCGM_FI_DEV_FB_FREE")
    # The engine's 100 GiB fill the first instance (half the GPU) to the brim.
    assert (used[("3g.71gb", "1")], free[("3g.71gb", "1")]) == (143_771 // 2, 0)
    assert used[("1g.18gb", "2")] == 13
    assert used[("1g.18gb", "2")] + free[("1g.18gb", "2")] == 143_771 // 8
    active = on_gpu1("DCGM_FI_PROF_SM_ACTIVE")
    assert active == {("3g.71gb", "1"): 0.5, ("1g.18gb", "2"): 0.0}
    assert on_gpu1("DCGM_FI_DEV_GPU_UTIL") == {}
    assert {labels[dcgm.LABEL_GPU] for labels, _ in found["DCGM_FI_DEV_GPU_UTIL"][1]} == {"0"}
    gpu0 = next(labels for labels, _ in found["DCGM_FI_DEV_GPU_TEMP"][1]
                if labels[dcgm.LABEL_GPU] == "0")
    assert dcgm.LABEL_MIG_PROFILE not in gpu0
