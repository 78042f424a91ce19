"""The same rule groups as a prometheus-operator ``PrometheusRule`` for Kubernetes."""

from __future__ import annotations

from collections.abc import Sequence

from governor.alerts.rules import RuleFile
from governor.slo.spec import SloSpec


def prometheus_rule(spec: SloSpec, files: Sequence[RuleFile]) -> dict[str, object]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": f"governor-{spec.service}".lower().replace("_", "-").replace(".", "-"),
            "labels": {"app.kubernetes.io/part-of": "governor",
                       "app.kubernetes.io/component": "slo-rules"},
        },
        "spec": {"groups": [group.to_dict() for f in files for group in f.groups]},
    }
