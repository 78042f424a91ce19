"""Where a request's time went (``stages.yml``): each stage's mean per request over the page
windows, and per latency SLO an alert for a burn that sits outside the engine."""

from __future__ import annotations

from typing import Final

from governor.alerts.ruleset import RuleSet
from governor.alerts.stage_rules import NAME, applies, stage_rule_file, stage_tests

RULESET: Final = RuleSet(
    name=NAME,
    rules=lambda scope: stage_rule_file(scope.spec).groups,
    tests=lambda scope: stage_tests(scope.spec),
    applies=lambda scope: any(applies(scope.spec, slo) for slo in scope.spec.slos),
)
