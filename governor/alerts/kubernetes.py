"""The rule groups as a prometheus-operator ``PrometheusRule``, in the spec's namespace and with
the labels the cluster's operator selects rules by (``kubernetes.labels`` in ``slo.yaml``;
kube-prometheus-stack selects on its Helm release).

prometheus-operator confines an ``AlertmanagerConfig`` to alerts whose ``namespace`` label is its
own, so the control alerts, which the generated AlertmanagerConfig routes to the controller,
carry the spec's namespace as a label here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from governor.alerts.rules import RuleFile
from governor.contracts.metrics import slo as n
from governor.contracts.metrics.scrape import LABEL_NAMESPACE
from governor.slo.spec import SloSpec


def rule_name(spec: SloSpec) -> str:
    return f"governor-{spec.service}".lower().replace("_", "-").replace(".", "-")


def _namespaced(rule: dict[str, Any], spec: SloSpec) -> dict[str, Any]:
    labels = rule.get("labels", {})
    if "alert" not in rule or labels.get(n.LABEL_SEVERITY) != spec.alerting.control:
        return rule
    return {**rule, "labels": {**labels, LABEL_NAMESPACE: spec.kubernetes.namespace}}


def prometheus_rule(spec: SloSpec, files: Sequence[RuleFile]) -> dict[str, object]:
    groups: list[dict[str, Any]] = []
    for group in (g.to_dict() for f in files for g in f.groups):
        rules: list[dict[str, Any]] = group["rules"]  # type: ignore[assignment]
        groups.append({**group, "rules": [_namespaced(r, spec) for r in rules]})
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": rule_name(spec), "namespace": spec.kubernetes.namespace,
            "labels": {"app.kubernetes.io/part-of": "governor",
                       "app.kubernetes.io/component": "slo-rules", **spec.kubernetes.labels},
        },
        "spec": {"groups": groups},
    }
