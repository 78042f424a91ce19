"""The fast per-instance P99 alerts routed to the controller (``control.yml``), when an SLO is
controller-linked."""

from __future__ import annotations

from typing import Final

from governor.alerts.control_rules import control_rule_file, fast_alert_tests
from governor.alerts.rules import RuleGroup
from governor.alerts.ruleset import RuleSet, Scope


def _groups(scope: Scope) -> tuple[RuleGroup, ...]:
    file = control_rule_file(scope.spec, scope.params)
    return file.groups if file else ()


RULESET: Final = RuleSet(
    name="control",
    rules=_groups,
    tests=lambda scope: fast_alert_tests(scope.spec, scope.params, scope.histograms),
    applies=lambda scope: any(slo.controller for slo in scope.spec.slos),
)
