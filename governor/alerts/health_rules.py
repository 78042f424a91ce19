"""Health alerts for the stack itself: targets, the GPU exporter, GPUs, and vLLM's engine.

Each alert is a row of :func:`health_alerts` (a :class:`~governor.alerts.health_alert.HealthAlert`
with its own promtool scenario). Every selector is narrowed to its component's target in the spec
(``targets``: the scrape job and any extra selector) and the scenarios' series carry the same
labels, so the alerts and their tests follow a fleet's names. The GPUs' alerts read the exporter
the spec names: Governor's (here) or NVIDIA's dcgm-exporter (:mod:`governor.alerts.dcgm_rules`).
"""

from __future__ import annotations

from governor.alerts import dcgm_rules
from governor.alerts.cache_alert import prefix_cache_alert
from governor.alerts.gpu_health_rules import gpu_health_alerts, state_group, state_test
from governor.alerts.health_alert import (
    BREAKS_AT,
    MINUTE,
    WINDOW,
    HealthAlert,
    appears,
    breaks,
    by_target,
    clock,
    counter,
    disappears,
    scraped,
    series,
    steady,
)
from governor.alerts.rules import RuleFile, RuleGroup
from governor.alerts.ruletests import RuleTest
from governor.contracts.endpoints import EXPORTER, INFERENCE, JOB_PROBE, PROBE
from governor.contracts.metrics import gpu, service, vllm
from governor.contracts.metrics.scrape import LABEL_INSTANCE, UP
from governor.contracts.metrics.slo import SEVERITY_PAGE, SEVERITY_TICKET
from governor.contracts.promql import (
    Selector,
    aggregate,
    deriv,
    max_by,
    new_or_increased,
    one_of,
    rate,
    sum_by,
)
from governor.generation.params import RenderParams
from governor.slo.fleet import GpuHealth, GpuTarget, PrefixCacheAlert, Target, Targets

GROUP = "governor-health"
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
    """A target of any component not scraped: one ``up == 0`` per component, the spec's three
    and the synthetic probe (whose job is always ``probe``: a dead probe leaves the probe SLI
    without data, so a quiet replica's failure would go unseen)."""
    return "\nor\n".join(f"{Selector(UP.name, t.matchers())} == 0"
                          for t in (targets.inference, targets.gpu, targets.controller,
                                    Target(JOB_PROBE)))


def _on(target: Target, metric: str) -> Selector:
    return Selector(metric, target.matchers())


def _target_down(targets: Targets) -> HealthAlert:
    service0 = scraped(targets.inference, INFERENCE.address("inference-0"))
    exporter0 = scraped(targets.gpu, EXPORTER.address("exporter-0"))
    probe0 = scraped(Target(JOB_PROBE), PROBE.address("probe-0"))
    return HealthAlert(
        "GovernorTargetDown", SEVERITY_PAGE, 2 * MINUTE,
        _targets_down(targets),
        "{{ $labels.job }} target {{ $labels.instance }} is down",
        "Prometheus cannot scrape {{ $labels.instance }} (job {{ $labels.job }}).",
        ((series(UP.name, service0), breaks(1, 0)),
         (series(UP.name, exporter0), steady(1)),
         (series(UP.name, probe0), breaks(1, 0))),
        (service0, probe0),
    )


def _gpu_alerts(gpus: GpuTarget) -> tuple[HealthAlert, ...]:
    """The exporter's and the GPUs' alerts on Governor's exporter's gpu_* series."""
    exporter0 = scraped(gpus, EXPORTER.address("exporter-0"))
    exporter1 = scraped(gpus, EXPORTER.address("exporter-1"))
    gpu0 = {**exporter0, gpu.LABEL_GPU: "0"}
    gpu1 = {**exporter0, gpu.LABEL_GPU: "1"}
    per_gpu = by_target(gpus, gpu.LABEL_GPU)
    used, total = _on(gpus, gpu.MEMORY_USED.name), _on(gpus, gpu.MEMORY_TOTAL.name)
    return (
        HealthAlert(
            "GpuExporterStale", SEVERITY_TICKET, 2 * MINUTE,
            f"time() - {_on(gpus, gpu.EXPORTER_LAST_SUCCESS.name)} > 60",
            "GPU exporter {{ $labels.instance }} has not read NVML for over a minute",
            "The exporter answers scrapes but its sampler has not completed a successful read "
            "for over 60s, so its GPU readings are stale.",
            ((series(gpu.EXPORTER_LAST_SUCCESS.name, exporter0), clock(stops=True)),
             (series(gpu.EXPORTER_LAST_SUCCESS.name, exporter1), clock(stops=False))),
            (exporter0,),
        ),
        HealthAlert(
            "GpuExporterSeesNoGpus", SEVERITY_TICKET, 10 * MINUTE,
            f"{_on(gpus, UP.name)} == 1 unless on ({LABEL_INSTANCE}) "
            f"{aggregate('group', (LABEL_INSTANCE,), _on(gpus, gpu.UP.name))}",
            "GPU exporter {{ $labels.instance }} reports no GPU",
            "The exporter is up but exposes no gpu_up series: NVML is missing or sees no device.",
            ((series(UP.name, exporter0), steady(1)),
             (series(UP.name, exporter1), steady(1)),
             (series(gpu.UP.name, gpu0), disappears(1)),
             (series(gpu.UP.name, {**gpu0, **exporter1}), steady(1))),
            (exporter0,),
        ),
        HealthAlert(
            "GpuLost", SEVERITY_PAGE, MINUTE,
            f"{_on(gpus, gpu.UP.name)} == 0",
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} stopped answering",
            "NVML lost GPU {{ $labels.gpu }}; the inference engine on it is likely failing.",
            ((series(gpu.UP.name, gpu0), breaks(1, 0)),
             (series(gpu.UP.name, gpu1), steady(1))),
            (gpu0,),
        ),
        HealthAlert(
            "GpuXidErrors", SEVERITY_PAGE, 0,
            new_or_increased(_on(gpus, _XID), (*per_gpu, gpu.LABEL_XID), WINDOW),
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} raised XID {{ $labels.xid }}",
            "The driver reported XID {{ $labels.xid }} on GPU {{ $labels.gpu }} in the last 5 "
            "minutes; see NVIDIA's XID catalog for whether the GPU needs a reset.",
            ((series(_XID, {**gpu0, gpu.LABEL_XID: "79"}), appears(1)),
             (series(_XID, {**gpu1, gpu.LABEL_XID: "48"}), breaks(0, 1))),
            ({**gpu0, gpu.LABEL_XID: "79"}, {**gpu1, gpu.LABEL_XID: "48"}),
            ((BREAKS_AT - 1, False), (BREAKS_AT + 2, True), (BREAKS_AT + 10, False)),
        ),
        HealthAlert(
            "GpuUncorrectedEccErrors", SEVERITY_PAGE, 0,
            new_or_increased(_on(gpus, _ECC), per_gpu, WINDOW),
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} had uncorrectable ECC errors",
            "Uncorrectable memory errors corrupt results; drain the GPU and check its retired "
            "and remapped rows.",
            ((series(_ECC, gpu0), breaks(0, 2)), (series(_ECC, gpu1), steady(0))),
            (gpu0,),
            ((BREAKS_AT - 1, False), (BREAKS_AT + 2, True), (BREAKS_AT + 10, False)),
        ),
        HealthAlert(
            "GpuThermalThrottling", SEVERITY_TICKET, 5 * MINUTE,
            _clock_events(gpus, gpu.THERMAL_REASONS),
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} is throttled for heat",
            "Thermal clock slowdown stretches every step: check cooling and airflow.",
            ((series(gpu.CLOCK_EVENT_ACTIVE.name,
                        {**gpu0, gpu.LABEL_REASON: gpu.REASON_HW_THERMAL}),
              breaks(0, 1)),
             (series(gpu.CLOCK_EVENT_ACTIVE.name,
                        {**gpu1, gpu.LABEL_REASON: gpu.REASON_SW_THERMAL}),
              steady(0)),
             (series(gpu.CLOCK_EVENT_ACTIVE.name,
                        {**gpu1, gpu.LABEL_REASON: gpu.REASON_SW_POWER_CAP}), steady(1))),
            (gpu0,),
        ),
        HealthAlert(
            "GpuPowerThrottling", SEVERITY_TICKET, 15 * MINUTE,
            _clock_events(gpus, gpu.POWER_REASONS),
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} is held back by its power limit",
            "The GPU has run at its power cap (or hit the power brake) for 15 minutes: "
            "throughput is capped below what its clocks allow.",
            ((series(gpu.CLOCK_EVENT_ACTIVE.name,
                        {**gpu0, gpu.LABEL_REASON: gpu.REASON_SW_POWER_CAP}), breaks(0, 1)),
             (series(gpu.CLOCK_EVENT_ACTIVE.name,
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
            ((series(gpu.MEMORY_TOTAL.name, gpu0), steady(80e9)),
             (series(gpu.MEMORY_USED.name, gpu0), breaks(72e9, 79e9)),
             (series(gpu.MEMORY_TOTAL.name, gpu1), steady(80e9)),
             (series(gpu.MEMORY_USED.name, gpu1), steady(72e9))),
            (gpu0,),
        ),
    )


def _engine_alerts(service_target: Target) -> tuple[HealthAlert, ...]:
    """The inference service's and vLLM's engine's alerts."""
    service0 = scraped(service_target, INFERENCE.address("inference-0"))
    service1 = scraped(service_target, INFERENCE.address("inference-1"))
    engine0 = {**service0, vllm.LABEL_MODEL: "m"}
    engine1 = {**service1, vllm.LABEL_MODEL: "m"}
    per_engine = by_target(service_target, vllm.LABEL_MODEL)
    rejections = _on(service_target, _REJECTIONS)
    waiting = _on(service_target, vllm.NUM_REQUESTS_WAITING.name)
    return (
        HealthAlert(
            "VllmKvCacheNearlyFull", SEVERITY_TICKET, 5 * MINUTE,
            f"{max_by(per_engine, _on(service_target, vllm.KV_CACHE_USAGE.name))} > 0.95",
            "KV cache of {{ $labels.instance }} is above 95%",
            "New requests will wait or preempt running ones; lower max_num_seqs or add capacity.",
            ((series(vllm.KV_CACHE_USAGE.name, engine0), breaks(0.5, 0.99)),
             (series(vllm.KV_CACHE_USAGE.name, engine1), steady(0.9))),
            (engine0,),
        ),
        HealthAlert(
            "VllmPreemptionsHigh", SEVERITY_TICKET, 5 * MINUTE,
            f"{sum_by(per_engine, rate(_on(service_target, _PREEMPTIONS), WINDOW))} > 1",
            "{{ $labels.instance }} preempts more than one request a second",
            "Preempted requests recompute their prefill; the KV cache is too small for the batch.",
            ((series(_PREEMPTIONS, engine0), counter(0, 600)),
             (series(_PREEMPTIONS, engine1), counter(6, 6))),
            (engine0,),
        ),
        HealthAlert(
            "VllmQueueGrowing", SEVERITY_TICKET, 10 * MINUTE,
            f"{sum_by(per_engine, waiting)} > 10\nand\n"
            f"{sum_by(per_engine, deriv(waiting, '10m'))} > 0",
            "The queue of {{ $labels.instance }} keeps growing",
            "More than 10 requests wait and the queue has grown for 10 minutes: arrivals "
            "exceed what the engine serves.",
            ((series(vllm.NUM_REQUESTS_WAITING.name, engine0), counter(0, 2)),
             (series(vllm.NUM_REQUESTS_WAITING.name, engine1), steady(20))),
            (engine0,),
        ),
        HealthAlert(
            "InferenceShedsLoad", SEVERITY_TICKET, 5 * MINUTE,
            f"{sum_by(by_target(service_target), rate(rejections, WINDOW))} > 0",
            "{{ $labels.instance }} turns requests away (admission queue full)",
            "The bounded admission queue is full and requests get 429/503; the service is "
            "over capacity.",
            ((series(_REJECTIONS, {**service0, **_QUEUE_FULL}), counter(0, 30)),
             (series(_REJECTIONS, {**service1, **_QUEUE_FULL}), steady(0))),
            (service0,),
        ),
        HealthAlert(
            "InferenceEngineNotReady", SEVERITY_PAGE, 5 * MINUTE,
            f"{_on(service_target, service.ENGINE_READY.name)} == 0",
            "The engine of {{ $labels.instance }} is not ready",
            "The service is up but its engine has not been ready for 5 minutes; requests fail.",
            ((series(service.ENGINE_READY.name, service0), breaks(1, 0)),
             (series(service.ENGINE_READY.name, service1), steady(1))),
            (service0,),
        ),
    )


def health_alerts(targets: Targets, cache: PrefixCacheAlert | None = None,
                  gpu_health: GpuHealth | None = None) -> tuple[HealthAlert, ...]:
    """Every health alert, its selectors and its scenario in the spec's targets; the GPUs' on
    the series of the exporter the spec names (``targets.gpu.source``); the prefix cache's
    with the spec's ``alerting.prefix_cache`` and the process count's and the idle memory's
    with its ``alerting.gpu_health`` (their defaults without them)."""
    gpus = (dcgm_rules.gpu_alerts(targets.gpu) if targets.gpu.dcgm
            else _gpu_alerts(targets.gpu))
    return (_target_down(targets), *gpus,
            *gpu_health_alerts(targets, gpu_health or GpuHealth()),
            *_engine_alerts(targets.inference),
            prefix_cache_alert(targets.inference, cache or PrefixCacheAlert()))


def health_rule_file(targets: Targets, params: RenderParams,
                     cache: PrefixCacheAlert | None = None,
                     gpu_health: GpuHealth | None = None) -> RuleFile:
    alerts = health_alerts(targets, cache, gpu_health)
    return RuleFile("health", (state_group(targets, gpu_health or GpuHealth()),
                               RuleGroup(GROUP, tuple(a.rule(params) for a in alerts))))


def health_tests(targets: Targets, params: RenderParams,
                 cache: PrefixCacheAlert | None = None,
                 gpu_health: GpuHealth | None = None) -> tuple[RuleTest, ...]:
    return (*(alert.test(params) for alert in health_alerts(targets, cache, gpu_health)),
            state_test(targets, gpu_health or GpuHealth()))
