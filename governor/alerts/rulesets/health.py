"""The stack's own health: targets down, exporter stale, vLLM and GPU trouble, and each GPU's
recorded state (``health.yml``)."""

from __future__ import annotations

from typing import Final

from governor.alerts.health_rules import health_rule_file, health_tests
from governor.alerts.ruleset import RuleSet

RULESET: Final = RuleSet(
    name="health",
    rules=lambda scope: health_rule_file(scope.spec.targets, scope.params,
                                         scope.spec.alerting.prefix_cache,
                                         scope.spec.alerting.gpu_health).groups,
    tests=lambda scope: health_tests(scope.spec.targets, scope.params,
                                     scope.spec.alerting.prefix_cache,
                                     scope.spec.alerting.gpu_health),
)
