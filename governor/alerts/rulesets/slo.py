"""Per SLO: its recording rules and multi-window burn-rate alerts, with their promtool tests
(``slo-<name>.yml``); with request classes, a test that each class counts at its own threshold."""

from __future__ import annotations

from typing import Final

from governor.alerts.class_tests import combined_threshold_tests
from governor.alerts.ruleset import RuleSet
from governor.alerts.slo_rules import slo_rule_file
from governor.alerts.slo_tests import slo_tests

RULESET: Final = RuleSet(
    name="slo",
    rules=lambda scope: slo_rule_file(scope.spec, scope.the_slo).groups,
    tests=lambda scope: (*slo_tests(scope.spec, scope.the_slo),
                         *combined_threshold_tests(scope.spec, scope.the_slo)),
    per_slo=True,
)
