"""Health alerts for the stack itself: targets, the GPU exporter, GPUs, and vLLM's engine.

Each alert is a row of :func:`health_alerts`, and each row carries its own promtool scenario:
synthetic series in which something goes wrong at minute 10 next to a healthy neighbour, and the
labels of the alerts that must fire (only for the broken one). Every selector is narrowed to its
component's target in the spec (``targets``: the scrape job and any extra selector) and the
scenarios' series carry the same labels, so the alerts and their tests follow a fleet's names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal

from governor.alerts.rules import AlertRule, RuleFile, RuleGroup
from governor.alerts.ruletests import AlertCheck, ExpectedAlert, InputSeries, RuleTest
from governor.alerts.slo_tests import cumulative
from governor.contracts.endpoints import EXPORTER, INFERENCE
from governor.contracts.metrics import gpu, service, vllm
from governor.contracts.metrics.prometheus import LABEL_INSTANCE, LABEL_JOB, UP
from governor.contracts.metrics.slo import LABEL_SEVERITY, SEVERITY_PAGE, SEVERITY_TICKET
from governor.contracts.promql import (
    Selector,
    aggregate,
    deriv,
    equal_to,
    format_number,
    max_by,
    new_or_increased,
    one_of,
    rate,
    sum_by,
)
from governor.render.params import RenderParams
from governor.slo.fleet import Target, Targets

GROUP = "governor-health"
MINUTE = 60
BREAKS_AT = 10  # minute at which each scenario's broken series goes wrong
WINDOW = "5m"  # of the counter alerts

Values = Callable[[int], str]  # samples after the first → promtool values


def steady(value: float) -> Values:
    return lambda last: f"{format_number(value)}x{last}"


def breaks(before: float, after: float) -> Values:
    return lambda last: (f"{format_number(before)}x{BREAKS_AT - 1} "
                         f"{format_number(after)}x{last - BREAKS_AT}")


def counter(before: float, after: float) -> Values:
    """A counter growing ``before`` per minute, then ``after`` per minute from minute 10."""
    return lambda last: cumulative([(Decimal(repr(before)), BREAKS_AT - 1),
                                    (Decimal(repr(after)), last - BREAKS_AT + 1)])


def appears(value: float) -> Values:
    """A series that does not exist until minute 10 (a counter's first XID, say)."""
    return lambda last: f"_x{BREAKS_AT} {format_number(value)}x{last - BREAKS_AT}"


def disappears(value: float) -> Values:
    return lambda last: f"{format_number(value)}x{BREAKS_AT - 1} stale"


def clock(stops: bool) -> Values:
    """A Unix-time gauge that follows evaluation time, or freezes at minute 9."""
    frozen = (BREAKS_AT - 1) * MINUTE
    return lambda last: (f"0+{MINUTE}x{BREAKS_AT - 1} {frozen}x{last - BREAKS_AT + 1}" if stops
                         else f"0+{MINUTE}x{last}")


def _selector(metric: str, labels: dict[str, str]) -> str:
    return Selector(metric, equal_to(labels)).render()


def scraped(target: Target, host: str) -> dict[str, str]:
    """The labels a scrape of ``host`` in ``target``'s job gives its series."""
    return {**target.selector, LABEL_JOB: target.job, LABEL_INSTANCE: host}


@dataclass(frozen=True)
class HealthAlert:
    name: str
    severity: str
    for_seconds: int
    expr: str
    summary: str  # may use {{ $labels.x }}
    description: str
    series: tuple[tuple[str, Values], ...]  # the scenario
    fires: tuple[dict[str, str], ...]  # labels of the alerts it must raise (besides severity)
    # (minute, must fire?) checks; None: quiet at minute 9, firing well after `for`.
    checks: tuple[tuple[int, bool], ...] | None = field(default=None)

    def rule(self, params: RenderParams) -> AlertRule:
        return AlertRule(self.name, self.expr, {LABEL_SEVERITY: self.severity},
                         {"summary": self.summary, "description": self.description},
                         min(self.for_seconds, params.health_for_cap_seconds))

    def test(self, params: RenderParams) -> RuleTest:
        rule = self.rule(params)
        hold = -(-rule.for_seconds // MINUTE)
        checks = self.checks or ((BREAKS_AT - 1, False), (BREAKS_AT + hold + 10, True))
        last = max(minute for minute, _ in checks) + 1
        expected = tuple(
            ExpectedAlert(labels := {**fired, **rule.labels}, rule.expected_annotations(labels))
            for fired in self.fires
        )
        return RuleTest(
            f"{self.name}: fires for the broken series only", MINUTE,
            tuple(InputSeries(name, values(last)) for name, values in self.series),
            tuple(AlertCheck(minute * MINUTE, self.name, expected if firing else ())
                  for minute, firing in checks),
        )


def by_target(target: Target, *more: str) -> tuple[str, ...]:
    """Aggregate per scrape target, keeping the target's selector labels (a fleet's cluster or
    namespace, which its routes and people want on the alert) and ``more``."""
    return (LABEL_JOB, LABEL_INSTANCE, *target.selector, *more)


_XID = gpu.XID_ERRORS.total
_ECC = gpu.ECC_UNCORRECTED_ERRORS.total
_PREEMPTIONS = vllm.NUM_PREEMPTIONS.total
_REJECTIONS = service.ADMISSION_REJECTIONS.total
_QUEUE_FULL = {service.LABEL_REASON: service.REASON_QUEUE_FULL}


def _clock_events(gpus: Target, reasons: tuple[str, ...]) -> str:
    """1 while any of these clock-event reasons holds a GPU back."""
    selector = Selector(gpu.CLOCK_EVENT_ACTIVE.name,
                        (*gpus.matchers(), one_of(gpu.LABEL_REASON, reasons)))
    return f"{max_by(by_target(gpus, gpu.LABEL_GPU), selector)} == 1"


def _targets_down(targets: Targets) -> str:
    """A target of any of the three components not scraped: one ``up == 0`` per component."""
    return "\nor\n".join(f"{Selector(UP.name, t.matchers())} == 0"
                          for t in (targets.inference, targets.gpu, targets.controller))


def health_alerts(targets: Targets) -> tuple[HealthAlert, ...]:
    """Every health alert, its selectors and its scenario in the spec's targets."""
    service_target, gpus = targets.inference, targets.gpu

    def on(target: Target, metric: str) -> Selector:
        return Selector(metric, target.matchers())

    service0 = scraped(service_target, INFERENCE.address("inference-0"))
    service1 = scraped(service_target, INFERENCE.address("inference-1"))
    exporter0 = scraped(gpus, EXPORTER.address("exporter-0"))
    exporter1 = scraped(gpus, EXPORTER.address("exporter-1"))
    gpu0 = {**exporter0, gpu.LABEL_GPU: "0"}
    gpu1 = {**exporter0, gpu.LABEL_GPU: "1"}
    engine0 = {**service0, vllm.LABEL_MODEL: "m"}
    engine1 = {**service1, vllm.LABEL_MODEL: "m"}
    per_gpu = by_target(gpus, gpu.LABEL_GPU)
    per_engine = by_target(service_target, vllm.LABEL_MODEL)
    rejections = on(service_target, _REJECTIONS)
    used, total = on(gpus, gpu.MEMORY_USED.name), on(gpus, gpu.MEMORY_TOTAL.name)
    waiting = on(service_target, vllm.NUM_REQUESTS_WAITING.name)
    return (
        HealthAlert(
            "GovernorTargetDown", SEVERITY_PAGE, 2 * MINUTE,
            _targets_down(targets),
            "{{ $labels.job }} target {{ $labels.instance }} is down",
            "Prometheus cannot scrape {{ $labels.instance }} (job {{ $labels.job }}).",
            ((_selector(UP.name, service0), breaks(1, 0)),
             (_selector(UP.name, exporter0), steady(1))),
            (service0,),
        ),
        HealthAlert(
            "GpuExporterStale", SEVERITY_TICKET, 2 * MINUTE,
            f"time() - {on(gpus, gpu.EXPORTER_LAST_SUCCESS.name)} > 60",
            "GPU exporter {{ $labels.instance }} has not read NVML for over a minute",
            "The exporter answers scrapes but its sampler has not completed a successful read "
            "for over 60s, so its GPU readings are stale.",
            ((_selector(gpu.EXPORTER_LAST_SUCCESS.name, exporter0), clock(stops=True)),
             (_selector(gpu.EXPORTER_LAST_SUCCESS.name, exporter1), clock(stops=False))),
            (exporter0,),
        ),
        HealthAlert(
            "GpuExporterSeesNoGpus", SEVERITY_TICKET, 10 * MINUTE,
            f"{on(gpus, UP.name)} == 1 unless on ({LABEL_INSTANCE}) "
            f"{aggregate('group', (LABEL_INSTANCE,), on(gpus, gpu.UP.name))}",
            "GPU exporter {{ $labels.instance }} reports no GPU",
            "The exporter is up but exposes no gpu_up series: NVML is missing or sees no device.",
            ((_selector(UP.name, exporter0), steady(1)),
             (_selector(UP.name, exporter1), steady(1)),
             (_selector(gpu.UP.name, gpu0), disappears(1)),
             (_selector(gpu.UP.name, {**gpu0, **exporter1}), steady(1))),
            (exporter0,),
        ),
        HealthAlert(
            "GpuLost", SEVERITY_PAGE, MINUTE,
            f"{on(gpus, gpu.UP.name)} == 0",
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} stopped answering",
            "NVML lost GPU {{ $labels.gpu }}; the inference engine on it is likely failing.",
            ((_selector(gpu.UP.name, gpu0), breaks(1, 0)),
             (_selector(gpu.UP.name, gpu1), steady(1))),
            (gpu0,),
        ),
        HealthAlert(
            "GpuXidErrors", SEVERITY_PAGE, 0,
            new_or_increased(on(gpus, _XID), (*per_gpu, gpu.LABEL_XID), WINDOW),
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} raised XID {{ $labels.xid }}",
            "The driver reported XID {{ $labels.xid }} on GPU {{ $labels.gpu }} in the last 5 "
            "minutes; see NVIDIA's XID catalog for whether the GPU needs a reset.",
            ((_selector(_XID, {**gpu0, gpu.LABEL_XID: "79"}), appears(1)),
             (_selector(_XID, {**gpu1, gpu.LABEL_XID: "48"}), breaks(0, 1))),
            ({**gpu0, gpu.LABEL_XID: "79"}, {**gpu1, gpu.LABEL_XID: "48"}),
            ((BREAKS_AT - 1, False), (BREAKS_AT + 2, True), (BREAKS_AT + 10, False)),
        ),
        HealthAlert(
            "GpuUncorrectedEccErrors", SEVERITY_PAGE, 0,
            new_or_increased(on(gpus, _ECC), per_gpu, WINDOW),
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} had uncorrectable ECC errors",
            "Uncorrectable memory errors corrupt results; drain the GPU and check its retired "
            "and remapped rows.",
            ((_selector(_ECC, gpu0), breaks(0, 2)), (_selector(_ECC, gpu1), steady(0))),
            (gpu0,),
            ((BREAKS_AT - 1, False), (BREAKS_AT + 2, True), (BREAKS_AT + 10, False)),
        ),
        HealthAlert(
            "GpuThermalThrottling", SEVERITY_TICKET, 5 * MINUTE,
            _clock_events(gpus, gpu.THERMAL_REASONS),
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} is throttled for heat",
            "Thermal clock slowdown stretches every step: check cooling and airflow.",
            ((_selector(gpu.CLOCK_EVENT_ACTIVE.name,
                        {**gpu0, gpu.LABEL_REASON: gpu.REASON_HW_THERMAL}),
              breaks(0, 1)),
             (_selector(gpu.CLOCK_EVENT_ACTIVE.name,
                        {**gpu1, gpu.LABEL_REASON: gpu.REASON_SW_THERMAL}),
              steady(0)),
             (_selector(gpu.CLOCK_EVENT_ACTIVE.name,
                        {**gpu1, gpu.LABEL_REASON: gpu.REASON_SW_POWER_CAP}), steady(1))),
            (gpu0,),
        ),
        HealthAlert(
            "GpuPowerThrottling", SEVERITY_TICKET, 15 * MINUTE,
            _clock_events(gpus, gpu.POWER_REASONS),
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} is held back by its power limit",
            "The GPU has run at its power cap (or hit the power brake) for 15 minutes: "
            "throughput is capped below what its clocks allow.",
            ((_selector(gpu.CLOCK_EVENT_ACTIVE.name,
                        {**gpu0, gpu.LABEL_REASON: gpu.REASON_SW_POWER_CAP}), breaks(0, 1)),
             (_selector(gpu.CLOCK_EVENT_ACTIVE.name,
                        {**gpu1, gpu.LABEL_REASON: gpu.REASON_HW_THERMAL}),
              steady(1))),
            (gpu0,),
        ),
        HealthAlert(
            "GpuMemoryNearlyFull", SEVERITY_TICKET, 10 * MINUTE,
            f"{max_by(per_gpu, f'{used} / {total}')} > 0.97",
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} has under 3% memory free",
            "Used GPU memory is above 97% of the total for 10 minutes (vLLM reserves about 90% "
            "by design; more means another process or a leak).",
            ((_selector(gpu.MEMORY_TOTAL.name, gpu0), steady(80e9)),
             (_selector(gpu.MEMORY_USED.name, gpu0), breaks(72e9, 79e9)),
             (_selector(gpu.MEMORY_TOTAL.name, gpu1), steady(80e9)),
             (_selector(gpu.MEMORY_USED.name, gpu1), steady(72e9))),
            (gpu0,),
        ),
        HealthAlert(
            "VllmKvCacheNearlyFull", SEVERITY_TICKET, 5 * MINUTE,
            f"{max_by(per_engine, on(service_target, vllm.KV_CACHE_USAGE.name))} > 0.95",
            "KV cache of {{ $labels.instance }} is above 95%",
            "New requests will wait or preempt running ones; lower max_num_seqs or add capacity.",
            ((_selector(vllm.KV_CACHE_USAGE.name, engine0), breaks(0.5, 0.99)),
             (_selector(vllm.KV_CACHE_USAGE.name, engine1), steady(0.9))),
            (engine0,),
        ),
        HealthAlert(
            "VllmPreemptionsHigh", SEVERITY_TICKET, 5 * MINUTE,
            f"{sum_by(per_engine, rate(on(service_target, _PREEMPTIONS), WINDOW))} > 1",
            "{{ $labels.instance }} preempts more than one request a second",
            "Preempted requests recompute their prefill; the KV cache is too small for the batch.",
            ((_selector(_PREEMPTIONS, engine0), counter(0, 600)),
             (_selector(_PREEMPTIONS, engine1), counter(6, 6))),
            (engine0,),
        ),
        HealthAlert(
            "VllmQueueGrowing", SEVERITY_TICKET, 10 * MINUTE,
            f"{sum_by(per_engine, waiting)} > 10\nand\n"
            f"{sum_by(per_engine, deriv(waiting, '10m'))} > 0",
            "The queue of {{ $labels.instance }} keeps growing",
            "More than 10 requests wait and the queue has grown for 10 minutes: arrivals "
            "exceed what the engine serves.",
            ((_selector(vllm.NUM_REQUESTS_WAITING.name, engine0), counter(0, 2)),
             (_selector(vllm.NUM_REQUESTS_WAITING.name, engine1), steady(20))),
            (engine0,),
        ),
        HealthAlert(
            "InferenceShedsLoad", SEVERITY_TICKET, 5 * MINUTE,
            f"{sum_by(by_target(service_target), rate(rejections, WINDOW))} > 0",
            "{{ $labels.instance }} turns requests away (admission queue full)",
            "The bounded admission queue is full and requests get 429/503; the service is "
            "over capacity.",
            ((_selector(_REJECTIONS, {**service0, **_QUEUE_FULL}), counter(0, 30)),
             (_selector(_REJECTIONS, {**service1, **_QUEUE_FULL}), steady(0))),
            (service0,),
        ),
        HealthAlert(
            "InferenceEngineNotReady", SEVERITY_PAGE, 5 * MINUTE,
            f"{on(service_target, service.ENGINE_READY.name)} == 0",
            "The engine of {{ $labels.instance }} is not ready",
            "The service is up but its engine has not been ready for 5 minutes; requests fail.",
            ((_selector(service.ENGINE_READY.name, service0), breaks(1, 0)),
             (_selector(service.ENGINE_READY.name, service1), steady(1))),
            (service0,),
        ),
    )


def health_rule_file(targets: Targets, params: RenderParams) -> RuleFile:
    alerts = health_alerts(targets)
    return RuleFile("health", (RuleGroup(GROUP, tuple(a.rule(params) for a in alerts)),))


def health_tests(targets: Targets, params: RenderParams) -> tuple[RuleTest, ...]:
    return tuple(alert.test(params) for alert in health_alerts(targets))
