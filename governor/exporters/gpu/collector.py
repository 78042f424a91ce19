"""Snapshot → Prometheus metric families. Pure: no NVML, no clock, no registry.

A stale snapshot (the sampler stopped answering) keeps the exporter's health series and
``gpu_up 0``; its readings are withheld rather than served as if they were current. Every
family's name, type, help and labels come from :mod:`governor.contracts.metrics.gpu`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator

from prometheus_client.metrics_core import Metric as Family

from governor.contracts.families import (
    add_value,
    counter_family,
    family,
    gauge_family,
    info_family,
)
from governor.contracts.metrics import gpu as m
from governor.exporters.gpu.readings import GpuIdentity, GpuReading, Sample, Snapshot


def _base(identity: GpuIdentity) -> list[str]:
    return [str(identity.index), identity.uuid, identity.model]


def families(snapshot: Snapshot, *, fresh: bool, version: str) -> list[Family]:
    """Every family for this snapshot, in a stable order (health, identity, then readings)."""
    out: list[Family] = list(_health(snapshot, version))
    if snapshot.nvml_up:
        out.extend(_identity(snapshot))
        out.append(_up(snapshot.gpus, fresh))
        if fresh:
            out.extend(_readings(snapshot.gpus))
    return out


def age_family(age_seconds: float) -> Family:
    """Rendered per scrape (the only value that changes between two rounds)."""
    return _single(gauge_family(m.EXPORTER_SNAPSHOT_AGE), max(age_seconds, 0.0))


def _single(family: Family, value: float) -> Family:
    add_value(family, [], value)
    return family


def _health(snapshot: Snapshot, version: str) -> Iterator[Family]:
    build = info_family(m.EXPORTER_BUILD_INFO)
    build.add_metric([version, snapshot.source], {})
    yield build
    yield _single(gauge_family(m.EXPORTER_NVML_UP), 1.0 if snapshot.nvml_up else 0.0)
    yield _single(gauge_family(m.EXPORTER_COLLECT_DURATION), snapshot.collect_seconds)
    phases = gauge_family(m.EXPORTER_PHASE_DURATION)
    for phase, seconds in snapshot.phase_seconds:
        phases.add_metric([phase], seconds)
    yield phases
    yield _single(counter_family(m.EXPORTER_CPU), snapshot.cpu_seconds_total)
    yield _single(counter_family(m.EXPORTER_COLLECTIONS), snapshot.collections_total)
    errors = counter_family(m.EXPORTER_ERRORS)
    for kind, count in snapshot.errors:
        errors.add_metric([kind], count)
    yield errors
    if snapshot.last_success_at is not None:
        yield _single(gauge_family(m.EXPORTER_LAST_SUCCESS), snapshot.last_success_at)


def _identity(snapshot: Snapshot) -> Iterator[Family]:
    info = info_family(m.INFO)
    driver = snapshot.system.driver_version if snapshot.system else ""
    cuda = snapshot.system.cuda_version if snapshot.system else ""
    for gpu in snapshot.gpus:
        info.add_metric([*_base(gpu.identity), driver, cuda, gpu.identity.pci_bus_id], {})
    yield info


def _up(gpus: Iterable[GpuReading], fresh: bool) -> Family:
    up = gauge_family(m.UP)
    for gpu in gpus:
        up.add_metric(_base(gpu.identity), 1.0 if gpu.up and fresh else 0.0)
    return up


def _readings(gpus: Iterable[GpuReading]) -> Iterator[Family]:
    by_name: dict[str, list[tuple[list[str], Sample]]] = defaultdict(list)
    for gpu in gpus:
        base = _base(gpu.identity)
        for sample in gpu.samples:
            by_name[sample.name].append((base, sample))
    for metric in m.PER_GPU:  # the declared order: stable output
        rows = by_name.get(metric.name)
        if rows:
            yield _family(metric, rows)


def _family(metric: m.GpuMetric, rows: list[tuple[list[str], Sample]]) -> Family:
    built = family(metric)
    for base, sample in rows:
        extra = dict(sample.labels)
        add_value(built, [*base, *(extra.get(label, "") for label in metric.extra_labels)],
                  sample.value)
    return built
