"""Health alerts for the stack itself: targets, the GPU exporter, GPUs, and vLLM's engine.

Each alert is a row of :data:`HEALTH_ALERTS`, and each row carries its own promtool scenario:
synthetic series in which something goes wrong at minute 10 next to a healthy neighbour, and the
labels of the alerts that must fire (only for the broken one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal

from governor.alerts import metric_names as n
from governor.alerts.params import JOB_CONTROLLER, JOB_GPU, JOB_INFERENCE, RenderParams
from governor.alerts.rules import AlertRule, RuleFile, RuleGroup
from governor.alerts.ruletests import AlertCheck, ExpectedAlert, InputSeries, RuleTest
from governor.alerts.slo_tests import cumulative
from governor.exporters.gpu import metric_names as gpu
from governor.inference import metric_names as inf
from governor.slo.promql import Matcher, Selector, format_number

GROUP = "governor-health"
MINUTE = 60
BREAKS_AT = 10  # minute at which each scenario's broken series goes wrong
UP = "up"  # Prometheus' own per-target series

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
    body = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{metric}{{{body}}}"


GPU0 = {"job": JOB_GPU, "instance": "exporter-0:9400", gpu.LABEL_GPU: "0"}
GPU1 = {"job": JOB_GPU, "instance": "exporter-0:9400", gpu.LABEL_GPU: "1"}
ENGINE0 = {"job": JOB_INFERENCE, "instance": "inference-0:8000", inf.VLLM_LABEL_MODEL: "m"}
ENGINE1 = {"job": JOB_INFERENCE, "instance": "inference-1:8000", inf.VLLM_LABEL_MODEL: "m"}


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
        return AlertRule(self.name, self.expr, {n.LABEL_SEVERITY: self.severity},
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


def _ratio_over(metric: str, by: str) -> str:
    return f"max by ({by}) ({metric})"


def _regex(values: tuple[str, ...]) -> str:
    return "|".join(values)


def _clock_events(reasons: tuple[str, ...]) -> str:
    """1 while any of these clock-event reasons holds a GPU back."""
    selector = Selector(gpu.CLOCK_EVENT_ACTIVE, (Matcher(gpu.LABEL_REASON, "=~", _regex(reasons)),))
    return f"{_ratio_over(selector.render(), _BY_GPU)} == 1"


_BY_GPU = f"job, instance, {gpu.LABEL_GPU}"
_BY_ENGINE = f"job, instance, {inf.VLLM_LABEL_MODEL}"
# counter_series lives with the inference names; the rule (append _total) is the same for all.
_XID = inf.counter_series(gpu.XID_ERRORS)
_ECC = inf.counter_series(gpu.ECC_UNCORRECTED_ERRORS)
_XID_BY = f"{_BY_GPU}, {gpu.LABEL_XID}"


def _new_or_increased(series: str, by: str) -> str:
    """Counter events: an increase, or a series that was not there 5 minutes ago (its first
    event: increase() cannot see a counter's first sample)."""
    return (f"sum by ({by}) (increase({series}[5m])) > 0\nor\n"
            f"sum by ({by}) ({series} unless {series} offset 5m) > 0")


HEALTH_ALERTS: tuple[HealthAlert, ...] = (
    HealthAlert(
        "GovernorTargetDown", n.SEVERITY_PAGE, 2 * MINUTE,
        f'{UP}{{job=~"{_regex((JOB_INFERENCE, JOB_GPU, JOB_CONTROLLER))}"}} == 0',
        "{{ $labels.job }} target {{ $labels.instance }} is down",
        "Prometheus cannot scrape {{ $labels.instance }} (job {{ $labels.job }}).",
        ((_selector(UP, {"job": JOB_INFERENCE, "instance": "inference-0:8000"}), breaks(1, 0)),
         (_selector(UP, {"job": JOB_GPU, "instance": "exporter-0:9400"}), steady(1))),
        ({"job": JOB_INFERENCE, "instance": "inference-0:8000"},),
    ),
    HealthAlert(
        "GpuExporterStale", n.SEVERITY_TICKET, 2 * MINUTE,
        f"time() - {gpu.EXPORTER_LAST_SUCCESS} > 60",
        "GPU exporter {{ $labels.instance }} has not read NVML for over a minute",
        "The exporter answers scrapes but its sampler has not completed a successful read "
        "for over 60s, so its GPU readings are stale.",
        ((_selector(gpu.EXPORTER_LAST_SUCCESS, {"job": JOB_GPU, "instance": "exporter-0:9400"}),
          clock(stops=True)),
         (_selector(gpu.EXPORTER_LAST_SUCCESS, {"job": JOB_GPU, "instance": "exporter-1:9400"}),
          clock(stops=False))),
        ({"job": JOB_GPU, "instance": "exporter-0:9400"},),
    ),
    HealthAlert(
        "GpuExporterSeesNoGpus", n.SEVERITY_TICKET, 10 * MINUTE,
        f'{UP}{{job="{JOB_GPU}"}} == 1 unless on (instance) group by (instance) ({gpu.UP})',
        "GPU exporter {{ $labels.instance }} reports no GPU",
        "The exporter is up but exposes no gpu_up series: NVML is missing or sees no device.",
        ((_selector(UP, {"job": JOB_GPU, "instance": "exporter-0:9400"}), steady(1)),
         (_selector(UP, {"job": JOB_GPU, "instance": "exporter-1:9400"}), steady(1)),
         (_selector(gpu.UP, GPU0), disappears(1)),
         (_selector(gpu.UP, {**GPU0, "instance": "exporter-1:9400"}), steady(1))),
        ({"job": JOB_GPU, "instance": "exporter-0:9400"},),
    ),
    HealthAlert(
        "GpuLost", n.SEVERITY_PAGE, MINUTE,
        f"{gpu.UP} == 0",
        "GPU {{ $labels.gpu }} on {{ $labels.instance }} stopped answering",
        "NVML lost GPU {{ $labels.gpu }}; the inference engine on it is likely failing.",
        ((_selector(gpu.UP, GPU0), breaks(1, 0)), (_selector(gpu.UP, GPU1), steady(1))),
        (GPU0,),
    ),
    HealthAlert(
        "GpuXidErrors", n.SEVERITY_PAGE, 0,
        _new_or_increased(_XID, _XID_BY),
        "GPU {{ $labels.gpu }} on {{ $labels.instance }} raised XID {{ $labels.xid }}",
        "The driver reported XID {{ $labels.xid }} on GPU {{ $labels.gpu }} in the last 5 "
        "minutes; see NVIDIA's XID catalog for whether the GPU needs a reset.",
        ((_selector(_XID, {**GPU0, gpu.LABEL_XID: "79"}), appears(1)),
         (_selector(_XID, {**GPU1, gpu.LABEL_XID: "48"}), breaks(0, 1))),
        ({**GPU0, gpu.LABEL_XID: "79"}, {**GPU1, gpu.LABEL_XID: "48"}),
        ((BREAKS_AT - 1, False), (BREAKS_AT + 2, True), (BREAKS_AT + 10, False)),
    ),
    HealthAlert(
        "GpuUncorrectedEccErrors", n.SEVERITY_PAGE, 0,
        _new_or_increased(_ECC, _BY_GPU),
        "GPU {{ $labels.gpu }} on {{ $labels.instance }} had uncorrectable ECC errors",
        "Uncorrectable memory errors corrupt results; drain the GPU and check its retired "
        "and remapped rows.",
        ((_selector(_ECC, GPU0), breaks(0, 2)), (_selector(_ECC, GPU1), steady(0))),
        (GPU0,),
        ((BREAKS_AT - 1, False), (BREAKS_AT + 2, True), (BREAKS_AT + 10, False)),
    ),
    HealthAlert(
        "GpuThermalThrottling", n.SEVERITY_TICKET, 5 * MINUTE,
        _clock_events(gpu.THERMAL_REASONS),
        "GPU {{ $labels.gpu }} on {{ $labels.instance }} is throttled for heat",
        "Thermal clock slowdown stretches every step: check cooling and airflow.",
        ((_selector(gpu.CLOCK_EVENT_ACTIVE, {**GPU0, gpu.LABEL_REASON: gpu.REASON_HW_THERMAL}),
          breaks(0, 1)),
         (_selector(gpu.CLOCK_EVENT_ACTIVE, {**GPU1, gpu.LABEL_REASON: gpu.REASON_SW_THERMAL}),
          steady(0)),
         (_selector(gpu.CLOCK_EVENT_ACTIVE, {**GPU1, gpu.LABEL_REASON: gpu.REASON_SW_POWER_CAP}),
          steady(1))),
        (GPU0,),
    ),
    HealthAlert(
        "GpuPowerThrottling", n.SEVERITY_TICKET, 15 * MINUTE,
        _clock_events(gpu.POWER_REASONS),
        "GPU {{ $labels.gpu }} on {{ $labels.instance }} is held back by its power limit",
        "The GPU has run at its power cap (or hit the power brake) for 15 minutes: "
        "throughput is capped below what its clocks allow.",
        ((_selector(gpu.CLOCK_EVENT_ACTIVE, {**GPU0, gpu.LABEL_REASON: gpu.REASON_SW_POWER_CAP}),
          breaks(0, 1)),
         (_selector(gpu.CLOCK_EVENT_ACTIVE, {**GPU1, gpu.LABEL_REASON: gpu.REASON_HW_THERMAL}),
          steady(1))),
        (GPU0,),
    ),
    HealthAlert(
        "GpuMemoryNearlyFull", n.SEVERITY_TICKET, 10 * MINUTE,
        f"{_ratio_over(f'{gpu.MEMORY_USED} / {gpu.MEMORY_TOTAL}', _BY_GPU)} > 0.97",
        "GPU {{ $labels.gpu }} on {{ $labels.instance }} has under 3% memory free",
        "Used GPU memory is above 97% of the total for 10 minutes (vLLM reserves about 90% "
        "by design; more means another process or a leak).",
        ((_selector(gpu.MEMORY_TOTAL, GPU0), steady(80e9)),
         (_selector(gpu.MEMORY_USED, GPU0), breaks(72e9, 79e9)),
         (_selector(gpu.MEMORY_TOTAL, GPU1), steady(80e9)),
         (_selector(gpu.MEMORY_USED, GPU1), steady(72e9))),
        (GPU0,),
    ),
    HealthAlert(
        "VllmKvCacheNearlyFull", n.SEVERITY_TICKET, 5 * MINUTE,
        f"{_ratio_over(inf.VLLM_KV_CACHE_USAGE, _BY_ENGINE)} > 0.95",
        "KV cache of {{ $labels.instance }} is above 95%",
        "New requests will wait or preempt running ones; lower max_num_seqs or add capacity.",
        ((_selector(inf.VLLM_KV_CACHE_USAGE, ENGINE0), breaks(0.5, 0.99)),
         (_selector(inf.VLLM_KV_CACHE_USAGE, ENGINE1), steady(0.9))),
        (ENGINE0,),
    ),
    HealthAlert(
        "VllmPreemptionsHigh", n.SEVERITY_TICKET, 5 * MINUTE,
        f"sum by ({_BY_ENGINE}) "
        f"(rate({inf.counter_series(inf.VLLM_NUM_PREEMPTIONS)}[5m])) > 1",
        "{{ $labels.instance }} preempts more than one request a second",
        "Preempted requests recompute their prefill; the KV cache is too small for the batch.",
        ((_selector(inf.counter_series(inf.VLLM_NUM_PREEMPTIONS), ENGINE0), counter(0, 600)),
         (_selector(inf.counter_series(inf.VLLM_NUM_PREEMPTIONS), ENGINE1), counter(6, 6))),
        (ENGINE0,),
    ),
    HealthAlert(
        "VllmQueueGrowing", n.SEVERITY_TICKET, 10 * MINUTE,
        f"sum by ({_BY_ENGINE}) ({inf.VLLM_NUM_REQUESTS_WAITING}) > 10\nand\n"
        f"sum by ({_BY_ENGINE}) (deriv({inf.VLLM_NUM_REQUESTS_WAITING}[10m])) > 0",
        "The queue of {{ $labels.instance }} keeps growing",
        "More than 10 requests wait and the queue has grown for 10 minutes: arrivals "
        "exceed what the engine serves.",
        ((_selector(inf.VLLM_NUM_REQUESTS_WAITING, ENGINE0), counter(0, 2)),
         (_selector(inf.VLLM_NUM_REQUESTS_WAITING, ENGINE1), steady(20))),
        (ENGINE0,),
    ),
    HealthAlert(
        "InferenceShedsLoad", n.SEVERITY_TICKET, 5 * MINUTE,
        f"sum by (job, instance) "
        f"(rate({inf.counter_series(inf.ADMISSION_REJECTIONS)}[5m])) > 0",
        "{{ $labels.instance }} turns requests away (admission queue full)",
        "The bounded admission queue is full and requests get 429/503; the service is "
        "over capacity.",
        ((_selector(inf.counter_series(inf.ADMISSION_REJECTIONS),
                    {"job": JOB_INFERENCE, "instance": "inference-0:8000",
                     inf.LABEL_REASON: "queue_full"}), counter(0, 30)),
         (_selector(inf.counter_series(inf.ADMISSION_REJECTIONS),
                    {"job": JOB_INFERENCE, "instance": "inference-1:8000",
                     inf.LABEL_REASON: "queue_full"}), steady(0))),
        ({"job": JOB_INFERENCE, "instance": "inference-0:8000"},),
    ),
    HealthAlert(
        "InferenceEngineNotReady", n.SEVERITY_PAGE, 5 * MINUTE,
        f"{inf.ENGINE_READY} == 0",
        "The engine of {{ $labels.instance }} is not ready",
        "The service is up but its engine has not been ready for 5 minutes; requests fail.",
        ((_selector(inf.ENGINE_READY, {"job": JOB_INFERENCE, "instance": "inference-0:8000"}),
          breaks(1, 0)),
         (_selector(inf.ENGINE_READY, {"job": JOB_INFERENCE, "instance": "inference-1:8000"}),
          steady(1))),
        ({"job": JOB_INFERENCE, "instance": "inference-0:8000"},),
    ),
)


def health_rule_file(params: RenderParams) -> RuleFile:
    return RuleFile("health", (RuleGroup(GROUP, tuple(a.rule(params) for a in HEALTH_ALERTS)),))


def health_tests(params: RenderParams) -> tuple[RuleTest, ...]:
    return tuple(alert.test(params) for alert in HEALTH_ALERTS)
