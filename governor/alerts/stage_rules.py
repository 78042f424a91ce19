"""Where the time went when a latency SLO burns (``stages.yml``): the stage means, and an alert
that says when the fix is not batching.

Recording rules keep each stage's mean seconds per request (``governor_request_stage_seconds``,
the inference target's) over the page tier's two windows, 5 minutes and 1 hour. For each latency
SLO on one of the service's own histograms, ``<Name>BurnNotInEngine`` (severity page) fires
beside the SLO's page when, on the stages that latency lies on
(:data:`governor.contracts.metrics.service.STAGE_PATHS`), the service's own stages grew from the
hour to the last five minutes, by a material share of the latency, and more than the engine's
did: the time went to reading, parsing, the template, the tokenizer or the client's reading, and
no batching limit changes that. It carries the stage that grew most as ``stage``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from governor.alerts.rules import AlertRule, RecordingRule, RuleFile, RuleGroup
from governor.alerts.ruletests import AlertCheck, ExpectedAlert, InputSeries, RuleTest
from governor.alerts.slo_rules import slo_labels, tier_condition
from governor.alerts.slo_tests import cumulative
from governor.contracts.endpoints import INFERENCE
from governor.contracts.metrics import service as m
from governor.contracts.metrics import slo as n
from governor.contracts.metrics.scrape import LABEL_INSTANCE, LABEL_JOB
from governor.contracts.metrics.slo import SEVERITY_PAGE
from governor.contracts.promql import (
    Selector,
    equal_to,
    format_duration,
    format_number,
    one_of,
    ratio_of_rates,
)
from governor.contracts.stages import MATERIAL_SHARE, Path, Stage
from governor.slo.burn import firing_tiers, recorded
from governor.slo.spec import SLO, LatencySLI, SloSpec

GROUP = "governor-stages"
NAME = "stages"
# The first page tier's windows: the SLO's page looks at the same five minutes and hour.
SHORT_SECONDS, LONG_SECONDS = 300, 3600
MINUTE = 60


def applies(spec: SloSpec, slo: SLO) -> bool:
    """A latency SLO on one of governor serve's histograms (stock vLLM has no stages), with a
    page tier that can fire."""
    return (not spec.stock_vllm and isinstance(slo.sli, LatencySLI)
            and slo.sli.metric in m.STAGE_PATHS and bool(firing_tiers(spec, slo, SEVERITY_PAGE)))


def _path(slo: SLO) -> Path:
    assert isinstance(slo.sli, LatencySLI)
    return m.STAGE_PATHS[slo.sli.metric]


def mean_rules(spec: SloSpec) -> tuple[RecordingRule, ...]:
    """Each stage's mean seconds per request, over the inference target, per window."""
    scope = spec.targets.inference.matchers()
    return tuple(
        RecordingRule(n.STAGE_MEAN.at(window).name, ratio_of_rates(
            Selector(m.REQUEST_STAGE.sum, scope), Selector(m.REQUEST_STAGE.count, scope),
            format_duration(window), (m.LABEL_STAGE,)))
        for window in (SHORT_SECONDS, LONG_SECONDS))


def _mean(window: int, stages: Sequence[Stage]) -> str:
    return Selector(n.STAGE_MEAN.at(window).name,
                    (one_of(m.LABEL_STAGE, [s.value for s in stages]),)).render()


def _growth(stages: Sequence[Stage], by: str = "sum") -> str:
    """The stages' mean per request over the short window less over the long one: summed, or
    per stage (``by=""``)."""
    short, long = _mean(SHORT_SECONDS, stages), _mean(LONG_SECONDS, stages)
    if not by:
        return f"{short} - {long}"
    return f"{by}({short}) - {by}({long})"


def not_in_engine_alert(spec: SloSpec, slo: SLO) -> AlertRule:
    path = _path(slo)
    both = (*path.engine, *path.service)
    pages = "\nor\n".join(tier_condition(spec, slo, t)
                          for t in firing_tiers(spec, slo, SEVERITY_PAGE))
    expr = (f"topk(1, {_growth(path.service, by='')})\n"
            f"and on ()\n(\n  {_growth(path.service)}\n>\n  {_growth(path.engine)}\n)\n"
            f"and on ()\n(\n  {_growth(path.service)}\n>\n"
            f"  {format_number(MATERIAL_SHARE)} * sum({_mean(SHORT_SECONDS, both)})\n)\n"
            f"and on ()\n(\n{pages}\n)")
    engine = ", ".join(s.value for s in path.engine)
    return AlertRule(
        alert=slo.camel_name + n.NOT_IN_ENGINE_ALERT_SUFFIX,
        expr=expr,
        labels={**slo_labels(spec, slo), n.LABEL_SEVERITY: SEVERITY_PAGE},
        annotations={
            "summary": f"{spec.service} SLO {slo.name} burns, and the time went to "
                       "{{ $labels.stage }}: the fix is not batching",
            "description": f"SLO {slo.name} is burning its error budget fast, and over the last "
                           f"5m against the hour before, the service's own stages ({{{{ "
                           f"$labels.stage }}}} most) grew more than the engine's ({engine}). "
                           "Retuning the batching limits will not help, and the controller "
                           "holds them; see `governor status` and the inference board's "
                           "'Where the time goes' row.",
        },
    )


def stage_rule_file(spec: SloSpec) -> RuleFile:
    alerts = tuple(not_in_engine_alert(spec, slo) for slo in spec.slos if applies(spec, slo))
    return RuleFile(NAME, (RuleGroup(GROUP, (*mean_rules(spec), *alerts)),))


# ---- the promtool scenarios -------------------------------------------------------------------

@dataclass(frozen=True)
class Scenario:
    name: str
    grows: Stage | None  # the stage whose time per request rises at minute BREAKS_AT
    burning: bool
    fires: bool


BREAKS_AT = 70  # an hour of steady traffic first, so the hour's mean is the steady one
CHECK_AT = BREAKS_AT + 10
STEADY_SECONDS = {Stage.PREFILL: Decimal("0.1"), Stage.DECODE: Decimal("1"),
                  Stage.STREAM_WRITE: Decimal("0.01"), Stage.TOKENIZE: Decimal("0.005")}
GROWN_SECONDS = Decimal("2")
BASE_SECONDS = Decimal("0.001")  # every other stage


def _stage_series(spec: SloSpec, grows: Stage | None) -> tuple[InputSeries, ...]:
    """A request a second; each stage's seconds per request steady, one of them growing."""
    target = spec.targets.inference
    labels = {**target.selector, LABEL_JOB: target.job, LABEL_INSTANCE: INFERENCE.address()}
    series = []
    for stage in Stage:
        steady = STEADY_SECONDS.get(stage, BASE_SECONDS)
        after = steady + GROWN_SECONDS if stage is grows else steady
        stage_labels = equal_to({**labels, m.LABEL_STAGE: stage.value})
        series.append(InputSeries(Selector(m.REQUEST_STAGE.sum, stage_labels).render(),
                                  cumulative([(steady * MINUTE, BREAKS_AT),
                                              (after * MINUTE, CHECK_AT - BREAKS_AT + 5)])))
        series.append(InputSeries(Selector(m.REQUEST_STAGE.count, stage_labels).render(),
                                  cumulative([(Decimal(MINUTE), CHECK_AT + 5)])))
    return tuple(series)


def _burn_series(spec: SloSpec, slo: SLO, burning: bool) -> tuple[InputSeries, ...]:
    """The SLO's recorded error ratios (and traffic) of every page tier's windows: all errors
    from minute BREAKS_AT when burning, none otherwise."""
    series = []
    for tier in firing_tiers(spec, slo, SEVERITY_PAGE):
        for window in (tier.short_seconds, tier.long_seconds):
            after = "1" if burning else "0"
            series.append(InputSeries(recorded(n.SLI_ERROR_RATIO.at(window), spec, slo),
                                      f"0x{BREAKS_AT} {after}x{CHECK_AT - BREAKS_AT + 5}"))
            series.append(InputSeries(recorded(n.SLI_EVENTS_RATE.at(window), spec, slo),
                                      f"1000x{CHECK_AT + 5}"))
    return tuple(series)


def _scenarios(path: Path) -> tuple[Scenario, ...]:
    service, engine = path.service[-1], path.engine[-1]
    return (
        Scenario(f"burning, {service.value} grew: fires naming it", service, True, True),
        Scenario(f"burning, {engine.value} grew: quiet (the engine's, batching may help)",
                 engine, True, False),
        Scenario(f"{service.value} grew, no burn: quiet", service, False, False),
    )


def stage_tests(spec: SloSpec) -> tuple[RuleTest, ...]:
    tests = []
    for slo in spec.slos:
        if not applies(spec, slo):
            continue
        alert = not_in_engine_alert(spec, slo)
        for scenario in _scenarios(_path(slo)):
            labels = {**alert.labels, m.LABEL_STAGE: scenario.grows.value} \
                if scenario.grows else dict(alert.labels)
            expected = (ExpectedAlert(labels, alert.expected_annotations(labels)),) \
                if scenario.fires else ()
            tests.append(RuleTest(
                f"{alert.alert}: {scenario.name}", MINUTE,
                (*_stage_series(spec, scenario.grows),
                 *_burn_series(spec, slo, scenario.burning)),
                (AlertCheck((BREAKS_AT - 1) * MINUTE, alert.alert),
                 AlertCheck(CHECK_AT * MINUTE, alert.alert, expected)),
            ))
    return tuple(tests)
