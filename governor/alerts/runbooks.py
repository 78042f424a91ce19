"""Every alert's ``runbook_url``, and the fleet's names for Governor's severities.

The rule sets write alerts with Governor's own severities (``page``, ``ticket``, ``control``) and
no runbook; one pass over the rendered files then renames the severities as the spec's
``alerting`` section says and adds a ``runbook_url`` annotation pointing at the alert's section
of ``docs/runbooks.md`` — in the rules and in the promtool tests that expect them alike::

    >>> section("InterTokenLatencyErrorBudgetBurn"), section("GpuLost")
    ('errorbudgetburn', 'gpulost')

Each recorded GPU state (``gpu:health:state``) has its section too, which the GPU board and
``governor status`` point at::

    >>> state_section(2)
    'gpu-state-critical'
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

from governor.alerts.rules import AlertRule, Rule, RuleGroup
from governor.alerts.ruleset import RuleSetFile
from governor.alerts.ruletests import AlertCheck, ExpectedAlert
from governor.contracts.metrics import gpu_health as h
from governor.contracts.metrics import slo as n
from governor.slo.fleet import SEVERITIES, Alerting

RUNBOOK_ANNOTATION: Final = "runbook_url"
# Alerts made per SLO share one section: their name's suffix names it.
_SHARED_SECTIONS: Final = ("ClassErrorBudgetBurn", "ErrorBudgetBurn", "P99High",
                            n.NOT_IN_ENGINE_ALERT_SUFFIX)


def section(alert: str) -> str:
    """The anchor of an alert's section in docs/runbooks.md (GitHub's: its heading, lower case)."""
    for suffix in _SHARED_SECTIONS:
        if alert.endswith(suffix) and alert != suffix:
            return suffix.lower()
    return alert.lower()


def state_section(state: int) -> str:
    """The anchor of a GPU state's section ("### GPU state: WARN") in docs/runbooks.md."""
    return f"gpu-state-{h.STATE_NAMES[state].lower()}"


def _labels(labels: dict[str, str], alerting: Alerting) -> dict[str, str]:
    severity = labels.get(n.LABEL_SEVERITY)
    if severity in SEVERITIES:
        return {**labels, n.LABEL_SEVERITY: alerting.severity(severity)}
    return labels


def _annotations(annotations: dict[str, str], alert: str, alerting: Alerting) -> dict[str, str]:
    return {**annotations, RUNBOOK_ANNOTATION: alerting.runbook(section(alert))}


def _rule(rule: Rule, alerting: Alerting) -> Rule:
    if not isinstance(rule, AlertRule):
        return rule
    return replace(rule, labels=_labels(dict(rule.labels), alerting),
                   annotations=_annotations(dict(rule.annotations), rule.alert, alerting))


def _check(check: AlertCheck, alerting: Alerting) -> AlertCheck:
    expected = tuple(ExpectedAlert(_labels(dict(e.labels), alerting),
                                   _annotations(dict(e.annotations), check.alertname, alerting))
                     for e in check.expected)
    return replace(check, expected=expected)


def for_the_fleet(file: RuleSetFile, alerting: Alerting) -> RuleSetFile:
    """``file`` with the fleet's severities and every alert's runbook, tests included."""
    groups = tuple(RuleGroup(g.name, tuple(_rule(r, alerting) for r in g.rules))
                   for g in file.rules.groups)
    tests = tuple(replace(t, checks=tuple(_check(c, alerting) for c in t.checks))
                  for t in file.tests)
    return RuleSetFile(replace(file.rules, groups=groups), tests)
