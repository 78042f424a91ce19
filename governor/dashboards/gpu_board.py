"""The GPU board: what the exporter reads from NVML and GPM, per GPU.

Activity ratios (SM active and occupancy, tensor pipes, DRAM bandwidth) answer "is the GPU busy
with the right work"; memory, power, clocks and throttle reasons answer "is it allowed to be";
XID, ECC and remapped rows answer "is it healthy"; the exporter's own series say whether to
trust the rest.
"""

from __future__ import annotations

from typing import Final

from grafana_foundation_sdk.cog import builder as cog
from grafana_foundation_sdk.models import dashboard as dm

from governor.contracts.declaration import Metric
from governor.contracts.metrics import gpu as g
from governor.contracts.metrics import gpu_health as h
from governor.contracts.metrics.scrape import LABEL_INSTANCE as INSTANCE
from governor.contracts.promql import Matcher, Selector, increase, rate, regex, sum_by
from governor.dashboards.board import Board, BoardInfo, fleet_variables, label_variable
from governor.dashboards.panels import (
    BAD_COLOR,
    NAME_ONLY,
    WARN_COLOR,
    Line,
    Query,
    Spec,
    heatmap,
    stat,
    timeseries,
)
from governor.dashboards.variables import RATE_INTERVAL, ref, scope, variable
from governor.slo.spec import SloSpec

INFO: Final = BoardInfo(
    "governor-gpu", "Governor / GPU",
    "Per-GPU activity (SM, tensor, DRAM), memory, power, clocks, throttling and errors, as the "
    "GPU exporter reads them from NVML and GPM.")
LABELS: Final = scope(**{g.LABEL_GPU: variable(g.LABEL_GPU)})
EXPORTER_LABELS: Final = scope()
PER_GPU: Final = f"GPU {ref(g.LABEL_GPU)} {ref(INSTANCE)}"


def _series(metric: Metric, labels: tuple[Matcher, ...] = LABELS) -> str:
    return Selector(metric.series, labels).render()


def _counter(metric: Metric, labels: tuple[Matcher, ...] = LABELS) -> Selector:
    return Selector(metric.total, labels)


def _gauge(metric: Metric) -> Query:
    return Query(_series(metric), PER_GPU)


def _activity_row(board: Board) -> None:
    board.row("Activity")
    board.panel(stat(Spec("GPUs answering", "GPUs whose NVML handle answers (gpu_up = 1) out "
                          "of those the exporter knows.", "short", width=4, height=8),
                     Query(sum_by((), _series(g.UP)), instant=True),
                     base_color=BAD_COLOR, steps=[(1, "green")]))
    for title, about, metric in (
        ("SM active", "Share of time at least one warp is resident on an SM (GPM).",
         g.SM_ACTIVE),
        ("SM occupancy", "Resident warps over the maximum: low with SM active high means "
         "latency-bound kernels such as decode.", g.SM_OCCUPANCY),
    ):
        board.panel(timeseries(Spec(title, about, "percentunit", width=10), [_gauge(metric)],
                               max_value=1))
    for title, about, metric in (
        ("Tensor pipes active", "Share of cycles the tensor cores are busy: prefill is "
         "tensor-bound, decode is not.", g.TENSOR_ACTIVE),
        ("DRAM bandwidth", "Share of peak HBM bandwidth in use: decode steps read every "
         "weight and the KV cache, so they live here.", g.DRAM_BANDWIDTH_UTILIZATION),
        ("GPU utilization", "NVML's coarse utilization: share of time any kernel ran. Busy "
         "is not the same as efficient; read it with the GPM ratios.", g.UTILIZATION),
    ):
        board.panel(timeseries(Spec(title, about, "percentunit", width=8), [_gauge(metric)],
                               max_value=1))


HEATMAP_ABOUT: Final = (
    "Each row a GPU, each column a moment, darker where busier (0 to 100%): a GPU that idles "
    "while the others work, or a fleet that goes quiet together, shows at a glance.")


def activity_heatmaps(board: Board, sm_active: Query, dram: Query, *,
                      sm_about: str = "", dram_about: str = "") -> None:
    """SM activity and DRAM bandwidth per GPU over time (shared with the dcgm-exporter board)."""
    board.row("Activity heat maps")
    for title, about, query in (("SM active per GPU (heat map)", sm_about, sm_active),
                                ("DRAM bandwidth per GPU (heat map)", dram_about, dram)):
        board.panel(heatmap(Spec(title, f"{about} {HEATMAP_ABOUT}".strip(), "percentunit",
                                 height=7), query, max_value=1))


STATE_ABOUT: Final = (
    "Each GPU's recorded state, the worst of its reasons: 0 HEALTHY, 1 WARN (throttled, a "
    "remap pending, more processes than the spec allows, memory growing while the engine "
    "idles), 2 CRITICAL (lost, an XID or uncorrected ECC errors in the last 5 minutes, a failed "
    "remap). docs/runbooks.md has what to do in each state.")


def health_row(board: Board, labels: tuple[Matcher, ...], processes: cog.Builder[dm.Panel], *,
               about: str = "") -> None:
    """Each GPU's state and its reasons (shared with the dcgm-exporter board), then
    ``processes``: the process count, or a text panel where the exporter has none."""
    board.row("Health and leaks")
    board.panel(stat(Spec("GPU state", f"{STATE_ABOUT} {about}".strip(), "short", width=8,
                          height=8),
                     Query(Selector(h.STATE.name, labels).render(), PER_GPU, instant=True),
                     steps=[(h.WARN, WARN_COLOR), (h.CRITICAL, BAD_COLOR)], decimals=0))
    board.panel(timeseries(
        Spec("Health reasons", "Each reason's severity per GPU: 0 while it does not hold, 1 "
             "(WARN) or 2 (CRITICAL) while it does; the state is the highest.", "short",
             width=8),
        [Query(Selector(h.REASON.name, labels).render(), f"{ref(g.LABEL_REASON)} {PER_GPU}")],
        lines=[Line(h.WARN, WARN_COLOR), Line(h.CRITICAL)], max_value=h.CRITICAL))
    board.panel(processes)


def _processes(spec: SloSpec) -> cog.Builder[dm.Panel]:
    limit = spec.alerting.gpu_health.max_processes
    return timeseries(
        Spec("Processes per GPU", "Compute processes (CUDA contexts) on each GPU, from the "
             "call that reads memory per process. Above the line (alerting.gpu_health."
             "max_processes) for alerting.gpu_health.processes_for, the GPU is WARN: a leaked "
             "context that never exited, or a second tenant.", "short", width=8),
        [_gauge(g.PROCESS_COUNT)], lines=[Line(limit, WARN_COLOR)])


def _memory_power_row(board: Board) -> None:
    board.row("Memory, power and clocks")
    board.panel(timeseries(
        Spec("Memory used", "Framebuffer memory in use per GPU; vLLM reserves most of it for "
             "the KV cache at start-up.", "bytes", width=8),
        [_gauge(g.MEMORY_USED),
         Query(_series(g.MEMORY_TOTAL), f"total {PER_GPU}")]))
    board.panel(timeseries(
        Spec("Memory by process", "GPU memory held by each process, with its container.",
             "bytes", width=8),
        [Query(_series(g.PROCESS_MEMORY_USED),
               f"pid {ref(g.LABEL_PID)} {ref(g.LABEL_CONTAINER)} GPU {ref(g.LABEL_GPU)}")]))
    board.panel(timeseries(
        Spec("Power", "Board power draw, and the enforced power limit per GPU.", "watt",
             width=8),
        [_gauge(g.POWER), Query(_series(g.POWER_LIMIT), f"limit {PER_GPU}")]))
    board.panel(timeseries(
        Spec("Clocks", "SM and memory clocks; an SM clock below its boost value under load "
             "means throttling.", "hertz", width=8),
        [Query(_series(g.CLOCK), f"{ref(g.LABEL_CLOCK)} {PER_GPU}")]))
    board.panel(timeseries(
        Spec("Temperature", "GPU and HBM temperature.", "celsius", width=8),
        [Query(_series(g.TEMPERATURE), f"GPU {PER_GPU}"),
         Query(_series(g.MEMORY_TEMPERATURE), f"HBM {PER_GPU}")], min_value=None))
    board.panel(timeseries(
        Spec("Throttled share of time", "Share of time each clock-event reason held the "
             "clocks down (power cap, thermal, …), from NVML's violation counters.",
             "percentunit", width=8),
        [Query(sum_by((g.LABEL_GPU, INSTANCE, g.LABEL_REASON),
                      rate(_counter(g.CLOCK_EVENT_DURATION), RATE_INTERVAL)),
               f"{ref(g.LABEL_REASON)} {PER_GPU}")], max_value=1))


def _errors_row(board: Board) -> None:
    board.row("Errors and interconnect")
    board.panel(timeseries(
        Spec("XID errors", "Driver-reported XID errors by code (NVIDIA's XID catalog says "
             "whether a reset is needed). A series appears with a GPU's first XID.", "short",
             width=8),
        [Query(sum_by((g.LABEL_GPU, INSTANCE, g.LABEL_XID),
                      increase(_counter(g.XID_ERRORS), RATE_INTERVAL)),
               f"XID {ref(g.LABEL_XID)} {PER_GPU}")], bars=True))
    board.panel(timeseries(
        Spec("Memory errors", "ECC errors and row remapping: uncorrected errors or a pending "
             "or failed remap mean the GPU should be drained.", "short", width=8),
        [Query(sum_by((g.LABEL_GPU, INSTANCE),
                      rate(_counter(g.ECC_UNCORRECTED_ERRORS), RATE_INTERVAL)),
               f"ECC uncorrected/s {PER_GPU}"),
         Query(sum_by((g.LABEL_GPU, INSTANCE),
                      rate(_counter(g.ECC_CORRECTED_ERRORS), RATE_INTERVAL)),
               f"ECC corrected/s {PER_GPU}"),
         Query(_series(g.REMAPPED_ROWS_PENDING), f"remap pending {PER_GPU}"),
         Query(_series(g.REMAPPED_ROWS_FAILURE), f"remap failed {PER_GPU}")],
        lines=[Line(1)]))
    board.panel(timeseries(
        Spec("PCIe traffic", "Bytes per second over PCIe (host ↔ GPU), and replays of "
             "corrupted packets.", "Bps", width=8),
        [Query(_series(g.PCIE_TRANSMIT_RATE), f"tx {PER_GPU}"),
         Query(_series(g.PCIE_RECEIVE_RATE), f"rx {PER_GPU}")]))
    board.panel(timeseries(
        Spec("NVLink traffic", "Bytes per second over all of a GPU's NVLink links (GPM): "
             "tensor-parallel all-reduces live here, so a GPU whose traffic differs from its "
             "peers' is the one to look at.", "Bps", width=8),
        [Query(_series(g.NVLINK_TRANSMIT_RATE), f"tx {PER_GPU}"),
         Query(_series(g.NVLINK_RECEIVE_RATE), f"rx {PER_GPU}")]))


MIG_DEVICE: Final = (f"GPU {ref(g.LABEL_GPU)} GI {ref(g.LABEL_GPU_INSTANCE)} "
                     f"CI {ref(g.LABEL_COMPUTE_INSTANCE)} {ref(INSTANCE)}")


def _mig_row(board: Board) -> None:
    board.row("MIG and versions")
    board.panel(stat(
        Spec("MIG instances", "The MIG devices each GPU is split into, by profile (empty on "
             "GPUs without MIG mode).", "short", width=8, height=8),
        Query(f"count by ({g.LABEL_MIG_PROFILE}) ({_series(g.MIG_INFO)})",
              f"{ref(g.LABEL_MIG_PROFILE)}", instant=True)))
    board.panel(timeseries(
        Spec("MIG memory", "Memory in use on each MIG device, and its size.", "bytes",
             width=8),
        [Query(_series(g.MIG_MEMORY_USED), f"used {MIG_DEVICE}"),
         Query(_series(g.MIG_MEMORY_TOTAL), f"total {MIG_DEVICE}")]))
    board.panel(stat(
        Spec("Driver and CUDA", "The NVIDIA driver and the CUDA version it supports, as the "
             "exporter reads them from NVML, per host.", "short", width=8, height=8),
        Query(f"count by ({INSTANCE}, {g.LABEL_DRIVER_VERSION}, {g.LABEL_CUDA_VERSION}) "
              f"({_series(g.INFO)})",
              f"{ref(INSTANCE)} driver {ref(g.LABEL_DRIVER_VERSION)} CUDA "
              f"{ref(g.LABEL_CUDA_VERSION)}", instant=True), text_mode=NAME_ONLY))


def _exporter_row(board: Board) -> None:
    board.row("Exporter health")
    board.panel(timeseries(
        Spec("Sampling round", "Wall time of the exporter's last NVML round, and how old the "
             "snapshot a scrape serves is.", "s", width=8),
        [Query(_series(g.EXPORTER_COLLECT_DURATION, EXPORTER_LABELS), "round {{instance}}"),
         Query(_series(g.EXPORTER_SNAPSHOT_AGE, EXPORTER_LABELS), "snapshot age {{instance}}")]))
    board.panel(timeseries(
        Spec("Round phases", "Where a sampling round spends its time.", "s", width=8),
        [Query(_series(g.EXPORTER_PHASE_DURATION, EXPORTER_LABELS),
               f"{ref(g.LABEL_PHASE)} {ref(INSTANCE)}")], stacked=True))
    board.panel(timeseries(
        Spec("Exporter errors", "NVML errors by kind; not_supported is counted once per "
             "reading a GPU lacks.", "short", width=8),
        [Query(sum_by((g.LABEL_KIND,),
                      rate(_counter(g.EXPORTER_ERRORS, EXPORTER_LABELS), RATE_INTERVAL)),
               f"{ref(g.LABEL_KIND)}")], bars=True))


def gpu_board(spec: SloSpec, source: str) -> Board:
    board = Board(INFO, source)
    fleet_variables(board, spec.targets.gpu, g.UP.name)
    board.variable(label_variable(g.LABEL_GPU, g.LABEL_GPU, g.UP.name, title="GPU",
                                  extra=(regex(INSTANCE, variable(INSTANCE)),)))
    _activity_row(board)
    activity_heatmaps(board, _gauge(g.SM_ACTIVE), _gauge(g.DRAM_BANDWIDTH_UTILIZATION),
                      sm_about="Share of time a warp is resident on an SM (GPM).",
                      dram_about="Share of peak HBM bandwidth in use (GPM).")
    health_row(board, LABELS, _processes(spec))
    _memory_power_row(board)
    _errors_row(board)
    _mig_row(board)
    _exporter_row(board)
    return board


def build(spec: SloSpec, source: str) -> dm.Dashboard:
    return gpu_board(spec, source).build()
