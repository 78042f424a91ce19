"""The GPUs' health alerts on NVIDIA's dcgm-exporter (``targets.gpu.source: dcgm``).

The same alerts, names and labels as on Governor's exporter wherever DCGM reports what they
need, each reading its field under the names of every dcgm-exporter release, in one unit. Their
scenarios mix the releases: a GPU that breaks under the names of 4.8 and one under those of 4.9
must both fire, healthy GPUs of either must not. ``GpuExporterStale`` has no counterpart (DCGM
exposes no time of its last read).

What DCGM changes about the others:

* no per-GPU "up": a lost GPU's fields go blank and dcgm-exporter leaves them out, so
  ``GpuLost`` is a GPU that reported its temperature in the last hour and no longer does, while
  its exporter is scraped;
* the XID field holds the last code, labelled ``err_code``: ``GpuXidErrors`` fires for a code
  that is new in the last 5 minutes (a repeat of the same code is not seen);
* throttling is one bitmask of reasons, read bit by bit.
"""

from __future__ import annotations

from typing import Final

from governor.alerts.health_alert import (
    BREAKS_AT,
    MINUTE,
    WINDOW,
    HealthAlert,
    Values,
    appears,
    breaks,
    by_target,
    disappears,
    scraped,
    series,
    steady,
)
from governor.contracts.endpoints import EXPORTER
from governor.contracts.metrics import dcgm, gpu
from governor.contracts.metrics.scrape import LABEL_INSTANCE, LABEL_JOB, UP
from governor.contracts.metrics.slo import SEVERITY_PAGE, SEVERITY_TICKET
from governor.contracts.promql import (
    Selector,
    aggregate,
    copy_label,
    max_by,
    max_over_time,
    new_or_increased,
    offset,
    sum_by,
)
from governor.slo.fleet import GpuTarget

# How long a GPU that stopped reporting stays "lost" (DCGM has no state that says so for good).
LOST_WINDOW: Final = "1h"
OLD, NEW = dcgm.RELEASE_4_8, dcgm.RELEASE_4_9
XID_PAGE_FAULT, XID_OFF_THE_BUS = "31", "79"  # codes of dcgm-exporter's XID table
MEMORY_FULL = 0.97


def _only(reading: dcgm.Reading) -> str:
    """The one name of a field no release renamed."""
    (field,) = reading.fields
    return field.name


class Scenario:
    """The series of one scenario: GPUs of two exporters, each named as a release names it."""

    def __init__(self, gpus: GpuTarget) -> None:
        self.exporter = (scraped(gpus, EXPORTER.address("exporter-0")),
                         scraped(gpus, EXPORTER.address("exporter-1")))

    def gpu(self, index: int, exporter: int = 0) -> dict[str, str]:
        """What an alert about this GPU carries: its exporter's labels and its index."""
        return {**self.exporter[exporter], dcgm.LABEL_GPU: str(index)}

    def labels(self, index: int, release: str, exporter: int = 0) -> dict[str, str]:
        """What dcgm-exporter of ``release`` puts on this GPU's series besides the scrape's."""
        hostname = (dcgm.LABEL_HOSTNAME_UNTIL_4_8_2 if release == OLD
                    else dcgm.LABEL_HOSTNAME)
        return {**self.gpu(index, exporter), dcgm.LABEL_UUID: f"GPU-{exporter}{index:07d}",
                dcgm.LABEL_MODEL: "NVIDIA H200", hostname: f"node-{exporter}"}

    def field(self, reading: dcgm.Reading, index: int, release: str, values: Values,
              exporter: int = 0, extra: dict[str, str] | None = None) -> tuple[str, Values]:
        labels = {**self.labels(index, release, exporter), **(extra or {})}
        field = reading.in_release(release)
        if field is None:
            raise ValueError(f"{reading.what}: no name in dcgm-exporter {release}")
        return series(field.name, labels), values

    def up(self, exporter: int, values: Values) -> tuple[str, Values]:
        return series(UP.name, self.exporter[exporter]), values


def _xid(scenario: Scenario, index: int, release: str, code: str, message: str,
         values: Values) -> tuple[str, Values]:
    return scenario.field(dcgm.XID, index, release, values,
                          extra={dcgm.LABEL_XID_CODE: code, dcgm.LABEL_XID_MESSAGE: message})


def _throttling(gpus: GpuTarget, scenario: Scenario, name: str, for_minutes: int,
                reasons: tuple[str, ...], summary: str, description: str,
                broken: tuple[int, int], other: int) -> HealthAlert:
    """A GPU held back by any of ``reasons``: GPU 0 (4.8's name) and GPU 2 (4.9's) raise a
    reason's bit at minute 10; GPU 1 shows another reason all along."""
    bitmask = dcgm.CLOCK_EVENT_REASONS.base(gpus.matchers())
    old, new = broken
    return HealthAlert(
        name, SEVERITY_TICKET, for_minutes * MINUTE,
        f"{max_by(by_target(gpus, dcgm.LABEL_GPU), dcgm.any_reason(bitmask, reasons))} == 1",
        summary, description,
        (scenario.field(dcgm.CLOCK_EVENT_REASONS, 0, OLD, breaks(0, old)),
         scenario.field(dcgm.CLOCK_EVENT_REASONS, 1, NEW, steady(other)),
         scenario.field(dcgm.CLOCK_EVENT_REASONS, 2, NEW,
                        breaks(dcgm.REASON_BITS[gpu.REASON_GPU_IDLE], new))),
        (scenario.gpu(0), scenario.gpu(2)),
    )


def seen_lately(gpus: GpuTarget) -> str:
    """Each GPU that reported its temperature in the last LOST_WINDOW (lost ones included)."""
    lately = dcgm.PRESENCE.base(gpus.matchers(), lambda s: max_over_time(s, LOST_WINDOW))
    return aggregate("group", by_target(gpus, dcgm.LABEL_GPU), lately)


def lost(gpus: GpuTarget) -> str:
    """A GPU seen lately that no longer reports, while its exporter is scraped."""
    on, per_gpu = gpus.matchers(), by_target(gpus, dcgm.LABEL_GPU)
    return (f"{seen_lately(gpus)}\n"
            f"unless {aggregate('group', per_gpu, dcgm.PRESENCE.base(on))}\n"
            f"and on ({LABEL_JOB}, {LABEL_INSTANCE}) {Selector(UP.name, on)} == 1")


def new_xid(gpus: GpuTarget) -> str:
    """The last XID code of a GPU where it is new in the last 5 minutes, as label ``xid``."""
    on, per_xid = gpus.matchers(), (*by_target(gpus, dcgm.LABEL_GPU), gpu.LABEL_XID)

    def codes(when: str = "") -> str:
        found = dcgm.XID.base(on, (lambda s: offset(s, when)) if when else None)
        return max_by(per_xid, copy_label(found, dcgm.LABEL_XID_CODE, gpu.LABEL_XID))

    return f"{codes()} > 0\nunless\n{codes(WINDOW)}"


def gpu_alerts(gpus: GpuTarget) -> tuple[HealthAlert, ...]:
    """The exporter's and the GPUs' alerts on dcgm-exporter's fields, in Governor's order."""
    on = gpus.matchers()
    per_gpu = by_target(gpus, dcgm.LABEL_GPU)
    present = dcgm.PRESENCE.base(on)
    scenario = Scenario(gpus)
    bits = dcgm.REASON_BITS
    return (
        HealthAlert(
            "GpuExporterSeesNoGpus", SEVERITY_TICKET, 10 * MINUTE,
            f"{Selector(UP.name, on)} == 1 unless on ({LABEL_INSTANCE}) "
            f"{aggregate('group', (LABEL_INSTANCE,), present)}",
            "GPU exporter {{ $labels.instance }} reports no GPU",
            "dcgm-exporter is up but exposes no GPU temperature "
            f"({' / '.join(f.name for f in dcgm.PRESENCE.fields)}): DCGM sees no GPU, or the "
            "collector CSV leaves the field out.",
            (scenario.up(0, steady(1)), scenario.up(1, steady(1)),
             scenario.field(dcgm.PRESENCE, 0, OLD, disappears(40)),
             scenario.field(dcgm.PRESENCE, 0, NEW, steady(40), exporter=1)),
            (scenario.exporter[0],),
            # Still quiet 5 minutes after the GPU went: its 10 minutes count from then.
            ((BREAKS_AT - 1, False), (BREAKS_AT + 5, False), (BREAKS_AT + 20, True)),
        ),
        HealthAlert(
            "GpuLost", SEVERITY_PAGE, MINUTE,
            lost(gpus),
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} stopped answering",
            "GPU {{ $labels.gpu }} reported its temperature to dcgm-exporter in the last "
            f"{LOST_WINDOW} and no longer does, while the exporter is scraped: DCGM lost it; "
            "the inference engine on it is likely failing.",
            (scenario.up(0, steady(1)), scenario.up(1, breaks(1, 0)),
             scenario.field(dcgm.PRESENCE, 0, OLD, disappears(61)),
             scenario.field(dcgm.PRESENCE, 1, NEW, steady(37)),
             scenario.field(dcgm.PRESENCE, 2, NEW, disappears(52)),
             scenario.field(dcgm.PRESENCE, 0, NEW, disappears(45), exporter=1)),
            (scenario.gpu(0), scenario.gpu(2)),
            ((BREAKS_AT - 1, False), (BREAKS_AT + 3, True), (BREAKS_AT + 65, False)),
        ),
        HealthAlert(
            "GpuXidErrors", SEVERITY_PAGE, 0,
            new_xid(gpus),
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} raised XID {{ $labels.xid }}",
            "dcgm-exporter reports XID {{ $labels.xid }} as the last error of GPU "
            "{{ $labels.gpu }}, new in the last 5 minutes; see NVIDIA's XID catalog for whether "
            "the GPU needs a reset.",
            (_xid(scenario, 0, OLD, "0", "No Error", disappears(0)),
             _xid(scenario, 0, OLD, XID_PAGE_FAULT, "GPU memory page fault",
                  appears(int(XID_PAGE_FAULT))),
             _xid(scenario, 1, NEW, "0", "No Error", steady(0)),
             _xid(scenario, 2, NEW, "0", "No Error", disappears(0)),
             _xid(scenario, 2, NEW, XID_OFF_THE_BUS, "GPU has fallen off the bus",
                  appears(int(XID_OFF_THE_BUS)))),
            ({**scenario.gpu(0), gpu.LABEL_XID: XID_PAGE_FAULT},
             {**scenario.gpu(2), gpu.LABEL_XID: XID_OFF_THE_BUS}),
            ((BREAKS_AT - 1, False), (BREAKS_AT + 2, True), (BREAKS_AT + 10, False)),
        ),
        HealthAlert(
            "GpuUncorrectedEccErrors", SEVERITY_PAGE, 0,
            new_or_increased(Selector(_only(dcgm.ECC_UNCORRECTED), on), per_gpu, WINDOW),
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} had uncorrectable ECC errors",
            "Uncorrectable memory errors corrupt results; drain the GPU and check its retired "
            "and remapped rows.",
            (scenario.field(dcgm.ECC_UNCORRECTED, 0, OLD, breaks(0, 2)),
             scenario.field(dcgm.ECC_UNCORRECTED, 1, NEW, steady(0))),
            (scenario.gpu(0),),
            ((BREAKS_AT - 1, False), (BREAKS_AT + 2, True), (BREAKS_AT + 10, False)),
        ),
        _throttling(
            gpus, scenario, "GpuThermalThrottling", 5, gpu.THERMAL_REASONS,
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} is throttled for heat",
            "Thermal clock slowdown stretches every step: check cooling and airflow.",
            (bits[gpu.REASON_HW_THERMAL], bits[gpu.REASON_SW_THERMAL]),
            bits[gpu.REASON_SW_POWER_CAP]),
        _throttling(
            gpus, scenario, "GpuPowerThrottling", 15, gpu.POWER_REASONS,
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} is held back by its power limit",
            "The GPU has run at its power cap (or hit the power brake) for 15 minutes: "
            "throughput is capped below what its clocks allow.",
            (bits[gpu.REASON_SW_POWER_CAP], bits[gpu.REASON_HW_POWER_BRAKE]),
            bits[gpu.REASON_HW_THERMAL]),
        HealthAlert(
            "GpuMemoryNearlyFull", SEVERITY_TICKET, 10 * MINUTE,
            f"{sum_by(per_gpu, dcgm.FB_USED.base(on))}\n/\n"
            f"{sum_by(per_gpu, dcgm.memory_total(on))}\n> {MEMORY_FULL}",
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} has under 3% memory free",
            "Used GPU memory is above 97% of the total for 10 minutes (vLLM reserves about 90% "
            "by design; more means another process or a leak).",
            (scenario.field(dcgm.FB_USED, 0, OLD, breaks(68000, 75500)),
             scenario.field(dcgm.FB_FREE, 0, OLD, breaks(8000, 500)),
             scenario.field(dcgm.FB_USED, 1, OLD, steady(68000)),
             scenario.field(dcgm.FB_FREE, 1, OLD, steady(8000)),
             scenario.field(dcgm.FB_USED, 2, NEW, breaks(72e9, 79e9)),
             scenario.field(dcgm.FB_CAPACITY, 2, NEW, steady(80e9)),
             scenario.field(dcgm.FB_USED, 3, NEW, steady(72e9)),
             scenario.field(dcgm.FB_CAPACITY, 3, NEW, steady(80e9))),
            (scenario.gpu(0), scenario.gpu(2)),
        ),
    )

