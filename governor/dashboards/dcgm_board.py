"""The GPU board when the spec's GPUs are NVIDIA's dcgm-exporter (``targets.gpu.source: dcgm``).

The same rows and panels as Governor's own GPU board, each query reading a DCGM field under its
names of every dcgm-exporter release, converted to the unit the panel shows (clocks in hertz,
memory in bytes, ratios in 0-1), so one board serves a fleet on 4.8, 4.9 or 4.10, or half
upgraded. What DCGM does not report (per-process memory, the exporter's own sampling) is a text
panel that says so; the exporter's row shows what Prometheus knows of every scrape instead.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

from grafana_foundation_sdk.models import dashboard as dm

from governor.contracts.metrics import dcgm
from governor.contracts.metrics.scrape import LABEL_INSTANCE as INSTANCE
from governor.contracts.metrics.scrape import SCRAPE_DURATION, SCRAPE_SAMPLES
from governor.contracts.promql import Matcher, Selector, max_by, ne, rate, regex, sum_by
from governor.dashboards import gpu_board
from governor.dashboards.board import Board, fleet_variables, label_variable
from governor.dashboards.panels import (
    BAD_COLOR,
    NAME_ONLY,
    Line,
    Query,
    Spec,
    stat,
    text,
    timeseries,
)
from governor.dashboards.variables import RATE_INTERVAL, ref, scope, variable
from governor.slo.spec import SloSpec

INFO: Final = replace(
    gpu_board.INFO,
    purpose="Per-GPU activity (SM, tensor, DRAM), memory, power, clocks, throttling and errors, "
            "as NVIDIA's dcgm-exporter reports them (the field names of every release, in one "
            "unit).")
LABELS: Final = scope(**{dcgm.LABEL_GPU: variable(dcgm.LABEL_GPU)})
EXPORTER_LABELS: Final = scope()
PER_GPU: Final = f"GPU {ref(dcgm.LABEL_GPU)} {ref(INSTANCE)}"
BY_GPU: Final = (dcgm.LABEL_GPU, INSTANCE)
NOT_IN_DCGM: Final = "**Not in DCGM.**"


def _names(reading: dcgm.Reading) -> str:
    return " / ".join(field.name for field in reversed(reading.fields))


def _about(text: str, *readings: dcgm.Reading) -> str:
    """A panel's description, and what to add to dcgm-exporter's collector CSV for it."""
    missing = [reading for reading in readings if not reading.default]
    if not missing:
        return text
    rows = "; ".join(_names(reading) for reading in missing)
    return (f"{text} Not collected by default: add the rows ({rows}) to dcgm-exporter's "
            "collector CSV.")


def _gauge(reading: dcgm.Reading, legend: str = PER_GPU,
           labels: tuple[Matcher, ...] = LABELS) -> Query:
    return Query(reading.base(labels), legend)


def _rate(reading: dcgm.Reading) -> str:
    """Per second, per GPU, in the base unit (a nanosecond counter: seconds per second)."""
    return sum_by(BY_GPU, reading.base(LABELS, lambda s: rate(s, RATE_INTERVAL)))


def _activity_row(board: Board) -> None:
    board.row("Activity")
    board.panel(stat(Spec("GPUs answering", "GPUs that report a temperature through "
                          "dcgm-exporter (a GPU in MIG mode once, not once per GPU instance). "
                          "DCGM has no per-GPU up: a lost GPU's fields go blank and the "
                          "exporter leaves them out.", "short", width=4, height=8),
                     Query(f"count({max_by(BY_GPU, dcgm.PRESENCE.base(LABELS))})",
                           instant=True),
                     base_color=BAD_COLOR, steps=[(1, "green")]))
    for title, about, reading in (
        ("SM active", "Share of time at least one warp is resident on an SM (DCGM profiling).",
         dcgm.SM_ACTIVE),
        ("SM occupancy", "Resident warps over the maximum: low with SM active high means "
         "latency-bound kernels such as decode.", dcgm.SM_OCCUPANCY),
    ):
        board.panel(timeseries(Spec(title, _about(about, reading), "percentunit", width=10),
                               [_gauge(reading)], max_value=1))
    for title, about, reading in (
        ("Tensor pipes active", "Share of cycles the tensor cores are busy: prefill is "
         "tensor-bound, decode is not.", dcgm.TENSOR_ACTIVE),
        ("DRAM bandwidth", "Share of cycles the memory interface moves data: decode steps read "
         "every weight and the KV cache, so they live here.", dcgm.DRAM_ACTIVE),
        ("GPU utilization", "NVML's coarse utilization (percent before 4.9, a ratio since): "
         "share of time any kernel ran. Busy is not the same as efficient; read it with the "
         "profiling ratios.", dcgm.GPU_UTIL),
    ):
        board.panel(timeseries(Spec(title, _about(about, reading), "percentunit", width=8),
                               [_gauge(reading)], max_value=1))


def _memory_power_row(board: Board) -> None:
    board.row("Memory, power and clocks")
    board.panel(timeseries(
        Spec("Memory used", "Framebuffer memory in use per GPU (MiB before 4.9, bytes since); "
             "the total is 4.9's capacity field, else used + free, which leaves the driver's "
             "reserved share out.", "bytes", width=8),
        [_gauge(dcgm.FB_USED), Query(dcgm.memory_total(LABELS), f"total {PER_GPU}")]))
    board.panel(text(
        "Memory by process",
        f"{NOT_IN_DCGM} dcgm-exporter reports a GPU's framebuffer per GPU (or MIG instance), "
        f"not per process. With Kubernetes pod mapping, `{_names(dcgm.FB_USED)}` carries the "
        f"pod that holds the GPU (`{dcgm.LABEL_POD}`, `{dcgm.LABEL_CONTAINER}`; `exported_…` "
        "where the ServiceMonitor does not honor labels): split *Memory used* by them for the "
        "view per pod.", width=8, height=8))
    board.panel(timeseries(
        Spec("Power", _about("Board power draw, and the enforced power limit per GPU.",
                             dcgm.POWER_LIMIT), "watt", width=8),
        [_gauge(dcgm.POWER), _gauge(dcgm.POWER_LIMIT, f"limit {PER_GPU}")]))
    board.panel(timeseries(
        Spec("Clocks", "SM and memory clocks (MHz before 4.9, hertz since); an SM clock below "
             "its boost value under load means throttling.", "hertz", width=8),
        [_gauge(dcgm.SM_CLOCK, f"sm {PER_GPU}"),
         _gauge(dcgm.MEMORY_CLOCK, f"memory {PER_GPU}")]))
    board.panel(timeseries(
        Spec("Temperature", "GPU and HBM temperature.", "celsius", width=8),
        [_gauge(dcgm.GPU_TEMP, f"GPU {PER_GPU}"), _gauge(dcgm.MEMORY_TEMP, f"HBM {PER_GPU}")],
        min_value=None))
    board.panel(timeseries(
        Spec("Throttled share of time", _about(
            "Share of time power or thermal limits held the clocks down, from DCGM's violation "
            "counters (nanoseconds).", dcgm.POWER_VIOLATION, dcgm.THERMAL_VIOLATION),
            "percentunit", width=8),
        [Query(_rate(dcgm.POWER_VIOLATION), f"power {PER_GPU}"),
         Query(_rate(dcgm.THERMAL_VIOLATION), f"thermal {PER_GPU}")], max_value=1))


def _errors_row(board: Board) -> None:
    board.row("Errors and interconnect")
    xid = (*BY_GPU, dcgm.LABEL_XID_CODE, dcgm.LABEL_XID_MESSAGE)
    board.panel(timeseries(
        Spec("XID errors", "The last XID each GPU raised (NVIDIA's XID catalog says whether a "
             "reset is needed). dcgm-exporter keeps only the last code, so a repeat of the same "
             "code does not show.", "short", width=8),
        [Query(f"{max_by(xid, dcgm.XID.base(LABELS))} > 0",
               f"XID {ref(dcgm.LABEL_XID_CODE)} {ref(dcgm.LABEL_XID_MESSAGE)} {PER_GPU}")]))
    board.panel(timeseries(
        Spec("Memory errors", _about(
            "ECC errors and row remapping: uncorrected errors or a pending or failed remap mean "
            "the GPU should be drained.", dcgm.ECC_UNCORRECTED, dcgm.ECC_CORRECTED,
            dcgm.ROW_REMAP_PENDING),
            "short", width=8),
        [Query(_rate(dcgm.ECC_UNCORRECTED), f"ECC uncorrected/s {PER_GPU}"),
         Query(_rate(dcgm.ECC_CORRECTED), f"ECC corrected/s {PER_GPU}"),
         _gauge(dcgm.ROW_REMAP_PENDING, f"remap pending {PER_GPU}"),
         _gauge(dcgm.ROW_REMAP_FAILED, f"remap failed {PER_GPU}")],
        lines=[Line(1)]))
    board.panel(timeseries(
        Spec("PCIe traffic", "Bytes per second over PCIe (host ↔ GPU), headers included "
             "(DCGM profiling).", "Bps", width=8),
        [_gauge(dcgm.PCIE_TX, f"tx {PER_GPU}"), _gauge(dcgm.PCIE_RX, f"rx {PER_GPU}")]))
    board.panel(timeseries(
        Spec("NVLink traffic", _about("Bytes per second over all of a GPU's NVLink links "
             "(DCGM profiling): tensor-parallel all-reduces live here.", dcgm.NVLINK_TX),
             "Bps", width=8),
        [_gauge(dcgm.NVLINK_TX, f"tx {PER_GPU}"), _gauge(dcgm.NVLINK_RX, f"rx {PER_GPU}")]))


MIG_LABELS: Final = (*LABELS, ne(dcgm.LABEL_MIG_INSTANCE, ""))
MIG_DEVICE: Final = f"GPU {ref(dcgm.LABEL_GPU)} GI {ref(dcgm.LABEL_MIG_INSTANCE)} {ref(INSTANCE)}"
DRIVERS: Final = (dcgm.LABEL_DRIVER_UNTIL_4_8, dcgm.LABEL_DRIVER)


def _mig_row(board: Board) -> None:
    board.row("MIG and versions")
    instances = (*BY_GPU, dcgm.LABEL_MIG_INSTANCE, dcgm.LABEL_MIG_PROFILE)
    board.panel(stat(
        Spec("MIG instances", "The GPU instances each GPU is split into, by profile: "
             "dcgm-exporter labels a MIG instance's series with GPU_I_PROFILE and GPU_I_ID "
             "(empty on GPUs without MIG mode).", "short", width=8, height=8),
        Query(f"count by ({dcgm.LABEL_MIG_PROFILE}) "
              f"({max_by(instances, dcgm.FB_USED.base(MIG_LABELS))})",
              ref(dcgm.LABEL_MIG_PROFILE), instant=True)))
    board.panel(timeseries(
        Spec("MIG memory", "Memory in use on each GPU instance, and its size (used + free).",
             "bytes", width=8),
        [_gauge(dcgm.FB_USED, f"used {MIG_DEVICE}", MIG_LABELS),
         Query(dcgm.memory_total(MIG_LABELS), f"total {MIG_DEVICE}")]))
    board.panel(stat(
        Spec("Driver and CUDA", "The NVIDIA driver each host runs, from the label dcgm-exporter "
             "puts on every series (DCGM_FI_DRIVER_VERSION, DCGM_FI_SYSTEM_DRIVER_VERSION from "
             "4.9). The CUDA version is not among DCGM's default fields.", "short", width=8,
             height=8),
        Query(f"count by ({INSTANCE}, {', '.join(DRIVERS)}) "
              f"({dcgm.PRESENCE.base(EXPORTER_LABELS)})",
              f"{ref(INSTANCE)} driver {''.join(ref(d) for d in DRIVERS)}", instant=True),
        text_mode=NAME_ONLY))


def _exporter_row(board: Board) -> None:
    board.row("Exporter health")
    board.panel(timeseries(
        Spec("Scrape duration", "How long Prometheus takes to scrape each dcgm-exporter; near "
             "the scrape timeout, readings go missing.", "s", width=8),
        [Query(Selector(SCRAPE_DURATION.name, EXPORTER_LABELS).render(), "{{instance}}")]))
    board.panel(timeseries(
        Spec("Samples per scrape", "Series each dcgm-exporter exposes: a drop means fields "
             "went blank (a lost GPU, profiling paused by another tool).", "short", width=8),
        [Query(Selector(SCRAPE_SAMPLES.name, EXPORTER_LABELS).render(), "{{instance}}")]))
    board.panel(text(
        "Exporter internals",
        f"{NOT_IN_DCGM} Governor's exporter reports its sampling round, the round's phases "
        "and its NVML errors by kind; dcgm-exporter has no counterpart, so this row shows what "
        "Prometheus measures of every scrape instead.", width=8, height=8))


def dcgm_board(spec: SloSpec, source: str) -> Board:
    board = Board(INFO, source)
    presence = dcgm.PRESENCE.name_matcher()
    fleet_variables(board, spec.targets.gpu, presence)
    board.variable(label_variable(dcgm.LABEL_GPU, dcgm.LABEL_GPU, presence, title="GPU",
                                  extra=(regex(INSTANCE, variable(INSTANCE)),)))
    _activity_row(board)
    gpu_board.activity_heatmaps(
        board, _gauge(dcgm.SM_ACTIVE), _gauge(dcgm.DRAM_ACTIVE),
        sm_about=_about("Share of time a warp is resident on an SM (DCGM profiling).",
                        dcgm.SM_ACTIVE),
        dram_about=_about("Share of cycles the memory interface moves data (DCGM profiling).",
                          dcgm.DRAM_ACTIVE))
    gpu_board.health_row(
        board, LABELS, text(
            "Processes per GPU",
            f"{NOT_IN_DCGM} dcgm-exporter exposes no process on a GPU, so the count of "
            "processes and the memory of each are not here, and neither are the two reasons "
            "they give (a count held above alerting.gpu_health.max_processes, memory growing "
            "while the engine idles). Run Governor's exporter beside it for them.",
            width=8, height=8),
        about="From dcgm-exporter's fields: a lost GPU (its temperature gone), a new XID "
              "code, uncorrected ECC, row remapping and the clock-event bitmask.")
    _memory_power_row(board)
    _errors_row(board)
    _mig_row(board)
    _exporter_row(board)
    return board


def build(spec: SloSpec, source: str) -> dm.Dashboard:
    return dcgm_board(spec, source).build()
