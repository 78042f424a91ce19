"""The controller's scale-out signal as an alert (``scale.yml``): a target whose demand needs
more replicas than it has, by ``governor_controller_desired_replicas``.

The controller raises the gauge above 1 only while it judges a target overloaded at the best
limits it has seen (the queue grows and no limits meet both SLOs), so the alert asks a person,
or an autoscaler reading the same series, for capacity the knobs cannot give::

    GovernorScaleOutNeeded{target="inference-0:8000"}   # desired replicas > 1 for 10 minutes
"""

from __future__ import annotations

from typing import Final

from governor.alerts.health_alert import MINUTE, HealthAlert, breaks, scraped, steady
from governor.alerts.rules import RuleGroup
from governor.alerts.ruleset import RuleSet, Scope
from governor.contracts.endpoints import CONTROLLER, INFERENCE
from governor.contracts.metrics import controller as names
from governor.contracts.metrics.slo import SEVERITY_TICKET
from governor.contracts.promql import Selector, equal_to, max_by
from governor.slo.fleet import Target

GROUP = "governor-scale"
_BUSY = INFERENCE.address("inference-0")
_CALM = INFERENCE.address("inference-1")


def _series(controller: Target, target: str, reason: str) -> str:
    labels = {**scraped(controller, CONTROLLER.address("controller")),
              names.LABEL_TARGET: target, names.LABEL_REASON: reason}
    return Selector(names.DESIRED_REPLICAS.name, equal_to(labels)).render()


def scale_out(controller: Target) -> HealthAlert:
    """The alert on the advice of the controller the spec's target names."""
    advice = Selector(names.DESIRED_REPLICAS.name, controller.matchers())
    return HealthAlert(
        "GovernorScaleOutNeeded", SEVERITY_TICKET, 10 * MINUTE,
        f"{max_by((names.LABEL_TARGET,), advice)} > 1",
        "{{ $labels.target }} needs more replicas than it has",
        "The controller judges {{ $labels.target }} overloaded at its best batching limits: "
        "the waiting queue grows and no limits meet both latency SLOs. The gauge's value is the "
        "replicas its demand needs by what one served; add replicas (or let the KEDA "
        "ScaledObject or the HPA in deploy/kubernetes/ do it).",
        ((_series(controller, _BUSY, names.SCALE_OVERLOAD), breaks(1, 3)),
         (_series(controller, _CALM, names.SCALE_NOT_OVERLOADED), steady(1))),
        ({names.LABEL_TARGET: _BUSY},),
    )


def _groups(scope: Scope) -> tuple[RuleGroup, ...]:
    return (RuleGroup(GROUP, (scale_out(scope.spec.targets.controller).rule(scope.params),)),)


RULESET: Final = RuleSet(
    name="scale",
    rules=_groups,
    tests=lambda scope: (scale_out(scope.spec.targets.controller).test(scope.params),),
    applies=lambda scope: any(slo.controller for slo in scope.spec.slos),
)
