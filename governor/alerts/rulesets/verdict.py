"""Why a latency SLO burns (``verdict.yml``): per target and burning SLO, each cause's share of
the breach, from inputs recorded the same way for every fleet."""

from __future__ import annotations

from typing import Final

from governor.alerts.ruleset import RuleSet
from governor.alerts.verdict_rules import NAME, applies, verdict_rule_file
from governor.alerts.verdict_tests import verdict_tests

RULESET: Final = RuleSet(
    name=NAME,
    rules=lambda scope: verdict_rule_file(scope.spec, scope.params).groups,
    tests=lambda scope: verdict_tests(scope.spec, scope.params),
    applies=lambda scope: applies(scope.spec),
)
