"""``--names dcgm``: the same snapshot under dcgm-exporter's series names, labels and units.

A spec whose ``targets.gpu.source`` is ``dcgm`` reads NVIDIA's dcgm-exporter, not Governor's
exporter. To drill such a spec without DCGM, ``governor exporter --fake-gpus N --names dcgm``
renders the sampler's snapshot as dcgm-exporter 4.8 would: every reading
:mod:`governor.contracts.metrics.dcgm` declares, under the name its 4.8 collectors use, in that
name's unit (clocks in MHz, utilisation in percent, frame buffer in MiB), with dcgm-exporter's
labels (``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``, ``Hostname`` and the
driver version). The XID field is a gauge of the last XID code, labelled with it; the clock-event
reasons are one bitmask. NVLink throughput is served too, as by a dcgm-exporter whose collector
CSV adds its two profiling rows.

A GPU in MIG mode (``--fake-mig``) is shown as dcgm-exporter's default device option (``f``)
shows one: its GPU instances instead of the GPU, each series labelled with ``GPU_I_PROFILE``
and ``GPU_I_ID``. An instance reports its own frame buffer and profiling activity, the GPU's
clocks, temperatures, power and errors, and no ``DCGM_FI_DEV_GPU_UTIL`` (DCGM has none under
MIG); what the snapshot has no per-instance reading of (occupancy, PCIe, NVLink) is left out.

prometheus_client would add ``_total`` to a counter's name, which dcgm-exporter's counters do
not have, so this writes the text format (0.0.4) itself; it is the only format dcgm-exporter
serves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from decimal import Decimal

from governor.contracts.metrics import dcgm
from governor.contracts.metrics import gpu as m
from governor.exporters.gpu.readings import GpuReading, Snapshot

RELEASE = dcgm.RELEASE_4_8
# dcgm-exporter's text for an XID code (its xid_errors.go): the codes Governor's rules name.
XID_MESSAGES: Mapping[int, str] = {0: "No Error", 31: "GPU memory page fault",
                                   79: "GPU has fallen off the bus"}

Values = dict[str, list[tuple[dict[str, str], float]]]


def _values(reading: GpuReading) -> Values:
    """A GPU's samples by metric name: (extra labels, value)."""
    out: Values = {}
    for sample in reading.samples:
        out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def _one(name: str, **labels: str) -> Callable[[Values], float | None]:
    def read(values: Values) -> float | None:
        for extra, value in values.get(name, ()):
            if labels.items() <= extra.items():
                return value
        return None
    return read


def _summed(name: str, label: str, wanted: tuple[str, ...]) -> Callable[[Values], float | None]:
    def read(values: Values) -> float | None:
        found = [value for extra, value in values.get(name, ()) if extra.get(label) in wanted]
        return sum(found) if found else None
    return read


def _reasons(values: Values) -> float | None:
    rows = values.get(m.CLOCK_EVENT_ACTIVE.name)
    if not rows:
        return None
    return float(sum(dcgm.REASON_BITS[extra[m.LABEL_REASON]] for extra, value in rows
                     if value and extra.get(m.LABEL_REASON) in dcgm.REASON_BITS))


# Each reading this mode renders, and how its value (in Governor's base unit) is read from a
# GPU's samples; the XID gauge is rendered apart (it needs the last code, not a value).
SOURCES: tuple[tuple[dcgm.Reading, Callable[[Values], float | None]], ...] = (
    (dcgm.GPU_UTIL, _one(m.UTILIZATION.name)),
    (dcgm.SM_ACTIVE, _one(m.SM_ACTIVE.name)),
    (dcgm.SM_OCCUPANCY, _one(m.SM_OCCUPANCY.name)),
    (dcgm.TENSOR_ACTIVE, _one(m.TENSOR_ACTIVE.name)),
    (dcgm.DRAM_ACTIVE, _one(m.DRAM_BANDWIDTH_UTILIZATION.name)),
    (dcgm.FB_USED, _one(m.MEMORY_USED.name)),
    (dcgm.FB_FREE, _one(m.MEMORY_FREE.name)),
    (dcgm.FB_CAPACITY, _one(m.MEMORY_TOTAL.name)),
    (dcgm.POWER, _one(m.POWER.name)),
    (dcgm.POWER_LIMIT, _one(m.POWER_LIMIT.name)),
    (dcgm.ENERGY, _one(m.ENERGY.name)),
    (dcgm.SM_CLOCK, _one(m.CLOCK.name, clock="sm")),
    (dcgm.MEMORY_CLOCK, _one(m.CLOCK.name, clock="memory")),
    (dcgm.GPU_TEMP, _one(m.TEMPERATURE.name)),
    (dcgm.MEMORY_TEMP, _one(m.MEMORY_TEMPERATURE.name)),
    (dcgm.CLOCK_EVENT_REASONS, _reasons),
    (dcgm.POWER_VIOLATION, _summed(m.CLOCK_EVENT_DURATION.name, m.LABEL_REASON,
                                   m.POWER_REASONS)),
    (dcgm.THERMAL_VIOLATION, _summed(m.CLOCK_EVENT_DURATION.name, m.LABEL_REASON,
                                     m.THERMAL_REASONS)),
    (dcgm.ECC_UNCORRECTED, _one(m.ECC_UNCORRECTED_ERRORS.name)),
    (dcgm.ECC_CORRECTED, _one(m.ECC_CORRECTED_ERRORS.name)),
    (dcgm.ROW_REMAP_FAILED, _one(m.REMAPPED_ROWS_FAILURE.name)),
    (dcgm.ROW_REMAP_PENDING, _one(m.REMAPPED_ROWS_PENDING.name)),
    (dcgm.PCIE_TX, _one(m.PCIE_TRANSMIT_RATE.name)),
    (dcgm.PCIE_RX, _one(m.PCIE_RECEIVE_RATE.name)),
    (dcgm.NVLINK_TX, _one(m.NVLINK_TRANSMIT_RATE.name)),
    (dcgm.NVLINK_RX, _one(m.NVLINK_RECEIVE_RATE.name)),
)

# A GPU instance's own readings, in place of the GPU's; and the GPU's readings it does not have.
PER_INSTANCE: Mapping[str, str] = {
    m.SM_ACTIVE.name: m.MIG_SM_ACTIVE.name,
    m.TENSOR_ACTIVE.name: m.MIG_TENSOR_ACTIVE.name,
    m.DRAM_BANDWIDTH_UTILIZATION.name: m.MIG_DRAM_BANDWIDTH_UTILIZATION.name,
}
NOT_PER_INSTANCE = frozenset({
    m.UTILIZATION.name, m.SM_OCCUPANCY.name, m.MEMORY_TOTAL.name, m.PCIE_TRANSMIT_RATE.name,
    m.PCIE_RECEIVE_RATE.name, m.NVLINK_TRANSMIT_RATE.name, m.NVLINK_RECEIVE_RATE.name,
})
Entity = tuple[list[tuple[str, str]], Values]  # a GPU, or a GPU instance: its labels, its values
_MIG_LABELS_AT = 5  # GPU_I_PROFILE and GPU_I_ID go after modelName (dcgm-exporter's order)


def mig_profile(device_name: str) -> str:
    """``NVIDIA H200 MIG 1g.18gb`` → ``1g.18gb``, as dcgm-exporter's GPU_I_PROFILE has it."""
    return device_name.rsplit("MIG ", 1)[-1]


def instances(base: list[tuple[str, str]], values: Values) -> list[Entity]:
    """A MIG GPU's instances, each with its labels and values; [] for a GPU without MIG."""
    entities = []
    for info, _ in values.get(m.MIG_INFO.name, ()):
        gi = info[m.LABEL_GPU_INSTANCE]
        ids = {m.LABEL_GPU_INSTANCE: gi, m.LABEL_COMPUTE_INSTANCE: info[m.LABEL_COMPUTE_INSTANCE]}
        own: Values = {name: rows for name, rows in values.items()
                       if name not in NOT_PER_INSTANCE and name not in PER_INSTANCE}
        used = _one(m.MIG_MEMORY_USED.name, **ids)(values)
        total = _one(m.MIG_MEMORY_TOTAL.name, **ids)(values)
        own[m.MEMORY_USED.name] = [({}, used)] if used is not None else []
        own[m.MEMORY_FREE.name] = [({}, total - used)] \
            if used is not None and total is not None else []
        for name, mig_name in PER_INSTANCE.items():
            value = _one(mig_name, **{m.LABEL_GPU_INSTANCE: gi})(values)
            own[name] = [({}, value)] if value is not None else []
        labels = [(dcgm.LABEL_MIG_PROFILE, mig_profile(info[m.LABEL_MIG_PROFILE])),
                  (dcgm.LABEL_MIG_INSTANCE, gi)]
        entities.append((base[:_MIG_LABELS_AT] + labels + base[_MIG_LABELS_AT:], own))
    return entities


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _number(value: float) -> str:
    """dcgm-exporter writes integers as integers and doubles with six decimals."""
    return str(int(value)) if value.is_integer() else f"{value:f}"


def _labels(pairs: list[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{key}="{_escape(value)}"' for key, value in pairs) + "}"


class DcgmView:
    """Renders snapshots as dcgm-exporter 4.8 would. It keeps one thing between snapshots: each
    GPU's XID counts, to tell which code came last (the snapshot has counts, not their order)."""

    def __init__(self, hostname: str) -> None:
        self._hostname = hostname
        self._xid_counts: dict[str, dict[str, float]] = {}
        self._last_xid: dict[str, int] = {}

    def render(self, snapshot: Snapshot, *, fresh: bool) -> bytes:
        """The exposition; nothing at all while the readings are stale (dcgm-exporter leaves
        blank values out)."""
        if not fresh or not snapshot.nvml_up:
            return b""
        driver = snapshot.system.driver_version if snapshot.system else ""
        entities = [entity for gpu in snapshot.gpus if gpu.up
                    for entity in self._entities(gpu, driver)]
        lines: list[str] = []
        for reading, read in SOURCES:
            field = reading.in_release(RELEASE)
            if field is None:
                continue
            rows = [(base, value) for base, values in entities
                    if (value := read(values)) is not None]
            if rows:
                lines += self._family(field, [(base, to_field_unit(value, field))
                                              for base, value in rows])
        lines += self._xids(snapshot, driver)
        return "".join(line + "\n" for line in lines).encode()

    def _entities(self, gpu: GpuReading, driver: str) -> list[Entity]:
        """The GPU, or its GPU instances when MIG mode is on (dcgm-exporter's ``-d f``)."""
        base, values = self._base(gpu, driver), _values(gpu)
        return instances(base, values) or [(base, values)]

    def _base(self, gpu: GpuReading, driver: str) -> list[tuple[str, str]]:
        identity = gpu.identity
        return [(dcgm.LABEL_GPU, str(identity.index)), (dcgm.LABEL_UUID, identity.uuid),
                (dcgm.LABEL_PCI_BUS_ID, identity.pci_bus_id),
                (dcgm.LABEL_DEVICE, f"nvidia{identity.index}"),
                (dcgm.LABEL_MODEL, identity.model),
                (dcgm.LABEL_HOSTNAME_UNTIL_4_8_2, self._hostname),
                (dcgm.LABEL_DRIVER_UNTIL_4_8, driver)]

    @staticmethod
    def _family(field: dcgm.Field, rows: list[tuple[list[tuple[str, str]], float]]
                ) -> Iterator[str]:
        yield f"# HELP {field.name} {field.help}"
        yield f"# TYPE {field.name} {field.kind}"
        for labels, value in rows:
            yield f"{field.name}{_labels(labels)} {_number(value)}"

    def _xids(self, snapshot: Snapshot, driver: str) -> list[str]:
        field = dcgm.XID.in_release(RELEASE)
        assert field is not None
        rows = []
        for gpu in snapshot.gpus:
            if not gpu.up:
                continue
            code = self._last(gpu)
            extra = [(dcgm.LABEL_XID_CODE, str(code)),
                     (dcgm.LABEL_XID_MESSAGE, XID_MESSAGES.get(code, f"XID {code}"))]
            rows += [(base + extra, float(code)) for base, _ in self._entities(gpu, driver)]
        return list(self._family(field, rows)) if rows else []

    def _last(self, gpu: GpuReading) -> int:
        """The code whose count grew most recently (0 before any XID)."""
        uuid = gpu.identity.uuid
        counts = {dict(s.labels)[m.LABEL_XID]: s.value for s in gpu.samples
                  if s.name == m.XID_ERRORS.name}
        before = self._xid_counts.get(uuid, {})
        grown = [code for code, count in counts.items() if count > before.get(code, 0.0)]
        if grown:
            self._last_xid[uuid] = int(max(grown, key=lambda code: counts[code] - before.get(
                code, 0.0)))
        self._xid_counts[uuid] = counts
        return self._last_xid.get(uuid, 0)


# The units of DCGM's integer fields (the others are doubles: watts, ratios, bytes per second).
INTEGER_UNITS = frozenset({"MHz", "%", "MiB", "ns", "C", "errors", "bitmask", "XID code", ""})


def to_field_unit(value: float, field: dcgm.Field) -> float:
    """A value in Governor's base unit, in ``field``'s own (bytes → MiB, ratio → %, Hz → MHz),
    whole where DCGM's field is an integer."""
    converted = float(Decimal(repr(value)) / field.to_base)
    return float(round(converted)) if field.unit in INTEGER_UNITS else converted
