"""Per latency SLO, per request class: recording rules and burn-rate alerts labelled ``class``,
each class against its own threshold (``classes-<name>.yml``), when the spec declares classes."""

from __future__ import annotations

from typing import Final

from governor.alerts.class_rules import class_rule_groups
from governor.alerts.class_tests import class_tests
from governor.alerts.ruleset import RuleSet
from governor.slo import class_thresholds

RULESET: Final = RuleSet(
    name="classes",
    rules=lambda scope: class_rule_groups(scope.spec, scope.the_slo),
    tests=lambda scope: class_tests(scope.spec, scope.the_slo),
    applies=lambda scope: class_thresholds.applies(scope.spec, scope.the_slo),
    per_slo=True,
)
