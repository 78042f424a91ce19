"""The stack as Kubernetes objects: the GPU exporter, the inference service, the controller, and
how prometheus-operator finds them.

Every object is plain data (dicts), built from the spec's ``kubernetes`` section (namespace,
images, model, the labels the cluster's operator selects on) and ``targets`` (the job names the
rules, boards and controller expect, which the monitors' relabelling writes). Nothing secret is
inlined: the tokens come from a Secret the operator creates (``kubectl create secret``), and
the SLO spec from a ConfigMap made from ``slo.yaml``; both are referenced by name.

* exporter: a DaemonSet on GPU nodes, with host PIDs (it names the container of each GPU process)
  and privileges (GPM profiling needs them), scraped through a PodMonitor;
* inference: a Deployment of vLLM's image plus Governor (non-root, its caches in a writable
  home and ``/tmp`` of its own, the image read-only), its Service, a ServiceMonitor;
* controller: a Deployment (one replica, state on a PersistentVolumeClaim), its Service (the
  Alertmanager webhook), a ServiceMonitor, and an AlertmanagerConfig that routes the control
  alerts to it with the webhook token from the Secret;
* probe: a Deployment of the synthetic probe (one replica), sending to the inference Service,
  scraped through a PodMonitor.

Every container but the exporter runs as the spec's user and group (``kubernetes.security``,
10001 by default), never root, without capabilities or a way to gain privileges; every monitor
bounds what one scrape may bring (:data:`governor.generation.scrape.SAMPLE_LIMITS`, the limits
``prometheus.yml`` sets).
"""

from __future__ import annotations

import json
from typing import Any, Final

from governor.common.commands import Controller, Exporter, Probe, Serve, VllmServe
from governor.contracts.endpoints import (
    COMPLETIONS_PATH,
    EXPORTER,
    HEALTH_PATH,
    JOB_PROBE,
    LISTEN_HOST,
    METRICS_PATH,
    PROBE,
    WEBHOOK_PATH,
)
from governor.contracts.metrics import slo as n
from governor.contracts.metrics.scrape import LABEL_INSTANCE
from governor.contracts.metrics.verdict import LABEL_NODE
from governor.contracts.promql import format_duration
from governor.generation.params import RenderParams
from governor.generation.scrape import SAMPLE_LIMITS
from governor.slo.fleet import GOVERNOR_UID, Kubernetes, Security, Target
from governor.slo.probe import DEFAULT_TARGET
from governor.slo.spec import SloSpec
from governor.vllm import MIDDLEWARE
from governor.vllm.admin import TOKEN_FILE_ENV

Object = dict[str, Any]

PART_OF: Final = "governor"
SECRET: Final = "governor-tokens"  # keys: admin_token, controller_token, probe_token
SPEC_CONFIGMAP: Final = "governor-slo"  # key: slo.yaml
HF_SECRET: Final = "governor-hf-token"  # key: token; optional (gated models)
ADMIN_TOKEN_KEY: Final = "admin_token"
WEBHOOK_TOKEN_KEY: Final = "controller_token"
PROBE_TOKEN_KEY: Final = "probe_token"
SPEC_DIR: Final = "/etc/governor"
TOKENS_DIR: Final = "/run/secrets/governor"
STATE_DIR: Final = "/var/lib/governor"
# The inference server's home, a writable emptyDir whatever the image (Dockerfile.vllm's user's
# home; stock vLLM's image keeps its caches under /root, which its user cannot write): vLLM's
# caches (compiled graphs, Triton and FlashInfer kernels, its config) go under it, and the
# weights to HF_HOME, a volume of their own.
HOME: Final = "/home/governor"
CACHE_HOME: Final = f"{HOME}/.cache"
HF_HOME: Final = f"{CACHE_HOME}/huggingface"  # Dockerfile.vllm's too
VLLM_CACHE_ROOT: Final = f"{CACHE_HOME}/vllm"
TMP_DIR: Final = "/tmp"  # noqa: S108  # an emptyDir: torch's inductor cache, vLLM's IPC paths
# USER: what getpass.getuser() answers when the image's /etc/passwd has no entry for the user id
# (stock vLLM's has none for 10001): torch before 2.13 asks it at import, to name its inductor
# cache, and fails without (pytorch/pytorch#140765).
USER_NAME: Final = "governor"
# AsyncEngineArgs' field behind vllm serve --custom-histogram-buckets (vLLM >= 0.32).
BUCKETS_ENGINE_ARG: Final = "custom_histogram_buckets"
SCRAPE_INTERVAL: Final = "15s"
# vLLM downloads weights, compiles and captures CUDA graphs before /health answers: up to 15 min.
INFERENCE_START_SECONDS: Final = 900
PROBE_PERIOD_SECONDS: Final = 10
# The labels NVIDIA's GPU feature discovery puts on GPU nodes, and the taint GPU pools carry.
GPU_NODE_LABEL: Final = "nvidia.com/gpu.present"
GPU_RESOURCE: Final = "nvidia.com/gpu"
# A MIG device of one profile, as the NVIDIA device plugin advertises it under the "mixed" MIG
# strategy: nvidia.com/mig-1g.10gb.
MIG_RESOURCE: Final = "nvidia.com/mig-{profile}"

EXPORTER_NAME: Final = "governor-exporter"
INFERENCE_NAME: Final = "governor-inference"
CONTROLLER_NAME: Final = "governor-controller"
PROBE_NAME: Final = "governor-probe"


def _labels(component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": component, "app.kubernetes.io/part-of": PART_OF}


def labels_of(target: Target) -> dict[str, str]:
    """A target's job and selector as label equalities (an HPA's metric selector)."""
    return {"job": target.job, **target.selector}


def metadata(name: str, k8s: Kubernetes, *, operator: bool = False) -> Object:
    """``operator``: an object prometheus-operator selects, so it carries the spec's labels."""
    labels = _labels(name) | (dict(k8s.labels) if operator else {})
    return {"name": name, "namespace": k8s.namespace, "labels": labels}


def _probe(path: str, port: str, *, failures: int = 3) -> Object:
    return {"httpGet": {"path": path, "port": port}, "periodSeconds": PROBE_PERIOD_SECONDS,
            "timeoutSeconds": 3, "failureThreshold": failures}


# The request the stock server's startup probe sends: small, and long enough to run a decode.
WARMUP_PROMPT: Final = "Warm up."
WARMUP_MAX_TOKENS: Final = 8
WARMUP_TIMEOUT_SECONDS: Final = 60


def request_probe(model: str, port: int) -> Object:
    """A startup probe that sends one small completion, for stock ``vllm serve``: its
    ``/health`` answers 200 once the engine is up, before any request has run, so the pod would
    take traffic cold. Until the completion answers, the pod is not started (no readiness, no
    Service endpoint); Python is in vLLM's images, curl not always."""
    body = json.dumps({"model": model, "prompt": WARMUP_PROMPT,
                       "max_tokens": WARMUP_MAX_TOKENS})
    url = f"http://127.0.0.1:{port}{COMPLETIONS_PATH}"
    script = ("import urllib.request as u; u.urlopen(u.Request("
              f"{url!r}, {body.encode()!r}, {{'Content-Type': 'application/json'}}), "
              f"timeout={WARMUP_TIMEOUT_SECONDS}).read()")
    return {"exec": {"command": ["python3", "-c", script]},
            "periodSeconds": PROBE_PERIOD_SECONDS, "timeoutSeconds": WARMUP_TIMEOUT_SECONDS,
            "failureThreshold": INFERENCE_START_SECONDS // PROBE_PERIOD_SECONDS}


def _job_relabeling(target: Target) -> list[Object]:
    """Relabel ``job`` to the name the rules, boards and controller select, and write the pod's
    node into ``node``: the verdict ties a GPU to the servers on its node by it."""
    return [{"action": "replace", "targetLabel": "job", "replacement": target.job},
            {"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_node_name"],
             "targetLabel": LABEL_NODE}]


def gpu_resource(k8s: Kubernetes) -> str:
    """What an inference pod asks the device plugin for: whole GPUs, or MIG devices."""
    if k8s.mig_profile is None:
        return GPU_RESOURCE
    return MIG_RESOURCE.format(profile=k8s.mig_profile)


def _resources(k8s: Kubernetes, container: str, gpus: int = 0) -> Object:
    """The container's requests and limits (the spec's over the defaults), and its GPUs (or
    MIG devices: a profile in the spec)."""
    given = k8s.resources_of(container)
    limits: dict[str, str | int] = {**given.limits,
                                    **({gpu_resource(k8s): gpus} if gpus else {})}
    return {"requests": dict(given.requests), **({"limits": limits} if limits else {})}


def _unprivileged(security: Security) -> Object:
    """A container's securityContext: the spec's user and group, by number so the kubelet can
    check it is not root (an image names its user, which the kubelet cannot check), its root
    filesystem read-only unless the spec says otherwise; no privilege to gain, no capability."""
    return {"runAsNonRoot": True, "runAsUser": security.run_as_user,
            "runAsGroup": security.run_as_group,
            "readOnlyRootFilesystem": security.read_only_root_filesystem,
            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _pod_security() -> Object:
    """The pod's: the runtime's default seccomp profile, and mounted Secrets (mode 0400, to
    which the kubelet adds this group's read) readable whatever user the spec runs them as."""
    return {"fsGroup": GOVERNOR_UID, "seccompProfile": {"type": "RuntimeDefault"}}


def _governor_container(name: str, image: str, args: list[str], port: int) -> Object:
    return {
        "name": name, "image": image, "args": args,
        "ports": [{"name": "http", "containerPort": port}],
        "readinessProbe": _probe(HEALTH_PATH, "http"),
        "livenessProbe": _probe(HEALTH_PATH, "http"),
    }


def exporter_daemonset(spec: SloSpec) -> Object:
    k8s = spec.kubernetes
    container = _governor_container(
        "exporter", k8s.image,
        Exporter(host=LISTEN_HOST, port=EXPORTER.port, log_format="json").argv(), EXPORTER.port)
    container.update({
        # NVML without taking a GPU from the scheduler: the NVIDIA runtime mounts the driver.
        "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"}],
        # GPM profiling samples answer NO_PERMISSION without privileges.
        "securityContext": {"privileged": True, "runAsUser": 0},
        "resources": _resources(k8s, "exporter"),
    })
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": metadata(EXPORTER_NAME, k8s),
        "spec": {
            "selector": {"matchLabels": _labels(EXPORTER_NAME)},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": _labels(EXPORTER_NAME)},
                "spec": {
                    "hostPID": True,  # names the container of each GPU process
                    "nodeSelector": {GPU_NODE_LABEL: "true"},
                    "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists",
                                     "effect": "NoSchedule"}],
                    "containers": [container],
                },
            },
        },
    }


def _pod_monitor(name: str, spec: SloSpec, target: Target, role: str) -> Object:
    """Scrapes the pods of ``name`` as ``target``'s job, at most its role's samples a scrape."""
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
        "metadata": metadata(name, spec.kubernetes, operator=True),
        "spec": {
            "selector": {"matchLabels": _labels(name)},
            "sampleLimit": SAMPLE_LIMITS[role],
            "podMetricsEndpoints": [{"port": "http", "path": METRICS_PATH,
                                     "interval": SCRAPE_INTERVAL,
                                     "relabelings": _job_relabeling(target)}],
        },
    }


def exporter_podmonitor(spec: SloSpec) -> Object:
    return _pod_monitor(EXPORTER_NAME, spec, spec.targets.gpu, "gpu")


def _spec_volume() -> Object:
    return {"name": "slo", "configMap": {"name": SPEC_CONFIGMAP}}


def _tokens_volume(*keys: str) -> Object:
    return {"name": "tokens", "secret": {"secretName": SECRET, "defaultMode": 0o400,
                                         "items": [{"key": k, "path": k} for k in keys]}}


def _mounts() -> list[Object]:
    return [{"name": "slo", "mountPath": SPEC_DIR, "readOnly": True},
            {"name": "tokens", "mountPath": TOKENS_DIR, "readOnly": True}]


def _home_env() -> list[Object]:
    """Where vLLM, Hugging Face, torch and Triton write: under the writable home (they read
    ``HOME`` and XDG's cache folder; vLLM's and Hugging Face's own variables are set too, so
    an image that sets them otherwise is overruled), under whatever user id the spec gives."""
    return [{"name": name, "value": value} for name, value in (
        ("HOME", HOME), ("XDG_CACHE_HOME", CACHE_HOME), ("HF_HOME", HF_HOME),
        ("VLLM_CACHE_ROOT", VLLM_CACHE_ROOT), ("USER", USER_NAME))]


def _inference_container(spec: SloSpec) -> Object:
    """``governor serve --engine vllm``, or stock ``vllm serve`` with Governor's admin
    middleware (``kubernetes.server: vllm``): the same port, health path and token file, the
    same writable home. Either way vLLM exposes the edges the spec declares
    (``vllm.custom_histogram_buckets``)."""
    k8s, buckets = spec.kubernetes, spec.vllm.flag_value()
    hf_token = {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
        "name": HF_SECRET, "key": "token", "optional": True}}}
    if spec.stock_vllm:
        command = VllmServe(model=k8s.model, host=LISTEN_HOST, port=k8s.inference_port,
                            middleware=(MIDDLEWARE,), custom_histogram_buckets=buckets).argv()
        container = _governor_container("inference", k8s.vllm_image, [], k8s.inference_port)
        del container["args"]
        container["command"] = command  # whatever the image's entrypoint is
        container["env"] = [hf_token, {"name": TOKEN_FILE_ENV,
                                       "value": f"{TOKENS_DIR}/{ADMIN_TOKEN_KEY}"},
                            *_home_env()]
        return container
    args = Serve(engine="vllm", model=k8s.model, host=LISTEN_HOST, port=k8s.inference_port,
                 slo=f"{SPEC_DIR}/slo.yaml", admin_token_file=f"{TOKENS_DIR}/{ADMIN_TOKEN_KEY}",
                 probe_token_file=f"{TOKENS_DIR}/{PROBE_TOKEN_KEY}", log_format="json",
                 engine_arg=(f"{BUCKETS_ENGINE_ARG}={buckets}",)
                 if buckets else ()).argv()
    container = _governor_container("inference", k8s.vllm_image, args, k8s.inference_port)
    container["env"] = [hf_token, {"name": "OTEL_SERVICE_NAME", "value": INFERENCE_NAME},
                        *_home_env()]
    return container


def _inference_tokens(spec: SloSpec) -> Object:
    """The admin token, and the probe token governor serve checks (stock vLLM counts every
    request whatever it carries, so it is not given the secret)."""
    return _tokens_volume(ADMIN_TOKEN_KEY) if spec.stock_vllm \
        else _tokens_volume(ADMIN_TOKEN_KEY, PROBE_TOKEN_KEY)


def inference_deployment(spec: SloSpec) -> Object:
    k8s = spec.kubernetes
    container = _inference_container(spec)
    container.update({
        # Weights, compilation, CUDA graphs: failed probes in this time do not count. governor
        # serve's /health waits for its warm-up; stock vLLM's does not, so a request does.
        "startupProbe": request_probe(k8s.model, k8s.inference_port) if spec.stock_vllm
        else _probe(HEALTH_PATH, "http", failures=INFERENCE_START_SECONDS // PROBE_PERIOD_SECONDS),
        "resources": _resources(k8s, "inference", gpus=k8s.gpus_per_replica),
        "securityContext": _unprivileged(k8s.security_of("inference")),
        "volumeMounts": [*_mounts(), {"name": "shm", "mountPath": "/dev/shm"},  # noqa: S108
                         {"name": "home", "mountPath": HOME},
                         {"name": "hf-cache", "mountPath": HF_HOME},
                         {"name": "tmp", "mountPath": TMP_DIR}],
    })
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": metadata(INFERENCE_NAME, k8s),
        "spec": {
            "replicas": k8s.replicas,
            "selector": {"matchLabels": _labels(INFERENCE_NAME)},
            "template": {
                "metadata": {"labels": _labels(INFERENCE_NAME)},
                "spec": {
                    # An engine that cannot start exits (status 3); the kubelet restarts it
                    # with back-off, as for vLLM's own server.
                    "restartPolicy": "Always",
                    "terminationGracePeriodSeconds": 30,
                    "securityContext": _pod_security(),
                    "containers": [container],
                    "volumes": [
                        _spec_volume(), _inference_tokens(spec),
                        # vLLM's workers share tensors through /dev/shm.
                        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}},
                        # Writable whatever the user: the caches, the weights, temporary files.
                        {"name": "home", "emptyDir": {}},
                        {"name": "hf-cache", "emptyDir": {}},
                        {"name": "tmp", "emptyDir": {}},
                    ],
                },
            },
        },
    }


def _service(name: str, k8s: Kubernetes, port: int) -> Object:
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": metadata(name, k8s),
        "spec": {"selector": _labels(name),
                 "ports": [{"name": "http", "port": port, "targetPort": "http"}]},
    }


def _service_monitor(name: str, spec: SloSpec, target: Target, role: str) -> Object:
    """Scrapes the Service ``name`` as ``target``'s job, at most its role's samples a scrape."""
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
        "metadata": metadata(name, spec.kubernetes, operator=True),
        "spec": {
            "selector": {"matchLabels": _labels(name)},
            "sampleLimit": SAMPLE_LIMITS[role],
            "endpoints": [{"port": "http", "path": METRICS_PATH, "interval": SCRAPE_INTERVAL,
                           "relabelings": _job_relabeling(target)}],
        },
    }


def inference_service(spec: SloSpec) -> Object:
    return _service(INFERENCE_NAME, spec.kubernetes, spec.kubernetes.inference_port)


def inference_servicemonitor(spec: SloSpec) -> Object:
    return _service_monitor(INFERENCE_NAME, spec, spec.targets.inference, "inference")


def controller_state_claim(spec: SloSpec) -> Object:
    return {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": metadata(f"{CONTROLLER_NAME}-state", spec.kubernetes),
        "spec": {"accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}},
    }


def discovery_pattern(port: int) -> str:
    """The instances the controller may send the admin token to: pod addresses on the
    service's port, as Prometheus labels them (``10.1.2.3:8000``, ``[fd00::1]:8000``)."""
    return rf"(\d{{1,3}}(\.\d{{1,3}}){{3}}|\[[0-9a-f:]+\]):{port}"


def controller_deployment(spec: SloSpec) -> Object:
    k8s, inference = spec.kubernetes, spec.targets.inference
    args = Controller(
        slo=f"{SPEC_DIR}/slo.yaml", host=LISTEN_HOST, prometheus=k8s.prometheus,
        # Replicas come and go with their pods: the controller manages the instances
        # Prometheus scrapes in the inference job, whose address is a pod's on the port.
        job=inference.job, discover=discovery_pattern(k8s.inference_port),
        admin_token_file=f"{TOKENS_DIR}/{ADMIN_TOKEN_KEY}",
        webhook_token_file=f"{TOKENS_DIR}/{WEBHOOK_TOKEN_KEY}",
        state_file=f"{STATE_DIR}/state.json", audit_log=f"{STATE_DIR}/audit.jsonl",
        log_format="json").argv()
    container = _governor_container("controller", k8s.image, args, k8s.controller_port)
    container.update({
        "volumeMounts": [*_mounts(), {"name": "state", "mountPath": STATE_DIR}],
        "securityContext": _unprivileged(k8s.security_of("controller")),
        "resources": _resources(k8s, "controller"),
    })
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": metadata(CONTROLLER_NAME, k8s),
        "spec": {
            # One decision-maker per fleet; Recreate so two never hold the state at once.
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": _labels(CONTROLLER_NAME)},
            "template": {
                "metadata": {"labels": _labels(CONTROLLER_NAME)},
                "spec": {
                    "securityContext": _pod_security(),
                    "containers": [container],
                    "volumes": [
                        _spec_volume(), _tokens_volume(ADMIN_TOKEN_KEY, WEBHOOK_TOKEN_KEY),
                        {"name": "state", "persistentVolumeClaim": {
                            "claimName": f"{CONTROLLER_NAME}-state"}},
                    ],
                },
            },
        },
    }


def controller_service(spec: SloSpec) -> Object:
    return _service(CONTROLLER_NAME, spec.kubernetes, spec.kubernetes.controller_port)


def controller_servicemonitor(spec: SloSpec) -> Object:
    return _service_monitor(CONTROLLER_NAME, spec, spec.targets.controller, "controller")


def alertmanager_config(spec: SloSpec, params: RenderParams) -> Object:
    """Routes the control alerts to the controller's webhook, with the token from the Secret.

    prometheus-operator confines an AlertmanagerConfig to alerts whose ``namespace`` label is its
    own; the PrometheusRule gives Governor's alerts that label for this reason.
    """
    k8s = spec.kubernetes
    url = f"http://{CONTROLLER_NAME}.{k8s.namespace}.svc:{k8s.controller_port}{WEBHOOK_PATH}"
    return {
        "apiVersion": "monitoring.coreos.com/v1alpha1", "kind": "AlertmanagerConfig",
        "metadata": metadata(CONTROLLER_NAME, k8s, operator=True),
        "spec": {
            "route": {
                "receiver": "controller",
                "matchers": [{"name": n.LABEL_SEVERITY, "value": spec.alerting.control,
                              "matchType": "="}],
                # One notification per breaching instance: the controller acts per target.
                "groupBy": ["alertname", n.LABEL_SLO, LABEL_INSTANCE],
                "groupWait": format_duration(params.control_group_wait_seconds),
                "groupInterval": format_duration(params.control_group_interval_seconds),
                "repeatInterval": format_duration(params.control_repeat_interval_seconds),
            },
            "receivers": [{
                "name": "controller",
                "webhookConfigs": [{
                    "url": url, "sendResolved": True,
                    "httpConfig": {"authorization": {
                        "type": "Bearer",
                        "credentials": {"name": SECRET, "key": WEBHOOK_TOKEN_KEY}}},
                }],
            }],
        },
    }


def inference_url(k8s: Kubernetes) -> str:
    """The inference Service, as a pod of the namespace reaches it."""
    return f"http://{INFERENCE_NAME}.{k8s.namespace}.svc:{k8s.inference_port}"


def probe_deployment(spec: SloSpec) -> Object:
    """The synthetic probe: the spec's ``inference`` target (its default) sent to the inference
    Service, so its requests spread over the replicas as clients' do; any other target where the
    spec says. It marks its requests with the probe token from the Secret, which governor serve
    checks. A target's ``api_key_file`` must be mounted into this pod by the operator."""
    k8s = spec.kubernetes
    moved = (f"{DEFAULT_TARGET}={inference_url(k8s)}",) \
        if DEFAULT_TARGET in {t.name for t in spec.probe.targets} else ()
    # Stock vLLM honours no mark: the probe then needs no token (its requests count anyway).
    marks = not spec.stock_vllm
    args = Probe(slo=f"{SPEC_DIR}/slo.yaml", target=moved,
                 probe_token_file=f"{TOKENS_DIR}/{PROBE_TOKEN_KEY}" if marks else None,
                 host=LISTEN_HOST, port=PROBE.port, log_format="json").argv()
    container = _governor_container("probe", k8s.image, args, PROBE.port)
    container.update({
        "volumeMounts": _mounts() if marks else _mounts()[:1],
        "securityContext": _unprivileged(k8s.security_of("probe")),
        "resources": _resources(k8s, "probe"),
    })
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": metadata(PROBE_NAME, k8s),
        "spec": {
            # One probe: two would double the rate the spec bounds.
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": _labels(PROBE_NAME)},
            "template": {
                "metadata": {"labels": _labels(PROBE_NAME)},
                "spec": {"securityContext": _pod_security(), "containers": [container],
                         "volumes": [_spec_volume(), *([_tokens_volume(PROBE_TOKEN_KEY)]
                                                       if marks else [])]},
            },
        },
    }


def probe_podmonitor(spec: SloSpec) -> Object:
    return _pod_monitor(PROBE_NAME, spec, Target(JOB_PROBE), "probe")
