"""Kubernetes manifests: the rule groups as a prometheus-operator ``PrometheusRule``, and two
example autoscalers that follow the controller's scale-out signal.

``governor_controller_desired_replicas`` is one series per inference target, 1 unless the
controller judges that target overloaded at its best limits (then the replicas its demand
needs by what it served). Summed over targets it is the fleet size the demand needs, so both
examples scale the inference Deployment to ``ceil(sum / 1)``: KEDA's Prometheus trigger with an
``AverageValue`` of 1, or an ``autoscaling/v2`` HPA on the same series as an external metric
(served by prometheus-adapter or KEDA's metrics server). Neither scales down on the signal
alone: scale-down keeps a long stabilisation window, as the controller's advice is 1 per
target whenever it is not overloaded.
"""

from __future__ import annotations

from collections.abc import Sequence

from governor.alerts.rules import RuleFile
from governor.contracts.metrics.controller import DESIRED_REPLICAS
from governor.contracts.promql import sum_by
from governor.slo.spec import SloSpec

# The example's assumptions, to adapt: the Deployment serving the spec's service, Prometheus as
# prometheus-operator names its Service, and the fleet's bounds.
PROMETHEUS_URL = "http://prometheus-operated.monitoring.svc:9090"
MIN_REPLICAS, MAX_REPLICAS = 1, 8
SCALE_DOWN_STABILISATION_SECONDS = 900


def _name(spec: SloSpec) -> str:
    return f"governor-{spec.service}".lower().replace("_", "-").replace(".", "-")


def _metadata(spec: SloSpec, component: str) -> dict[str, object]:
    return {"name": _name(spec), "labels": {"app.kubernetes.io/part-of": "governor",
                                            "app.kubernetes.io/component": component}}


def prometheus_rule(spec: SloSpec, files: Sequence[RuleFile]) -> dict[str, object]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": _metadata(spec, "slo-rules"),
        "spec": {"groups": [group.to_dict() for f in files for group in f.groups]},
    }


def _deployment(spec: SloSpec) -> dict[str, str]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "name": spec.service}


def keda_scaled_object(spec: SloSpec) -> dict[str, object]:
    """A KEDA ``ScaledObject``: replicas = the summed desired replicas (AverageValue 1)."""
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": _metadata(spec, "autoscaling"),
        "spec": {
            "scaleTargetRef": _deployment(spec),
            "minReplicaCount": MIN_REPLICAS,
            "maxReplicaCount": MAX_REPLICAS,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": _behavior()}},
            "triggers": [{
                "type": "prometheus",
                "metadata": {"serverAddress": PROMETHEUS_URL,
                             "query": sum_by((), DESIRED_REPLICAS.name),
                             "threshold": "1", "metricType": "AverageValue"},
            }],
        },
    }


def horizontal_pod_autoscaler(spec: SloSpec) -> dict[str, object]:
    """An ``autoscaling/v2`` HPA on the desired replicas as an external metric."""
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _metadata(spec, "autoscaling"),
        "spec": {
            "scaleTargetRef": _deployment(spec),
            "minReplicas": MIN_REPLICAS,
            "maxReplicas": MAX_REPLICAS,
            "metrics": [{"type": "External", "external": {
                "metric": {"name": DESIRED_REPLICAS.name},
                "target": {"type": "AverageValue", "averageValue": "1"}}}],
            "behavior": _behavior(),
        },
    }


def _behavior() -> dict[str, object]:
    # Up at once (the controller already waited for the overload to persist); down slowly.
    return {"scaleUp": {"stabilizationWindowSeconds": 0},
            "scaleDown": {"stabilizationWindowSeconds": SCALE_DOWN_STABILISATION_SECONDS}}
