"""NVIDIA dcgm-exporter's series, as Governor's GPU board and GPU health alerts read them when the
spec says ``targets.gpu.source: dcgm``.

dcgm-exporter names a series after the DCGM field its collector CSV lists, and the names of the
shipped rows changed twice (docs/dcgm.md says where each name was read):

* up to 4.8.x: the rows of ``etc/default-counters.csv`` (read at tag 4.5.3-4.8.2): clocks in
  MHz, utilisation in percent, frame buffer in MiB;
* 4.9.0 (DCGM 4.7): the names DCGM deprecates become DCGM's current ones, and clocks move to
  hertz, utilisation to a 0-1 ratio, frame buffer to bytes;
* 4.10.0 (DCGM 4.8): the PCIe rates become ``…_BYTES_PER_SECOND``.

A :class:`Reading` lists the names of one quantity, newest first, each with the factor that turns
its value into Governor's base unit, so that one query reads whichever release a fleet runs (or
a fleet half upgraded) in one unit::

    >>> SM_CLOCK.base(())
    '(DCGM_FI_DEV_SM_CLOCK_HERTZ or DCGM_FI_DEV_SM_CLOCK * 1000000)'
    >>> [SM_CLOCK.in_release(release).unit for release in (RELEASE_4_8, RELEASE_4_10)]
    ['MHz', 'Hz']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Final, Literal

from governor.contracts.metrics import gpu
from governor.contracts.promql import Matcher, Selector, format_number, one_of

# ---- releases: whose shipped collectors first use a name -----------------------------------------
RELEASE_4_8: Final = "4.8"  # every release up to 4.8.x
RELEASE_4_9: Final = "4.9"
RELEASE_4_10: Final = "4.10"
RELEASES: Final = (RELEASE_4_8, RELEASE_4_9, RELEASE_4_10)

# Where a name was read (docs/dcgm.md cites each): a row of dcgm-exporter 4.5.3-4.8.2's shipped
# CSVs; DCGM 4.6.1's dcgm_fields.h (go-dcgm v1.4611.0), where it is the field's current name; the
# release notes of the dcgm-exporter release that introduced it; or only a compilation of DCGM
# 4.7's field reference, no NVIDIA source readable here (the name may differ in 4.9.0's CSV).
FROM_CSV: Final = "csv"
FROM_HEADER: Final = "header"
FROM_NOTES: Final = "notes"
FROM_DCGM_4_7: Final = "dcgm-4.7"

# ---- labels dcgm-exporter puts on every per-GPU series (render_metrics.go) -----------------------
LABEL_GPU: Final = "gpu"  # DCGM's GPU index
LABEL_UUID: Final = "UUID"  # "uuid" with --use-old-namespace
LABEL_PCI_BUS_ID: Final = "pci_bus_id"
LABEL_DEVICE: Final = "device"  # nvidia<index>
LABEL_MODEL: Final = "modelName"
LABEL_HOSTNAME_UNTIL_4_8_2: Final = "Hostname"
LABEL_HOSTNAME: Final = "hostname"  # from 4.8.3 (#655)
LABEL_MIG_PROFILE: Final = "GPU_I_PROFILE"
LABEL_MIG_INSTANCE: Final = "GPU_I_ID"
# The driver version is a "label" row of the CSV, so the label is named after its field.
LABEL_DRIVER_UNTIL_4_8: Final = "DCGM_FI_DRIVER_VERSION"
LABEL_DRIVER: Final = "DCGM_FI_SYSTEM_DRIVER_VERSION"  # 4.9.0
# On the XID field only: the code, and its text from dcgm-exporter's table.
LABEL_XID_CODE: Final = "err_code"
LABEL_XID_MESSAGE: Final = "err_msg"
# With Kubernetes pod mapping, the pod holding the GPU. A ServiceMonitor without honorLabels
# (the dcgm-exporter chart's default) keeps the target's own and renames these exported_*.
LABEL_POD: Final = "pod"
LABEL_NAMESPACE: Final = "namespace"
LABEL_CONTAINER: Final = "container"

MIB: Final = Decimal(1048576)
MEGA: Final = Decimal(1000000)
MILLI: Final = Decimal("0.001")
PERCENT: Final = Decimal("0.01")
NANO: Final = Decimal("0.000000001")

Kind = Literal["gauge", "counter"]


@dataclass(frozen=True, slots=True)
class Field:
    """One series dcgm-exporter exposes: a DCGM field under the name its collector row gives."""

    name: str
    field_id: int  # DCGM's id: two names with one id are aliases, reading the same value
    kind: Kind  # as the shipped row types it (dcgm-exporter writes the row's type as given)
    unit: str  # of the exposed value
    help: str  # the shipped row's text; for a name no shipped row read here has, one in its style
    source: str  # FROM_*
    to_base: Decimal = Decimal(1)  # Governor's base unit per unit of the value


@dataclass(frozen=True, slots=True)
class Reading:
    """One quantity under each of its names: ``(release whose collectors first use it, field)``,
    oldest first."""

    what: str
    names: tuple[tuple[str, Field], ...]
    default: bool  # an active row of the shipped default CSV; else the fleet adds the row
    governor: str = ""  # the gpu_* series of Governor's exporter that says the same

    def in_release(self, release: str) -> Field | None:
        """The name the collectors of ``release`` use; None where that release has none."""
        rank = RELEASES.index(release)
        named = [field for since, field in self.names if RELEASES.index(since) <= rank]
        return named[-1] if named else None

    @property
    def fields(self) -> tuple[Field, ...]:
        """Every name, newest first."""
        return tuple(field for _, field in reversed(self.names))

    def name_matcher(self) -> Matcher:
        """``__name__=~"new|old"``: every name (a variable's ``label_values`` reads it)."""
        return one_of("__name__", [field.name for field in self.fields])

    def base(self, matchers: tuple[Matcher, ...],
             over: Callable[[Selector], str] | None = None) -> str:
        """Every name's series in Governor's base unit, newest first, each kept only where no
        newer one has the same labels (PromQL's ``or``). ``over`` wraps each selector in a range
        function (``rate``) before the unit is converted."""
        terms = []
        for field in self.fields:
            selector = Selector(field.name, matchers)
            term = over(selector) if over else selector.render()
            if field.to_base != 1:
                term = f"{term} * {format_number(field.to_base)}"
            terms.append(term)
        return terms[0] if len(terms) == 1 else "(" + " or ".join(terms) + ")"


def _field(name: str, field_id: int, kind: Kind, unit: str, help: str, source: str,
           to_base: Decimal = Decimal(1)) -> Field:
    return Field(name, field_id, kind, unit, help, source, to_base)


def _same(what: str, field: Field, default: bool, governor: str = "") -> Reading:
    """A quantity whose name no release changed."""
    return Reading(what, ((RELEASE_4_8, field),), default, governor)


def _renamed(what: str, old: Field, new: Field, default: bool, governor: str = "",
             release: str = RELEASE_4_9) -> Reading:
    return Reading(what, ((RELEASE_4_8, old), (release, new)), default, governor)


# ---- activity ------------------------------------------------------------------------------------
GPU_UTIL: Final = _renamed(
    "GPU utilisation",
    _field("DCGM_FI_DEV_GPU_UTIL", 203, "gauge", "%", "GPU utilization (in %).", FROM_CSV,
           PERCENT),
    # In DCGM 4.6.x this name is an alias of field 203, still in percent; DCGM 4.7 gives the
    # ratio its own field. A 4.8.x fleet that lists it by hand reads 100x too high.
    _field("DCGM_FI_DEV_GPU_UTIL_RATIO", 1613, "gauge", "ratio",
           "GPU utilization (ratio, 0-1).", FROM_DCGM_4_7),
    True, gpu.UTILIZATION.name)
SM_ACTIVE: Final = _renamed(
    "SM active",
    _field("DCGM_FI_PROF_SM_ACTIVE", 1002, "gauge", "ratio",
           "The ratio of cycles an SM has at least 1 warp assigned.", FROM_CSV),
    _field("DCGM_FI_PROF_SM_UTIL_RATIO", 1002, "gauge", "ratio",
           "The ratio of cycles an SM has at least 1 warp assigned.", FROM_HEADER),
    False, gpu.SM_ACTIVE.name)
SM_OCCUPANCY: Final = _renamed(
    "SM occupancy",
    _field("DCGM_FI_PROF_SM_OCCUPANCY", 1003, "gauge", "ratio",
           "The ratio of number of warps resident on an SM.", FROM_CSV),
    _field("DCGM_FI_PROF_SM_OCCUPANCY_RATIO", 1003, "gauge", "ratio",
           "The ratio of number of warps resident on an SM.", FROM_HEADER),
    False, gpu.SM_OCCUPANCY.name)
TENSOR_ACTIVE: Final = _renamed(
    "tensor pipes active",
    _field("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 1004, "gauge", "ratio",
           "Ratio of cycles the tensor (HMMA) pipe is active.", FROM_CSV),
    _field("DCGM_FI_PROF_TENSOR_UTIL_RATIO", 1004, "gauge", "ratio",
           "Ratio of cycles the tensor (HMMA) pipe is active.", FROM_HEADER),
    True, gpu.TENSOR_ACTIVE.name)
DRAM_ACTIVE: Final = _renamed(
    "DRAM bandwidth",
    _field("DCGM_FI_PROF_DRAM_ACTIVE", 1005, "gauge", "ratio",
           "Ratio of cycles the device memory interface is active sending or receiving data.",
           FROM_CSV),
    _field("DCGM_FI_PROF_DRAM_UTIL_RATIO", 1005, "gauge", "ratio",
           "Ratio of cycles the device memory interface is active sending or receiving data.",
           FROM_HEADER),
    True, gpu.DRAM_BANDWIDTH_UTILIZATION.name)

# ---- memory --------------------------------------------------------------------------------------
FB_USED: Final = _renamed(
    "frame buffer used",
    _field("DCGM_FI_DEV_FB_USED", 252, "gauge", "MiB", "Framebuffer memory used (in MiB).",
           FROM_CSV, MIB),
    _field("DCGM_FI_DEV_FB_USED_BYTES", 1627, "gauge", "bytes",
           "Framebuffer memory used (in bytes).", FROM_DCGM_4_7),
    True, gpu.MEMORY_USED.name)
FB_FREE: Final = _renamed(
    "frame buffer free",
    _field("DCGM_FI_DEV_FB_FREE", 251, "gauge", "MiB", "Framebuffer memory free (in MiB).",
           FROM_CSV, MIB),
    _field("DCGM_FI_DEV_FB_FREE_BYTES", 1626, "gauge", "bytes",
           "Framebuffer memory free (in bytes).", FROM_DCGM_4_7),
    True, gpu.MEMORY_FREE.name)
# Collected by default from 4.9.0 (its release notes); before, the total is used + free.
FB_CAPACITY: Final = Reading(
    "frame buffer total",
    ((RELEASE_4_9, _field("DCGM_FI_DEV_FB_CAPACITY_BYTES", 1625, "gauge", "bytes",
                          "Total framebuffer memory (in bytes).", FROM_NOTES)),),
    True, gpu.MEMORY_TOTAL.name)

# ---- power, clocks, heat -------------------------------------------------------------------------
POWER: Final = _renamed(
    "power draw",
    _field("DCGM_FI_DEV_POWER_USAGE", 155, "gauge", "W", "Power draw (in W).", FROM_CSV),
    _field("DCGM_FI_DEV_BOARD_POWER_WATTS", 155, "gauge", "W", "Power draw (in W).",
           FROM_HEADER),
    True, gpu.POWER.name)
POWER_LIMIT: Final = _renamed(
    "enforced power limit",
    _field("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", 164, "gauge", "W",
           "Enforced power limit (in W).", FROM_NOTES),
    _field("DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS", 164, "gauge", "W",
           "Enforced power limit (in W).", FROM_HEADER),
    False, gpu.POWER_LIMIT.name)
SM_CLOCK: Final = _renamed(
    "SM clock",
    _field("DCGM_FI_DEV_SM_CLOCK", 100, "gauge", "MHz", "SM clock frequency (in MHz).",
           FROM_CSV, MEGA),
    _field("DCGM_FI_DEV_SM_CLOCK_HERTZ", 1603, "gauge", "Hz", "SM clock frequency (in Hz).",
           FROM_HEADER),
    True, gpu.CLOCK.name)
MEMORY_CLOCK: Final = _renamed(
    "memory clock",
    _field("DCGM_FI_DEV_MEM_CLOCK", 101, "gauge", "MHz", "Memory clock frequency (in MHz).",
           FROM_CSV, MEGA),
    _field("DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", 1604, "gauge", "Hz",
           "Memory clock frequency (in Hz).", FROM_HEADER),
    True, gpu.CLOCK.name)
GPU_TEMP: Final = _renamed(
    "GPU temperature",
    _field("DCGM_FI_DEV_GPU_TEMP", 150, "gauge", "C", "GPU temperature (in C).", FROM_CSV),
    _field("DCGM_FI_DEV_GPU_TEMP_CELSIUS", 150, "gauge", "C", "GPU temperature (in C).",
           FROM_HEADER),
    True, gpu.TEMPERATURE.name)
MEMORY_TEMP: Final = _renamed(
    "HBM temperature",
    _field("DCGM_FI_DEV_MEMORY_TEMP", 140, "gauge", "C", "Memory temperature (in C).",
           FROM_CSV),
    _field("DCGM_FI_DEV_MEMORY_TEMP_CELSIUS", 140, "gauge", "C", "Memory temperature (in C).",
           FROM_HEADER),
    True, gpu.MEMORY_TEMPERATURE.name)
# A counter since boot: millijoules up to 4.8, joules from 4.9 (tests/data/dcgm/'s samples).
ENERGY: Final = _renamed(
    "energy consumed",
    _field("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 156, "counter", "mJ",
           "Total energy consumption since boot (in mJ).", FROM_CSV, MILLI),
    _field("DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", 156, "counter", "J",
           "Total energy consumption since boot (in J).", FROM_DCGM_4_7),
    True, gpu.ENERGY.total)
# A bitmask of DCGM_CLOCKS_EVENT_REASON_*; no shipped row lists it under either name.
CLOCK_EVENT_REASONS: Final = _renamed(
    "clock-event reasons",
    _field("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", 112, "gauge", "bitmask",
           "Current clock throttle reasons (bitmask of DCGM_CLOCKS_THROTTLE_REASON_*).",
           FROM_HEADER),
    _field("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", 112, "gauge", "bitmask",
           "Current clock event reasons (bitmask of DCGM_CLOCKS_EVENT_REASON_*).", FROM_HEADER),
    False, gpu.CLOCK_EVENT_ACTIVE.name)
POWER_VIOLATION: Final = _same(
    "time held back by power", _field(
        "DCGM_FI_DEV_POWER_VIOLATION", 240, "counter", "ns",
        "Throttling duration due to power constraints (in ns).", FROM_CSV, NANO),
    False, gpu.CLOCK_EVENT_DURATION.total)
THERMAL_VIOLATION: Final = _same(
    "time held back by heat", _field(
        "DCGM_FI_DEV_THERMAL_VIOLATION", 241, "counter", "ns",
        "Throttling duration due to thermal constraints (in ns).", FROM_CSV, NANO),
    False, gpu.CLOCK_EVENT_DURATION.total)

# ---- errors and interconnect ---------------------------------------------------------------------
XID: Final = _renamed(
    "last XID code",
    _field("DCGM_FI_DEV_XID_ERRORS", 230, "gauge", "XID code",
           "Value of the last XID error encountered.", FROM_CSV),
    _field("DCGM_FI_DEV_XID_ERROR", 230, "gauge", "XID code",
           "Value of the last XID error encountered.", FROM_HEADER),
    True, gpu.XID_ERRORS.total)
ECC_UNCORRECTED: Final = _same(
    "uncorrected ECC errors", _field(
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", 313, "counter", "errors",
        "Total number of double-bit persistent ECC errors.", FROM_CSV),
    False, gpu.ECC_UNCORRECTED_ERRORS.total)
ECC_CORRECTED: Final = _same(
    "corrected ECC errors", _field(
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", 312, "counter", "errors",
        "Total number of single-bit persistent ECC errors.", FROM_CSV),
    False, gpu.ECC_CORRECTED_ERRORS.total)
ROW_REMAP_FAILED: Final = _renamed(
    "row remap failed",
    _field("DCGM_FI_DEV_ROW_REMAP_FAILURE", 395, "gauge", "",
           "Whether remapping of rows has failed", FROM_CSV),
    _field("DCGM_FI_DEV_ROW_REMAP_FAILED", 395, "gauge", "",
           "Whether remapping of rows has failed", FROM_HEADER),
    True, gpu.REMAPPED_ROWS_FAILURE.name)
ROW_REMAP_PENDING: Final = _same(
    "row remap pending", _field(
        "DCGM_FI_DEV_ROW_REMAP_PENDING", 396, "gauge", "",
        "Whether remapping of rows is pending", FROM_HEADER),
    False, gpu.REMAPPED_ROWS_PENDING.name)
PCIE_TX: Final = _renamed(
    "PCIe transmitted",
    _field("DCGM_FI_PROF_PCIE_TX_BYTES", 1009, "gauge", "B/s",
           "The rate of data transmitted over the PCIe bus - including both protocol headers "
           "and data payloads - in bytes per second.", FROM_CSV),
    _field("DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND", 1009, "gauge", "B/s",
           "The rate of data transmitted over the PCIe bus - including both protocol headers "
           "and data payloads - in bytes per second.", FROM_NOTES),
    True, gpu.PCIE_TRANSMIT_RATE.name, RELEASE_4_10)
PCIE_RX: Final = _renamed(
    "PCIe received",
    _field("DCGM_FI_PROF_PCIE_RX_BYTES", 1010, "gauge", "B/s",
           "The rate of data received over the PCIe bus - including both protocol headers "
           "and data payloads - in bytes per second.", FROM_CSV),
    _field("DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND", 1010, "gauge", "B/s",
           "The rate of data received over the PCIe bus - including both protocol headers "
           "and data payloads - in bytes per second.", FROM_NOTES),
    True, gpu.PCIE_RECEIVE_RATE.name, RELEASE_4_10)

# NVLink throughput (DCGM profiling, ids 1011/1012): rows a fleet adds to the collector CSV.
# No pinned exposition carries them (the sampled H200s ran on one GPU each), so they are kept
# out of READINGS, whose every name the pinned expositions are checked against.
NVLINK_TX: Final = _same(
    "NVLink transmitted", _field(
        "DCGM_FI_PROF_NVLINK_TX_BYTES", 1011, "gauge", "B/s",
        "The rate of data transmitted over NVLink, not including protocol headers, in bytes "
        "per second.", FROM_CSV),
    False, gpu.NVLINK_TRANSMIT_RATE.name)
NVLINK_RX: Final = _same(
    "NVLink received", _field(
        "DCGM_FI_PROF_NVLINK_RX_BYTES", 1012, "gauge", "B/s",
        "The rate of data received over NVLink, not including protocol headers, in bytes per "
        "second.", FROM_CSV),
    False, gpu.NVLINK_RECEIVE_RATE.name)
UNPINNED: Final = (NVLINK_TX, NVLINK_RX)

# Every reading Governor takes from dcgm-exporter, in docs/dcgm.md's order.
READINGS: Final = (
    GPU_UTIL, SM_ACTIVE, SM_OCCUPANCY, TENSOR_ACTIVE, DRAM_ACTIVE, FB_USED, FB_FREE, FB_CAPACITY,
    POWER, POWER_LIMIT, ENERGY, SM_CLOCK, MEMORY_CLOCK, GPU_TEMP, MEMORY_TEMP, CLOCK_EVENT_REASONS,
    POWER_VIOLATION, THERMAL_VIOLATION, XID, ECC_UNCORRECTED, ECC_CORRECTED, ROW_REMAP_FAILED,
    ROW_REMAP_PENDING, PCIE_TX, PCIE_RX,
)

# The reading every GPU reports in every release by default: what says a GPU is there (DCGM has
# no per-GPU "up"; a lost GPU's fields go blank and dcgm-exporter leaves blank values out).
PRESENCE: Final = GPU_TEMP

# The bits of DCGM_CLOCKS_EVENT_REASON_* (dcgm_fields.h), by Governor's reason names.
REASON_BITS: Final = {
    gpu.REASON_GPU_IDLE: 0x1, gpu.REASON_APPLICATIONS_CLOCKS: 0x2,
    gpu.REASON_SW_POWER_CAP: 0x4, gpu.REASON_HW_SLOWDOWN: 0x8, gpu.REASON_SYNC_BOOST: 0x10,
    gpu.REASON_SW_THERMAL: 0x20, gpu.REASON_HW_THERMAL: 0x40, gpu.REASON_HW_POWER_BRAKE: 0x80,
}


def memory_total(matchers: tuple[Matcher, ...]) -> str:
    """The frame buffer's size in bytes: 4.9.0's capacity field, else used + free (which leaves
    the driver's reserved share out, as ≤ 4.8's default rows do not list the total)."""
    (capacity,) = FB_CAPACITY.fields
    used, free = FB_USED.names[0][1], FB_FREE.names[0][1]
    return (f"({Selector(capacity.name, matchers)} or "
            f"({Selector(used.name, matchers)} + {Selector(free.name, matchers)})"
            f" * {format_number(MIB)})")


def any_reason(bitmask: str, reasons: Sequence[str]) -> str:
    """1 while any of ``reasons`` has its bit set in a clock-event bitmask, else 0."""
    terms = [f"floor({bitmask} / {bit}) % 2" if bit > 1 else f"{bitmask} % 2"
             for bit in sorted(REASON_BITS[reason] for reason in reasons)]
    return terms[0] if len(terms) == 1 else f"clamp_max({' + '.join(terms)}, 1)"
