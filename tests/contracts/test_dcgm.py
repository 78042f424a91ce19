"""dcgm-exporter's fields as Governor declares them, against the pinned expositions of each release
(tests/data/dcgm/, provenance in tests/data/README.md)."""

from __future__ import annotations

import itertools
import math
from decimal import Decimal
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from governor.contracts.metrics import dcgm
from governor.contracts.promql import METRIC_NAME

DATA = Path(__file__).resolve().parents[1] / "data"
SAMPLES = {dcgm.RELEASE_4_8: DATA / "dcgm" / "exporter-4.5.3-4.8.2.prom",
           dcgm.RELEASE_4_9: DATA / "dcgm" / "exporter-4.9.0.prom",
           dcgm.RELEASE_4_10: DATA / "dcgm" / "exporter-4.10.0.prom"}
H200 = DATA / "gpu_h200_matmul.prom"  # Governor's exporter on the GPU the samples' GPU 0 is


def exposed(release: str) -> dict[str, dict[str, float]]:
    """name → GPU index → value, as prometheus_client's text parser reads the sample. Its
    counter samples gain a ``_total`` that Prometheus does not add (dcgm-exporter's counters
    lack it), so a series is named by its family, as dcgm-exporter names both."""
    values: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(SAMPLES[release].read_text(encoding="utf-8")):
        assert family.type in ("gauge", "counter"), family
        for sample in family.samples:
            values.setdefault(family.name, {})[sample.labels[dcgm.LABEL_GPU]] = sample.value
    return values


def in_base_units(reading: dcgm.Reading, release: str) -> dict[str, float]:
    field = reading.in_release(release)
    assert field is not None
    return {gpu: float(Decimal(repr(value)) * field.to_base)
            for gpu, value in exposed(release)[field.name].items()}


def governor_reading(series: str, **labels: str) -> float:
    for family in text_string_to_metric_families(H200.read_text(encoding="utf-8")):
        for sample in family.samples:
            if sample.name == series and labels.items() <= sample.labels.items():
                return float(sample.value)
    raise AssertionError(f"{series} {labels} not in {H200.name}")


def test_every_name_is_a_metric_name_and_no_two_readings_share_one() -> None:
    names = [field.name for reading in dcgm.READINGS for field in reading.fields]
    assert all(METRIC_NAME.fullmatch(name) for name in names)
    assert len(names) == len(set(names))


def test_names_of_one_field_share_its_id_unless_the_unit_changed() -> None:
    """DCGM keeps the id when it only renames a field; only a new unit may bring a new id
    (dcgm-exporter 4.9 also converts one field's unit itself: energy, id 156, mJ to J)."""
    for reading in dcgm.READINGS:
        fields = reading.fields
        for new, old in itertools.pairwise(fields):
            assert new.field_id == old.field_id or new.to_base != old.to_base, reading.what


@pytest.mark.parametrize("release", dcgm.RELEASES)
def test_each_release_exposes_the_names_governor_reads_for_it(release: str) -> None:
    families = exposed(release)
    for reading in dcgm.READINGS:
        field = reading.in_release(release)
        if field is None:  # the total before 4.9: used + free
            assert reading is dcgm.FB_CAPACITY and release == dcgm.RELEASE_4_8
            continue
        assert field.name in families, f"{reading.what}: {field.name} not in {release}'s sample"
        assert set(families[field.name]) == {"0", "1"}
    # and none of another release's names
    others = {field.name for reading in dcgm.READINGS for field in reading.fields} - {
        field.name for reading in dcgm.READINGS
        if (field := reading.in_release(release)) is not None}
    assert others.isdisjoint(families)


@pytest.mark.parametrize("reading", dcgm.READINGS, ids=lambda r: r.what)
def test_every_release_reads_the_same_in_governors_units(reading: dcgm.Reading) -> None:
    """4.8's MHz, percent and MiB, 4.9's hertz, ratios and bytes: one value once converted
    (the MiB rows round to whole MiB, so the frame buffer agrees to a MiB)."""
    releases = [r for r in dcgm.RELEASES if reading.in_release(r) is not None]
    first, *rest = (in_base_units(reading, release) for release in releases)
    for other in rest:
        assert other.keys() == first.keys()
        for gpu in first:
            assert math.isclose(other[gpu], first[gpu], rel_tol=1e-6, abs_tol=2**20), (
                reading.what, gpu, first[gpu], other[gpu])


@pytest.mark.parametrize(("reading", "series", "labels"), [
    (dcgm.SM_CLOCK, "gpu_clock_hz", {"clock": "sm"}),
    (dcgm.MEMORY_CLOCK, "gpu_clock_hz", {"clock": "memory"}),
    (dcgm.GPU_UTIL, "gpu_utilization_ratio", {}),
    (dcgm.TENSOR_ACTIVE, "gpu_tensor_active_ratio", {}),
    (dcgm.SM_ACTIVE, "gpu_sm_active_ratio", {}),
    (dcgm.POWER, "gpu_power_watts", {}),
    (dcgm.FB_USED, "gpu_memory_used_bytes", {}),
    (dcgm.GPU_TEMP, "gpu_temperature_celsius", {}),
], ids=lambda x: x.what if isinstance(x, dcgm.Reading) else None)
def test_converted_readings_say_what_governors_exporter_measured(
        reading: dcgm.Reading, series: str, labels: dict[str, str]) -> None:
    """The samples' GPU 0 is the H200 of tests/data/gpu_h200_matmul.prom: each release's
    value, through the declared factor, is Governor's reading of the same moment."""
    for release in dcgm.RELEASES:
        got = in_base_units(reading, release)["0"]
        assert math.isclose(got, governor_reading(series, **labels), rel_tol=1e-5,
                            abs_tol=2**20), (release, got)


def test_the_memory_total_falls_back_to_used_plus_free_in_mib() -> None:
    assert dcgm.memory_total(()) == (
        "(DCGM_FI_DEV_FB_CAPACITY_BYTES or "
        "(DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE) * 1048576)")


@pytest.mark.parametrize(("bitmask", "reasons", "set_"), [
    (0x40, ("sw_thermal", "hw_thermal"), True),
    (0x20 | 0x1, ("sw_thermal", "hw_thermal"), True),
    (0x4, ("sw_thermal", "hw_thermal"), False),
    (0x80, ("sw_power_cap", "hw_power_brake"), True),
    (0x1, ("gpu_idle",), True),
    (0x2 | 0x8 | 0x10 | 0x100, ("sw_power_cap", "hw_power_brake"), False),
])
def test_a_clock_event_reason_is_read_from_its_bit(bitmask: int, reasons: tuple[str, ...],
                                                    set_: bool) -> None:
    """The PromQL, evaluated as Prometheus would (floor, %, clamp_max on one number)."""
    expr = dcgm.any_reason("x", reasons)
    python = (expr.replace("clamp_max(", "min(").replace("floor(", "math.floor(")
              .replace("x", str(bitmask)))
    assert eval(python, {"math": math}) == (1 if set_ else 0)  # noqa: S307 (our own PromQL)


def test_a_release_has_the_name_its_collectors_use() -> None:
    assert dcgm.PCIE_TX.in_release(dcgm.RELEASE_4_9) == dcgm.PCIE_TX.names[0][1]
    field = dcgm.PCIE_TX.in_release(dcgm.RELEASE_4_10)
    assert field is not None and field.name == "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND"
    assert dcgm.FB_CAPACITY.in_release(dcgm.RELEASE_4_8) is None
