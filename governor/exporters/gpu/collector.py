"""Snapshot → Prometheus metric families. Pure: no NVML, no clock, no registry.

A stale snapshot (the sampler stopped answering) keeps the exporter's health series and
``gpu_up 0``; its readings are withheld rather than served as if they were current.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)

from governor.exporters.gpu import catalog
from governor.exporters.gpu import metric_names as m
from governor.exporters.gpu.readings import GpuIdentity, GpuReading, Sample, Snapshot

BASE_LABELS = (m.LABEL_GPU, m.LABEL_UUID, m.LABEL_MODEL)


def _info_name(name: str) -> str:
    return name.removesuffix("_info")


def _help(name: str) -> str:
    spec = catalog.OWN.get(name) or catalog.PER_GPU[name]
    return spec.help


def _base(identity: GpuIdentity) -> list[str]:
    return [str(identity.index), identity.uuid, identity.model]


def families(snapshot: Snapshot, *, fresh: bool, version: str) -> list[Metric]:
    """Every family for this snapshot, in a stable order (health, identity, then readings)."""
    out: list[Metric] = list(_health(snapshot, version))
    if snapshot.nvml_up:
        out.extend(_identity(snapshot))
        out.append(_up(snapshot.gpus, fresh))
        if fresh:
            out.extend(_readings(snapshot.gpus))
    return out


def age_family(age_seconds: float) -> Metric:
    """Rendered per scrape (the only value that changes between two rounds)."""
    family = GaugeMetricFamily(m.EXPORTER_SNAPSHOT_AGE, _help(m.EXPORTER_SNAPSHOT_AGE))
    family.add_metric([], max(age_seconds, 0.0))
    return family


def _health(snapshot: Snapshot, version: str) -> Iterator[Metric]:
    build = InfoMetricFamily(_info_name(m.EXPORTER_BUILD_INFO), _help(m.EXPORTER_BUILD_INFO))
    build.add_metric([], {m.LABEL_VERSION: version, m.LABEL_SOURCE: snapshot.source})
    yield build
    yield GaugeMetricFamily(m.EXPORTER_NVML_UP, _help(m.EXPORTER_NVML_UP),
                            value=1.0 if snapshot.nvml_up else 0.0)
    yield GaugeMetricFamily(m.EXPORTER_COLLECT_DURATION, _help(m.EXPORTER_COLLECT_DURATION),
                            value=snapshot.collect_seconds)
    phases = GaugeMetricFamily(m.EXPORTER_PHASE_DURATION, _help(m.EXPORTER_PHASE_DURATION),
                               labels=[m.LABEL_PHASE])
    for phase, seconds in snapshot.phase_seconds:
        phases.add_metric([phase], seconds)
    yield phases
    yield CounterMetricFamily(m.EXPORTER_CPU, _help(m.EXPORTER_CPU),
                              value=snapshot.cpu_seconds_total)
    yield CounterMetricFamily(m.EXPORTER_COLLECTIONS, _help(m.EXPORTER_COLLECTIONS),
                              value=snapshot.collections_total)
    errors = CounterMetricFamily(m.EXPORTER_ERRORS, _help(m.EXPORTER_ERRORS), labels=[m.LABEL_KIND])
    for kind, count in snapshot.errors:
        errors.add_metric([kind], count)
    yield errors
    if snapshot.last_success_at is not None:
        yield GaugeMetricFamily(m.EXPORTER_LAST_SUCCESS, _help(m.EXPORTER_LAST_SUCCESS),
                                value=snapshot.last_success_at)


def _identity(snapshot: Snapshot) -> Iterator[Metric]:
    info = InfoMetricFamily(_info_name(m.INFO), _help(m.INFO), labels=list(BASE_LABELS))
    driver = snapshot.system.driver_version if snapshot.system else ""
    cuda = snapshot.system.cuda_version if snapshot.system else ""
    for gpu in snapshot.gpus:
        info.add_metric(_base(gpu.identity), {
            m.LABEL_DRIVER_VERSION: driver, m.LABEL_CUDA_VERSION: cuda,
            m.LABEL_PCI_BUS_ID: gpu.identity.pci_bus_id,
        })
    yield info


def _up(gpus: Iterable[GpuReading], fresh: bool) -> Metric:
    up = GaugeMetricFamily(m.UP, _help(m.UP), labels=list(BASE_LABELS))
    for gpu in gpus:
        up.add_metric(_base(gpu.identity), 1.0 if gpu.up and fresh else 0.0)
    return up


def _readings(gpus: Iterable[GpuReading]) -> Iterator[Metric]:
    by_name: dict[str, list[tuple[list[str], Sample]]] = defaultdict(list)
    for gpu in gpus:
        base = _base(gpu.identity)
        for sample in gpu.samples:
            by_name[sample.name].append((base, sample))
    for name, spec in catalog.PER_GPU.items():  # catalog order: stable output
        rows = by_name.get(name)
        if rows:
            yield _family(spec, rows)


def _family(spec: catalog.MetricSpec, rows: list[tuple[list[str], Sample]]) -> Metric:
    label_names = [*BASE_LABELS, *spec.labels]
    if spec.kind == "info":
        info = InfoMetricFamily(_info_name(spec.name), spec.help, labels=list(BASE_LABELS))
        for base, sample in rows:
            info.add_metric(base, dict(sample.labels))
        return info
    family: GaugeMetricFamily | CounterMetricFamily
    if spec.kind == "counter":
        family = CounterMetricFamily(spec.name, spec.help, labels=label_names)
    else:
        family = GaugeMetricFamily(spec.name, spec.help, labels=label_names)
    for base, sample in rows:
        extra = dict(sample.labels)
        family.add_metric([*base, *(extra.get(label, "") for label in spec.labels)], sample.value)
    return family
