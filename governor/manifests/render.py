"""``deploy/kubernetes/``: one file per component, each a list of YAML documents, in the spec's
``kubernetes.namespace`` (``governor`` by default)::

    kubectl create namespace governor
    kubectl -n governor create configmap governor-slo --from-file=slo.yaml
    kubectl -n governor create secret generic governor-tokens \\
        --from-file=admin_token=.secrets/admin_token \\
        --from-file=controller_token=.secrets/controller_token \\
        --from-file=probe_token=.secrets/probe_token
    kubectl apply -f deploy/kubernetes/
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

from governor.generation.artifacts import Artifacts, Owned
from governor.generation.params import RenderParams
from governor.generation.yamltext import GENERATED_MARK, dump_yaml, yaml_body
from governor.manifests import autoscaling
from governor.manifests import kubernetes as k
from governor.slo.spec import SloSpec

KUBERNETES_DIR: Final = "kubernetes"
EXPORTER: Final = f"{KUBERNETES_DIR}/exporter.yaml"
INFERENCE: Final = f"{KUBERNETES_DIR}/inference.yaml"
CONTROLLER: Final = f"{KUBERNETES_DIR}/controller.yaml"
PROBE: Final = f"{KUBERNETES_DIR}/probe.yaml"
SCALED_OBJECT: Final = f"{KUBERNETES_DIR}/scaledobject.yaml"
HPA: Final = f"{KUBERNETES_DIR}/hpa.yaml"
HEADER_NOTE: Final = """\
# Apply after creating the namespace, the ConfigMap of slo.yaml and the tokens' Secret
# (docs/deploy.md, "On Kubernetes").
"""


def _is_generated(path: Path) -> bool:
    return path.read_text(encoding="utf-8").startswith(GENERATED_MARK) and path.name in {
        Path(p).name for p in (EXPORTER, INFERENCE, CONTROLLER, PROBE, SCALED_OBJECT, HPA)}


AUTOSCALER_NOTE: Final = """\
# An example on the controller's scale-out signal: apply this one or its twin (hpa.yaml or
# scaledobject.yaml), not both. docs/controller.md, "Scale-out signal".
"""
# When the spec's kubernetes.autoscaling.autoscaler names one, it has no twin.
SOLE_AUTOSCALER_NOTE: Final = """\
# The autoscaler kubernetes.autoscaling asks for, on the controller's scale-out signal and the
# spec's triggers. docs/deploy.md, "Autoscaling".
"""
ARTIFACTS: Final = Artifacts((Owned(KUBERNETES_DIR, "*.yaml", _is_generated),))


def dump_documents(documents: Sequence[k.Object], source: str) -> str:
    """Several objects in one file, ``---`` apart, under one generated-file header."""
    first, *rest = documents
    text = dump_yaml(first, source, HEADER_NOTE)
    for document in rest:
        text += "---\n" + yaml_body(document)
    return text


def render_all(spec: SloSpec, params: RenderParams, *, source: str) -> dict[str, str]:
    """The components' manifests, and the example autoscalers when the controller acts
    on an SLO: relative path → text. Where the spec's GPUs are dcgm-exporter's (the GPU
    Operator's, with its own monitor), Governor's exporter is not deployed."""
    exporter = {} if spec.targets.gpu.dcgm else {
        EXPORTER: dump_documents([k.exporter_daemonset(spec), k.exporter_podmonitor(spec)],
                                 source)}
    files = {
        **exporter,
        INFERENCE: dump_documents([k.inference_deployment(spec), k.inference_service(spec),
                                   k.inference_servicemonitor(spec)], source),
        CONTROLLER: dump_documents([k.controller_state_claim(spec), k.controller_deployment(spec),
                                    k.controller_service(spec), k.controller_servicemonitor(spec),
                                    k.alertmanager_config(spec, params)], source),
        PROBE: dump_documents([k.probe_deployment(spec), k.probe_podmonitor(spec)], source),
    }
    if any(slo.controller for slo in spec.slos):
        files.update(_autoscalers(spec, source))
    return files


def _autoscalers(spec: SloSpec, source: str) -> dict[str, str]:
    scaling = spec.kubernetes.autoscaling
    note = AUTOSCALER_NOTE if scaling.keda and scaling.hpa else SOLE_AUTOSCALER_NOTE
    files = {}
    if scaling.keda:
        files[SCALED_OBJECT] = dump_yaml(autoscaling.keda_scaled_object(spec), source, note)
    if scaling.hpa:
        files[HPA] = dump_yaml(autoscaling.horizontal_pod_autoscaler(spec), source, note)
    return files
