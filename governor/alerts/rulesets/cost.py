"""Energy and cost per token (``cost.yml``): joules per output token, output tokens per joule and,
with ``cost.gpu_hour_price`` in the spec, the cost of a million input and output tokens, per
target and model and per model (:mod:`governor.alerts.cost_rules`)."""

from __future__ import annotations

from typing import Final

from governor.alerts.cost_rules import cost_group, cost_test
from governor.alerts.ruleset import RuleSet

RULESET: Final = RuleSet(
    name="cost",
    rules=lambda scope: (cost_group(scope.spec),),
    tests=lambda scope: (cost_test(scope.spec),),
)
