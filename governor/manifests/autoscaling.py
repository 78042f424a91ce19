"""Two example autoscalers on the controller's scale-out signal, for the inference Deployment.

``governor_controller_desired_replicas`` is one series per inference target: 1 unless the
controller judges that target overloaded at its best limits (then the replicas its demand needs
by what it served). Summed over targets it is the fleet size the demand needs, so both examples
scale the Deployment to ``ceil(sum / 1)``: KEDA's Prometheus trigger with an ``AverageValue`` of
1, or an ``autoscaling/v2`` HPA reading the same series as an external metric (served by
prometheus-adapter or KEDA's metrics server). Both scale up at once (the controller already
waited for the overload to persist) and down only after a long stabilisation window, since the
advice falls back to 1 per target as soon as the overload ends. Apply one of the two, not both.
"""

from __future__ import annotations

from typing import Final

from governor.contracts.metrics.controller import DESIRED_REPLICAS
from governor.contracts.promql import Selector, sum_by
from governor.manifests.kubernetes import INFERENCE_NAME, Object, labels_of, metadata
from governor.slo.spec import SloSpec

MAX_REPLICAS: Final = 8  # the fleet's bound, to adapt
SCALE_DOWN_STABILISATION_SECONDS: Final = 900
AUTOSCALER_NAME: Final = f"{INFERENCE_NAME}-scale-out"


def _desired(spec: SloSpec) -> str:
    """The summed advice of the controller this spec describes."""
    return sum_by((), Selector(DESIRED_REPLICAS.name, spec.targets.controller.matchers()))


def _target() -> Object:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "name": INFERENCE_NAME}


def _bounds(spec: SloSpec) -> tuple[int, int]:
    low = spec.kubernetes.replicas
    return low, max(low, MAX_REPLICAS)


def _behavior() -> Object:
    return {"scaleUp": {"stabilizationWindowSeconds": 0},
            "scaleDown": {"stabilizationWindowSeconds": SCALE_DOWN_STABILISATION_SECONDS}}


def keda_scaled_object(spec: SloSpec) -> Object:
    """A KEDA ``ScaledObject``: replicas = the summed desired replicas (AverageValue 1)."""
    low, high = _bounds(spec)
    return {
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
        "metadata": metadata(AUTOSCALER_NAME, spec.kubernetes),
        "spec": {
            "scaleTargetRef": _target(),
            "minReplicaCount": low, "maxReplicaCount": high,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": _behavior()}},
            "triggers": [{
                "type": "prometheus",
                "metadata": {"serverAddress": spec.kubernetes.prometheus,
                             "query": _desired(spec), "threshold": "1",
                             "metricType": "AverageValue"},
            }],
        },
    }


def horizontal_pod_autoscaler(spec: SloSpec) -> Object:
    """An ``autoscaling/v2`` HPA on the desired replicas as an external metric."""
    low, high = _bounds(spec)
    return {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": metadata(AUTOSCALER_NAME, spec.kubernetes),
        "spec": {
            "scaleTargetRef": _target(),
            "minReplicas": low, "maxReplicas": high,
            "metrics": [{"type": "External", "external": {
                "metric": {"name": DESIRED_REPLICAS.name,
                           "selector": {"matchLabels": labels_of(spec.targets.controller)}},
                "target": {"type": "AverageValue", "averageValue": "1"}}}],
            "behavior": _behavior(),
        },
    }
