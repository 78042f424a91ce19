"""Rebuild the pinned Kubernetes and operator schemas in this folder from their upstream files.

    python tests/data/kubernetes/pin.py K8S_SCHEMA_DIR OPERATOR_CRD_DIR KEDA_CRD_DIR

The first is a ``v<version>-local-strict`` folder of kubernetes-json-schema (as shipped in the
``kubernetes-validate`` wheel); the second ``example/prometheus-operator-crd/`` of
prometheus-operator; the third ``config/crd/bases/`` of KEDA. Only the kinds the generated
manifests use are kept, with every definition they reach; ``description`` strings are dropped
(they are most of the bytes and validate nothing). Nothing else changes: types, enums, required
fields and ``additionalProperties: false`` stay as upstream wrote them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
KINDS = {  # kubernetes-json-schema file stem -> apiVersion/kind
    "configmap-v1": "v1/ConfigMap",
    "service-v1": "v1/Service",
    "persistentvolumeclaim-v1": "v1/PersistentVolumeClaim",
    "serviceaccount-v1": "v1/ServiceAccount",
    "deployment-apps-v1": "apps/v1/Deployment",
    "daemonset-apps-v1": "apps/v1/DaemonSet",
    "horizontalpodautoscaler-autoscaling-v2": "autoscaling/v2/HorizontalPodAutoscaler",
}
CRDS = {
    "monitoring.coreos.com_servicemonitors.yaml",
    "monitoring.coreos.com_podmonitors.yaml",
    "monitoring.coreos.com_prometheusrules.yaml",
    "monitoring.coreos.com_alertmanagerconfigs.yaml",
    "keda.sh_scaledobjects.yaml",
}
class _Loader(yaml.SafeLoader):
    """PyYAML reads a bare ``=`` (a matcher operator in an enum) as a value tag; it is a string."""


_Loader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: node.value)
PREFIX = "/api/_definitions.json#/$defs/"


def strip(node: Any) -> Any:
    if isinstance(node, dict):
        # A property may be called "description" too: only the annotation (a string) goes.
        return {k: strip(v) for k, v in node.items()
                if not (k == "description" and isinstance(v, str))}
    if isinstance(node, list):
        return [strip(v) for v in node]
    return node


def refs(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            found.add(ref.removeprefix(PREFIX).removeprefix("#/$defs/"))
        for value in node.values():
            found |= refs(value)
    elif isinstance(node, list):
        for value in node:
            found |= refs(value)
    return found


def relink(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: (v.replace(PREFIX, "#/$defs/") if k == "$ref" else relink(v))
                for k, v in node.items()}
    if isinstance(node, list):
        return [relink(v) for v in node]
    return node


def kubernetes(source: Path) -> dict[str, Any]:
    every = json.loads((source / "_definitions.json").read_text())["$defs"]
    kinds = {KINDS[stem]: relink(strip(json.loads((source / f"{stem}.json").read_text())))
             for stem in KINDS}
    wanted: set[str] = set()
    todo = set().union(*(refs(schema) for schema in kinds.values()))
    while todo:
        name = todo.pop()
        if name not in wanted:
            wanted.add(name)
            todo |= refs(every[name])
    for schema in kinds.values():
        schema.pop("$id", None)
    return {"source": source.name, "kinds": kinds,
            "$defs": {name: relink(strip(every[name])) for name in sorted(wanted)}}


def crds(*folders: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for folder in folders:
        for path in sorted(folder.glob("*.yaml")):
            if path.name not in CRDS:
                continue
            crd = yaml.load(path.read_text(), Loader=_Loader)  # noqa: S506 - a SafeLoader
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                if version.get("served", True):
                    schema = strip(version["schema"]["openAPIV3Schema"])
                    out[f"{group}/{version['name']}/{kind}"] = schema
    return out


def main(argv: list[str]) -> None:
    k8s, operator, keda = (Path(a) for a in argv)
    for name, pinned in (("kubernetes.json", kubernetes(k8s)), ("crds.json", crds(operator, keda))):
        (HERE / name).write_text(json.dumps(pinned, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
