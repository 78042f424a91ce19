"""Example autoscalers on the controller's scale-out signal, for the inference Deployment.

``governor_controller_desired_replicas`` is one series per inference target: 1 unless the
controller judges that target overloaded at its best limits (then the replicas its demand needs
by what it served). Summed over targets it is the fleet size the demand needs, so both examples
scale the Deployment to ``ceil(sum / 1)``: KEDA's Prometheus trigger with an ``AverageValue`` of
1, or an ``autoscaling/v2`` HPA reading the same series as an external metric (served by
prometheus-adapter or KEDA's metrics server). Both scale up at once (the controller already
waited for the overload to persist) and down only after a long stabilisation window, since the
advice falls back to 1 per target as soon as the overload ends. Apply one of the two, not both.

The spec's ``kubernetes.autoscaling`` (:mod:`governor.slo.autoscaling`) sets the bounds, which of
the two is written, and extra triggers: waiting requests per replica (``AverageValue``: the
queue summed over the fleet, divided by the replicas) and the mean utilisation of the fleet's
GPUs (``Value``: replicas grow in proportion to it, HPA's ``current * value / target``). The
autoscaler takes the most replicas any trigger asks for. With ``min_replicas: 0`` (KEDA only) a
trigger on the spec's ``demand`` counter wakes the fleet from zero, and every other trigger is
inactive at an idle replica, so that KEDA scales to zero after its cooldown without requests.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Final

from governor.contracts.metrics import dcgm, gpu, vllm
from governor.contracts.metrics.controller import DESIRED_REPLICAS
from governor.contracts.promql import Selector, aggregate, format_number, rate, sum_by
from governor.manifests.kubernetes import INFERENCE_NAME, Object, labels_of, metadata
from governor.slo.autoscaling import Autoscaling
from governor.slo.spec import SloSpec

SCALE_DOWN_STABILISATION_SECONDS: Final = 900
# KEDA scales an idle fleet to zero this long after its last active trigger (KEDA's default is
# 300 s): as long as the scale-down window, so a pause in traffic does not cost a cold start.
SCALE_TO_ZERO_COOLDOWN_SECONDS: Final = SCALE_DOWN_STABILISATION_SECONDS
# The window the demand counter's rate is taken over: a single request keeps the fleet awake
# (KEDA polls every 30 s) for this long.
DEMAND_WINDOW: Final = "2m"
# The demand trigger only wakes the fleet: a threshold no request rate reaches keeps it at one
# replica's worth (ceil(rate / threshold) = 1), and the other triggers size the fleet.
WAKE_ONLY_THRESHOLD: Final = "1000000"
AUTOSCALER_NAME: Final = f"{INFERENCE_NAME}-scale-out"


def _desired(spec: SloSpec) -> str:
    """The summed advice of the controller this spec describes."""
    return sum_by((), Selector(DESIRED_REPLICAS.name, spec.targets.controller.matchers()))


def _waiting(spec: SloSpec) -> str:
    """Requests waiting in every engine of the fleet."""
    return sum_by((), Selector(vllm.NUM_REQUESTS_WAITING.name,
                               spec.targets.inference.matchers()))


def _gpu_utilization(spec: SloSpec) -> str:
    """The mean utilisation ratio of the GPUs the spec's GPU target selects."""
    on = spec.targets.gpu.matchers()
    series = dcgm.GPU_UTIL.base(on) if spec.targets.gpu.dcgm \
        else Selector(gpu.UTILIZATION.name, on).render()
    return aggregate("avg", (), series)


def _gpu_metric(spec: SloSpec, ratio: float) -> tuple[str, str]:
    """The GPU utilisation series an HPA reads by name, and the target in its unit: dcgm's
    default name is in percent."""
    if not spec.targets.gpu.dcgm:
        return gpu.UTILIZATION.name, format_number(Decimal(repr(ratio)))
    oldest = dcgm.GPU_UTIL.fields[-1]
    return oldest.name, format_number(Decimal(repr(ratio)) / oldest.to_base)


def _target() -> Object:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "name": INFERENCE_NAME}


def _behavior() -> Object:
    return {"scaleUp": {"stabilizationWindowSeconds": 0},
            "scaleDown": {"stabilizationWindowSeconds": SCALE_DOWN_STABILISATION_SECONDS}}


def _prometheus(spec: SloSpec, query: str, threshold: str, *, metric_type: str = "AverageValue",
                activation: str | None = None) -> Object:
    """A KEDA Prometheus trigger; ``activation`` only where the fleet may scale to zero (KEDA
    ignores it above zero)."""
    fields = {"serverAddress": spec.kubernetes.prometheus, "query": query,
              "threshold": threshold, "metricType": metric_type}
    if activation is not None and spec.kubernetes.autoscaling.scales_to_zero:
        fields["activationThreshold"] = activation
    return {"type": "prometheus", "metadata": fields}


def _keda_triggers(spec: SloSpec, scaling: Autoscaling) -> list[Object]:
    # Activation: an idle replica asks for 1 (the controller's signal), has nothing waiting and
    # its GPU under the target, so none of these keeps a fleet without demand awake.
    triggers = [_prometheus(spec, _desired(spec), "1", activation="1")]
    if scaling.queue_length is not None:
        triggers.append(_prometheus(spec, _waiting(spec), str(scaling.queue_length),
                                    activation="0"))
    if scaling.gpu_utilization is not None:
        target = format_number(Decimal(repr(scaling.gpu_utilization)))
        triggers.append(_prometheus(spec, _gpu_utilization(spec), target, metric_type="Value",
                                    activation=target))
    if scaling.demand is not None:
        triggers.append(_prometheus(spec, sum_by((), rate(scaling.demand, DEMAND_WINDOW)),
                                    WAKE_ONLY_THRESHOLD, activation="0"))
    return triggers


def keda_scaled_object(spec: SloSpec) -> Object:
    """A KEDA ``ScaledObject``: replicas = the summed desired replicas (AverageValue 1), or more
    where an extra trigger asks for more."""
    scaling = spec.kubernetes.autoscaling
    low, high = scaling.bounds(spec.kubernetes.replicas)
    body: Object = {
        "scaleTargetRef": _target(),
        "minReplicaCount": low, "maxReplicaCount": high,
        "advanced": {"horizontalPodAutoscalerConfig": {"behavior": _behavior()}},
        "triggers": _keda_triggers(spec, scaling),
    }
    if scaling.scales_to_zero:
        body["cooldownPeriod"] = SCALE_TO_ZERO_COOLDOWN_SECONDS
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
            "metadata": metadata(AUTOSCALER_NAME, spec.kubernetes), "spec": body}


def _external(name: str, labels: dict[str, str], target: Object) -> Object:
    return {"type": "External", "external": {
        "metric": {"name": name, "selector": {"matchLabels": labels}}, "target": target}}


def _hpa_metrics(spec: SloSpec, scaling: Autoscaling) -> list[Object]:
    metrics = [_external(DESIRED_REPLICAS.name, labels_of(spec.targets.controller),
                         {"type": "AverageValue", "averageValue": "1"})]
    if scaling.queue_length is not None:
        metrics.append(_external(vllm.NUM_REQUESTS_WAITING.name,
                                 labels_of(spec.targets.inference),
                                 {"type": "AverageValue",
                                  "averageValue": str(scaling.queue_length)}))
    if scaling.gpu_utilization is not None:
        name, value = _gpu_metric(spec, scaling.gpu_utilization)
        metrics.append(_external(name, labels_of(spec.targets.gpu),
                                 {"type": "Value", "value": value}))
    return metrics


def horizontal_pod_autoscaler(spec: SloSpec) -> Object:
    """An ``autoscaling/v2`` HPA on the desired replicas as an external metric, and on the
    extra triggers' series likewise."""
    scaling = spec.kubernetes.autoscaling
    low, high = scaling.bounds(spec.kubernetes.replicas)
    return {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": metadata(AUTOSCALER_NAME, spec.kubernetes),
        "spec": {
            "scaleTargetRef": _target(),
            "minReplicas": low, "maxReplicas": high,
            "metrics": _hpa_metrics(spec, scaling),
            "behavior": _behavior(),
        },
    }
