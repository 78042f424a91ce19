"""The Kubernetes manifests: valid against the pinned schemas, wired to each other and to the
spec, runnable by the commands they start, and never holding a secret."""

from __future__ import annotations

import copy
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from governor.controller.cli import build_config
from governor.controller.cli import build_parser as controller_parser
from governor.exporters.cli import build_parser as exporter_parser
from governor.generation.catalog import parse_checked_spec
from governor.generation.params import RenderParams
from governor.inference.cli import build_parser as serve_parser
from governor.inference.engines.vllm.args import parse_extra_args
from governor.manifests import kubernetes as k
from governor.manifests.render import render_all
from governor.slo.fleet import GOVERNOR_UID
from governor.slo.fleet_fields import quantity
from governor.slo.spec import SpecError, load_spec, parse_spec
from governor.vllm import MIDDLEWARE
from governor.vllm.admin import TOKEN_FILE_ENV
from tests.deploy.kube_schemas import errors, kinds

ROOT = Path(__file__).resolve().parents[2]
STOCK_SPEC = ROOT / "examples" / "stock-vllm" / "slo.yaml"
MANIFESTS = [*sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml")),
             *sorted((STOCK_SPEC.parent / "deploy" / "kubernetes").glob("*.yaml"))]
CUSTOM = {"inter_token_latency": [0.01, 0.05, 0.1, 0.12, 0.15, 0.2, 0.5, 1]}


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def committed() -> list[dict[str, Any]]:
    return [d for path in MANIFESTS for d in documents(path.read_text(encoding="utf-8"))]


def fleet_data() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "slo.yaml").read_text(encoding="utf-8"))
    data["targets"] = {"inference": {"job": "vllm-fleet", "selector": {"namespace": "llm"}},
                       "gpu": {"job": "dcgm"}, "controller": {"job": "slo-controller"}}
    data["kubernetes"] = {"namespace": "llm", "labels": {"release": "monitoring"},
                          "model": "/models/llama", "replicas": 3, "gpus_per_replica": 2,
                          "image": "registry.example/governor:1.0",
                          "vllm_image": "registry.example/governor-vllm:1.0"}
    return data


def fleet_spec() -> Any:
    return parse_spec(fleet_data())


def rendered(spec: Any) -> dict[str, dict[str, Any]]:
    """``Kind/name`` → object, from the generator."""
    files = render_all(spec, RenderParams(), source="slo.yaml")
    return {f"{d['kind']}/{d['metadata']['name']}": d
            for text in files.values() for d in documents(text)}


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_committed_manifest_validates_against_its_pinned_schema(path: Path) -> None:
    for document in documents(path.read_text(encoding="utf-8")):
        assert errors(document) == [], f"{path.name}: {document['kind']}"


def test_the_validator_rejects_what_the_api_server_would() -> None:
    deployment = next(d for d in committed() if d["kind"] == "Deployment")
    typo = copy.deepcopy(deployment)
    typo["spec"]["template"]["spec"]["hostPid"] = True  # hostPID
    assert any("hostPid" in e for e in errors(typo))
    wrong = copy.deepcopy(deployment)
    wrong["spec"]["replicas"] = "3"
    assert any("replicas" in e for e in errors(wrong))
    monitor = next(d for d in committed() if d["kind"] == "ServiceMonitor")
    bad = copy.deepcopy(monitor)
    bad["spec"]["endpoints"][0]["relabelings"][0]["action"] = "rewrite"
    assert any("action" in e for e in errors(bad))
    assert errors({"apiVersion": "v9", "kind": "Nope"}) == ["no pinned schema for v9/Nope"]


def test_every_kind_generated_has_a_pinned_schema() -> None:
    assert {f"{d['apiVersion']}/{d['kind']}" for d in committed()} <= kinds()


def test_no_secret_is_inlined_only_referenced() -> None:
    objects = committed()
    assert not [d for d in objects if d["kind"] == "Secret"]
    text = "\n".join(p.read_text(encoding="utf-8") for p in MANIFESTS)
    assert "credentials_file" not in text  # compose's token paths do not leak in
    assert "a-token" not in text
    # No token as a YAML key (series names such as cost's …_per_output_token:rate5m may hold
    # the word).
    assert not re.search(r"^\s*(?:- )?[A-Za-z_-]*token:", text.replace("hf-token", ""),
                         re.MULTILINE)
    secret_names = set(re.findall(r"(?:secretName|name): (governor-[a-z-]*token[a-z-]*)", text))
    # Rule groups are named for their SLOs (governor-verdict-time-to-first-token): not secrets.
    groups = {g["name"] for d in objects if d["kind"] == "PrometheusRule"
              for g in d["spec"]["groups"]}
    assert secret_names - groups <= {k.SECRET, k.HF_SECRET}
    amc = next(d for d in objects if d["kind"] == "AlertmanagerConfig")
    credentials = amc["spec"]["receivers"][0]["webhookConfigs"][0]["httpConfig"]["authorization"]
    assert credentials["credentials"] == {"name": k.SECRET, "key": k.WEBHOOK_TOKEN_KEY}


def test_the_exporter_runs_on_gpu_nodes_with_host_pids_and_privileges() -> None:
    daemonset = rendered(load_spec(ROOT / "slo.yaml"))[f"DaemonSet/{k.EXPORTER_NAME}"]
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["hostPID"] is True
    assert pod["containers"][0]["securityContext"]["privileged"] is True
    assert pod["nodeSelector"] == {k.GPU_NODE_LABEL: "true"}
    assert {"key": k.GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"} in \
        pod["tolerations"]
    # NVML without taking a GPU away from the scheduler.
    assert "resources" not in pod or k.GPU_RESOURCE not in str(pod["containers"][0]["resources"])


def test_with_dcgm_exporter_as_the_gpu_source_governors_exporter_is_not_deployed() -> None:
    data = fleet_data()
    data["targets"]["gpu"] = {"job": "nvidia-dcgm-exporter", "source": "dcgm"}
    objects = rendered(parse_spec(data))
    assert f"DaemonSet/{k.EXPORTER_NAME}" not in objects
    assert f"PodMonitor/{k.EXPORTER_NAME}" not in objects
    assert f"Deployment/{k.INFERENCE_NAME}" in objects and \
        f"Deployment/{k.CONTROLLER_NAME}" in objects


def test_services_select_their_pods_and_monitors_their_services() -> None:
    objects = rendered(load_spec(ROOT / "slo.yaml"))
    for name in (k.INFERENCE_NAME, k.CONTROLLER_NAME):
        service, deployment = objects[f"Service/{name}"], objects[f"Deployment/{name}"]
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= pod_labels.items()
        assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
        monitor = objects[f"ServiceMonitor/{name}"]
        assert monitor["spec"]["selector"]["matchLabels"].items() <= \
            service["metadata"]["labels"].items()
        ports = {p["name"] for p in deployment["spec"]["template"]["spec"]["containers"][0][
            "ports"]}
        assert service["spec"]["ports"][0]["targetPort"] in ports
        assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    claim = objects[f"PersistentVolumeClaim/{k.CONTROLLER_NAME}-state"]
    volumes = objects[f"Deployment/{k.CONTROLLER_NAME}"]["spec"]["template"]["spec"]["volumes"]
    assert {"name": "state", "persistentVolumeClaim": {
        "claimName": claim["metadata"]["name"]}} in volumes


def test_a_fleet_spec_reaches_every_manifest() -> None:
    spec = fleet_spec()
    objects = rendered(spec)
    assert {d["metadata"]["namespace"] for d in objects.values()} == {"llm"}
    operator_kinds = {"ServiceMonitor", "PodMonitor", "AlertmanagerConfig"}
    for key, document in objects.items():
        labels = document["metadata"]["labels"]
        assert (labels.get("release") == "monitoring") == (document["kind"] in operator_kinds), key
        assert errors(document) == [], key
    jobs = {key: d["spec"].get("endpoints", d["spec"].get("podMetricsEndpoints"))[0][
        "relabelings"][0]["replacement"] for key, d in objects.items()
        if d["kind"] in {"ServiceMonitor", "PodMonitor"}}
    assert jobs == {f"ServiceMonitor/{k.INFERENCE_NAME}": "vllm-fleet",
                    f"PodMonitor/{k.EXPORTER_NAME}": "dcgm",
                    f"ServiceMonitor/{k.CONTROLLER_NAME}": "slo-controller",
                    f"PodMonitor/{k.PROBE_NAME}": "probe"}
    inference = objects[f"Deployment/{k.INFERENCE_NAME}"]
    assert inference["spec"]["replicas"] == 3
    container = inference["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example/governor-vllm:1.0"
    assert container["resources"]["limits"][k.GPU_RESOURCE] == 2
    amc = objects[f"AlertmanagerConfig/{k.CONTROLLER_NAME}"]
    assert amc["spec"]["receivers"][0]["webhookConfigs"][0]["url"] == \
        "http://governor-controller.llm.svc:9500/alerts"


def test_each_container_command_is_one_its_program_accepts(tmp_path: Path) -> None:
    """The args are parsed by the real parsers, so a renamed option fails here, not in a pod."""
    objects = rendered(fleet_spec())
    args = {name: objects[f"{kind}/{name}"]["spec"]["template"]["spec"]["containers"][0]["args"]
            for kind, name in (("DaemonSet", k.EXPORTER_NAME), ("Deployment", k.INFERENCE_NAME),
                               ("Deployment", k.CONTROLLER_NAME))}
    exporter = args[k.EXPORTER_NAME]
    assert exporter[0] == "exporter"
    exporter_parser().parse_args(exporter[1:])
    serve = args[k.INFERENCE_NAME]
    assert serve[0] == "serve"
    parsed = serve_parser(env={}).parse_args(serve[1:])
    assert parsed.engine == "vllm" and parsed.model == "/models/llama"
    controller = args[k.CONTROLLER_NAME]
    assert controller[0] == "controller"
    # The pod's mounted files, here: the spec, the two tokens, the state directory.
    (tmp_path / "slo.yaml").write_text(yaml.safe_dump(fleet_data()), encoding="utf-8")
    for key in (k.ADMIN_TOKEN_KEY, k.WEBHOOK_TOKEN_KEY):
        (tmp_path / key).write_text("a-token", encoding="utf-8")
    local = {f"{k.SPEC_DIR}/slo.yaml": tmp_path / "slo.yaml",
             **{f"{k.TOKENS_DIR}/{key}": tmp_path / key
                for key in (k.ADMIN_TOKEN_KEY, k.WEBHOOK_TOKEN_KEY)}}
    options = [str(local.get(a, a)).replace(k.STATE_DIR, str(tmp_path)) for a in controller[1:]]
    config = build_config(controller_parser().parse_args(options))
    assert config.queries.target.job == "vllm-fleet"
    assert config.queries.target.selector == {"namespace": "llm"}
    assert config.host == "0.0.0.0"  # reachable from Alertmanager's pod: said, not defaulted
    assert config.discover is not None
    assert config.discover.fullmatch("10.42.0.17:8000")
    assert config.discover.fullmatch("[fd00::5]:8000")
    assert not config.discover.fullmatch("evil.example:8000")
    assert not config.discover.fullmatch("10.42.0.17:8000/x")


def test_the_example_autoscalers_scale_the_inference_deployment_on_the_summed_advice() -> None:
    spec = fleet_spec()
    objects = rendered(spec)
    keda = objects[f"ScaledObject/{k.INFERENCE_NAME}-scale-out"]
    hpa = objects[f"HorizontalPodAutoscaler/{k.INFERENCE_NAME}-scale-out"]
    deployment = objects[f"Deployment/{k.INFERENCE_NAME}"]
    for scaler in (keda, hpa):
        assert errors(scaler) == []
        assert scaler["spec"]["scaleTargetRef"] == {
            "apiVersion": "apps/v1", "kind": "Deployment", "name": deployment["metadata"]["name"]}
        assert scaler["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    trigger = keda["spec"]["triggers"][0]["metadata"]
    assert trigger["serverAddress"] == spec.kubernetes.prometheus
    assert trigger["query"] == 'sum(governor_controller_desired_replicas{job="slo-controller"})'
    assert keda["spec"]["minReplicaCount"] == 3  # never below the spec's replicas
    metric = hpa["spec"]["metrics"][0]["external"]["metric"]
    assert metric["selector"] == {"matchLabels": {"job": "slo-controller"}}
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 600


def stock_data(**extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(STOCK_SPEC.read_text(encoding="utf-8"))
    return {**data, **extra}


def inference_container(spec: Any) -> dict[str, Any]:
    deployment = rendered(spec)[f"Deployment/{k.INFERENCE_NAME}"]
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def test_a_stock_vllm_fleet_runs_vllm_serve_with_the_admin_middleware_and_its_buckets() -> None:
    spec = parse_checked_spec(stock_data(vllm={"custom_histogram_buckets": CUSTOM}))
    container = inference_container(spec)
    assert "args" not in container  # whatever the team's vLLM image's entrypoint is
    assert container["command"] == [
        "vllm", "serve", spec.kubernetes.model, "--host", "0.0.0.0", "--port", "8000",
        "--middleware", MIDDLEWARE, "--custom-histogram-buckets", spec.vllm.flag_value()]
    assert {"name": TOKEN_FILE_ENV, "value": f"{k.TOKENS_DIR}/{k.ADMIN_TOKEN_KEY}"} in \
        container["env"]
    # vLLM's defaults: no flag at all, so any vLLM (>= 0.25) runs the command.
    plain = inference_container(parse_checked_spec(stock_data()))
    assert "--custom-histogram-buckets" not in plain["command"]


def test_governor_serve_hands_the_custom_buckets_to_its_vllm_engine() -> None:
    data = fleet_data()
    data["vllm"] = {"custom_histogram_buckets": CUSTOM}
    spec = parse_checked_spec(data)
    args = inference_container(spec)["args"]
    parsed = serve_parser(env={}).parse_args(args[1:])
    assert parsed.engine_arg == [f"custom_histogram_buckets={spec.vllm.flag_value()}"]
    # What the vLLM engine makes of it: AsyncEngineArgs' field, a mapping of edges.
    kwargs = parse_extra_args(parsed.engine_arg, {"custom_histogram_buckets": None})
    assert kwargs == {"custom_histogram_buckets": {
        family: [float(e) for e in edges] for family, edges in CUSTOM.items()}}


@pytest.mark.vllm
def test_vllms_own_parser_takes_the_stock_command_with_its_buckets() -> None:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    spec = parse_checked_spec(stock_data(vllm={"custom_histogram_buckets": CUSTOM}))
    _, _, model, *options = inference_container(spec)["command"]
    parser = make_arg_parser(FlexibleArgumentParser())  # type: ignore[no-untyped-call]
    args = parser.parse_args(["--model", model, *options])
    assert args.middleware == [MIDDLEWARE]
    engine = AsyncEngineArgs.from_cli_args(args)
    assert engine.custom_histogram_buckets == {
        family: [float(e) for e in edges] for family, edges in CUSTOM.items()}


# ---- resources and security contexts (docs/reliability.md, N14) ------------------------------

def workloads(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in objects if d["kind"] in {"Deployment", "DaemonSet", "StatefulSet"}]


@pytest.mark.parametrize("tree", ["deploy", "examples/stock-vllm/deploy"])
def test_every_workload_asks_for_cpu_and_memory_and_has_a_memory_limit(tree: str) -> None:
    found = [d for path in sorted((ROOT / tree / "kubernetes").glob("*.yaml"))
             for d in workloads(documents(path.read_text(encoding="utf-8")))]
    assert {d["metadata"]["name"] for d in found} >= {k.INFERENCE_NAME, k.CONTROLLER_NAME}
    for workload in found:
        for container in workload["spec"]["template"]["spec"]["containers"]:
            resources = container["resources"]
            assert set(resources["requests"]) == {"cpu", "memory"}, workload["metadata"]["name"]
            assert "memory" in resources["limits"], workload["metadata"]["name"]
            assert "cpu" not in resources["limits"]  # a throttled server stalls its streams


def objects_of(where: str) -> list[dict[str, Any]]:
    """A committed tree's objects, or those a spec's generator writes now."""
    if where.endswith(".yaml"):
        return list(rendered(load_spec(ROOT / where)).values())
    return [d for path in sorted((ROOT / where / "kubernetes").glob("*.yaml"))
            for d in documents(path.read_text(encoding="utf-8"))]


@pytest.mark.parametrize("where", ["deploy", "examples/stock-vllm/deploy", "slo.yaml",
                                   "examples/stock-vllm/slo.yaml"])
def test_every_container_runs_as_a_numbered_user_not_root_but_the_exporter(where: str) -> None:
    """The kubelet checks ``runAsNonRoot`` against a number, so each names its user by
    number; the exporter alone runs as root, privileged (GPM profiling needs it)."""
    found = workloads(objects_of(where))
    names = {d["metadata"]["name"] for d in found}
    assert names >= {k.INFERENCE_NAME, k.CONTROLLER_NAME, k.PROBE_NAME}, where
    for workload in found:
        pod = workload["spec"]["template"]["spec"]
        for container in pod["containers"]:
            context = container["securityContext"]
            if workload["metadata"]["name"] == k.EXPORTER_NAME:  # docs/deploy.md says why
                assert context == {"privileged": True, "runAsUser": 0}
                continue
            assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
            assert context == {"runAsNonRoot": True, "runAsUser": GOVERNOR_UID,
                               "runAsGroup": GOVERNOR_UID, "readOnlyRootFilesystem": True,
                               "allowPrivilegeEscalation": False,
                               "capabilities": {"drop": ["ALL"]}}, (where, container["name"])
            # The admin and probe tokens (mode 0400): the kubelet adds the fsGroup's read.
            assert pod["securityContext"]["fsGroup"] == GOVERNOR_UID


def container_env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def writable(pod: dict[str, Any], container: dict[str, Any], path: str) -> bool:
    """Whether ``path`` lies on an emptyDir the container mounts read-write: with a read-only
    root filesystem, the only places it can write."""
    empty = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
    return any(Path(path).is_relative_to(m["mountPath"]) for m in container["volumeMounts"]
               if m["name"] in empty and not m.get("readOnly"))


@pytest.mark.parametrize("spec_path", [ROOT / "slo.yaml", STOCK_SPEC], ids=["governor", "stock"])
def test_the_inference_server_keeps_its_caches_on_its_own_volumes(spec_path: Path) -> None:
    """vLLM's image keeps its caches under /root; as user 10001 on a read-only image, every
    folder vLLM, Hugging Face and torch write to is a volume of the pod's."""
    deployment = rendered(load_spec(spec_path))[f"Deployment/{k.INFERENCE_NAME}"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = container_env(container)
    for name in ("HOME", "XDG_CACHE_HOME", "HF_HOME", "VLLM_CACHE_ROOT"):
        assert writable(pod, container, env[name]), name
    assert writable(pod, container, "/tmp/torchinductor_governor")
    assert writable(pod, container, "/dev/shm/nccl-0")
    assert env["USER"]  # getpass.getuser() for a user id /etc/passwd lacks
    assert not writable(pod, container, "/root/.cache")  # the image's own, read-only now


@pytest.mark.vllm
@pytest.mark.parametrize("spec_path", [ROOT / "slo.yaml", STOCK_SPEC], ids=["governor", "stock"])
def test_every_folder_vllm_and_torch_resolve_in_the_container_is_writable(
        spec_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The folders vLLM and torch compute from the container's environment, by their own code
    (the variables they read are theirs to rename: this fails if they do)."""
    import getpass
    import tempfile

    import vllm.envs
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    deployment = rendered(load_spec(spec_path))[f"Deployment/{k.INFERENCE_NAME}"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    for name in ("XDG_CONFIG_HOME", "VLLM_CONFIG_ROOT", "VLLM_ASSETS_CACHE", "VLLM_RPC_BASE_PATH",
                 "VLLM_XLA_CACHE_PATH", "TORCHINDUCTOR_CACHE_DIR", "LOGNAME", "TMPDIR", "TEMP",
                 "TMP"):
        monkeypatch.delenv(name, raising=False)
    for variable in container["env"]:
        if "value" in variable:
            monkeypatch.setenv(variable["name"], variable["value"])
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() looks again: /tmp here
    assert getpass.getuser() == container_env(container)["USER"]
    folders = {name: getattr(vllm.envs, name) for name in (
        "VLLM_CACHE_ROOT", "VLLM_CONFIG_ROOT", "VLLM_ASSETS_CACHE", "VLLM_RPC_BASE_PATH",
        "VLLM_XLA_CACHE_PATH")}
    folders["torch inductor"] = default_cache_dir()
    folders["~"] = str(Path("~").expanduser())  # Triton's, FlashInfer's, CUDA's caches
    for name, folder in folders.items():
        assert writable(pod, container, folder), (name, folder)


def test_the_specs_security_goes_over_the_defaults_container_by_container() -> None:
    data = stock_data()
    data["kubernetes"]["security"] = {
        "inference": {"run_as_user": 1000, "run_as_group": 0, "read_only_root_filesystem": False},
        "probe": {"run_as_user": 4242}}
    objects = rendered(parse_checked_spec(data))

    def context(name: str) -> dict[str, Any]:
        found: dict[str, Any] = objects[f"Deployment/{name}"]["spec"]["template"]["spec"][
            "containers"][0]["securityContext"]
        return found

    assert context(k.INFERENCE_NAME) == {
        "runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 0,
        "readOnlyRootFilesystem": False, "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]}}
    probe = context(k.PROBE_NAME)
    assert (probe["runAsUser"], probe["runAsGroup"], probe["readOnlyRootFilesystem"]) == (
        4242, GOVERNOR_UID, True)
    controller = context(k.CONTROLLER_NAME)
    assert (controller["runAsUser"], controller["runAsGroup"]) == (GOVERNOR_UID, GOVERNOR_UID)
    for key, document in objects.items():
        assert errors(document) == [], key


SECURITY_TEXT = """kubernetes:
  security:
    exporter: {run_as_user: 0}
    inference:
      run_as_user: 0
      run_as_group: -1
      read_only_root_filesystem: "yes"
    controller: {run_as_user: true, user: 5}
    probe: root
    gateway: {}
"""


def test_bad_security_values_are_located_spec_errors_every_one_at_once(tmp_path: Path) -> None:
    text = (ROOT / "slo.yaml").read_text(encoding="utf-8")
    assert "\nkubernetes:" not in text  # the section is this test's alone
    path = tmp_path / "slo.yaml"
    path.write_text(text + SECURITY_TEXT, encoding="utf-8")
    first = len(text.splitlines()) + 1  # the line of "kubernetes:"
    with pytest.raises(SpecError) as raised:
        load_spec(path)
    found = "\n".join(raised.value.errors)
    for line, expected in [
            (3, "kubernetes.security.exporter: the exporter runs privileged, as root"),
            (5, "kubernetes.security.inference.run_as_user: must be a user id other than "
                "root's, a whole number from 1 to 2147483647: got 0"),
            (6, "kubernetes.security.inference.run_as_group: must be a group id, a whole "
                "number from 0 to 2147483647: got -1"),
            (7, "kubernetes.security.inference.read_only_root_filesystem: must be true or "
                "false: got 'yes'"),
            (8, "kubernetes.security.controller.run_as_user: must be a user id other than "
                "root's"),
            (8, "kubernetes.security.controller.user: unknown key 'user'"),
            (9, "kubernetes.security.probe: must be a mapping with keys run_as_user, "
                "run_as_group, read_only_root_filesystem: got a string"),
            (10, "kubernetes.security.gateway: unknown key 'gateway' (expected: inference, "
                 "controller, probe)")]:
        assert f"slo.yaml:{first + line - 1}: {expected}" in found, (expected, found)


def test_the_specs_resources_go_over_the_defaults_resource_by_resource() -> None:
    data = fleet_data()  # two GPUs a replica
    data["kubernetes"]["resources"] = {
        "inference": {"requests": {"memory": "64Gi"}, "limits": {"memory": "96Gi", "cpu": 16}},
        "controller": {"limits": {"memory": "1Gi"}}}
    objects = rendered(parse_spec(data))
    inference = objects[f"Deployment/{k.INFERENCE_NAME}"]["spec"]["template"]["spec"][
        "containers"][0]["resources"]
    assert inference == {"requests": {"cpu": "8", "memory": "64Gi"},
                         "limits": {"cpu": "16", "memory": "96Gi", k.GPU_RESOURCE: 2}}
    controller = objects[f"Deployment/{k.CONTROLLER_NAME}"]["spec"]["template"]["spec"][
        "containers"][0]["resources"]
    assert controller == {"requests": {"cpu": "50m", "memory": "128Mi"},
                          "limits": {"memory": "1Gi"}}
    for key, document in objects.items():
        assert errors(document) == [], key


def test_bad_resources_are_spec_errors_every_one_at_once() -> None:
    data = fleet_data()
    data["kubernetes"]["resources"] = {
        "inference": {"requests": {"memory": "8Gi"}},
        "controller": {"requests": {"cpu": "a lot", "gpu": 1}},
        "exporter": {"limits": {"memory": -1}},
        "prometheus": {}}
    data["kubernetes"]["gpus_per_replica"] = 1
    with pytest.raises(SpecError) as raised:
        parse_spec(data)
    text = "\n".join(raised.value.errors)
    for expected in ("kubernetes.resources.prometheus: unknown key",
                     "kubernetes.resources.controller.requests.gpu: unknown key",
                     "kubernetes.resources.controller.requests.cpu: must be a positive "
                     "Kubernetes quantity (500m, 4, 16Gi): got 'a lot'",
                     "kubernetes.resources.exporter.limits.memory: must be a positive "
                     "Kubernetes quantity"):
        assert expected in text, expected
    data["kubernetes"]["resources"] = {"inference": {"requests": {"memory": "64Gi"}}}
    with pytest.raises(SpecError, match=r"kubernetes\.resources\.inference: the memory request "
                                        r"64Gi passes its limit 32Gi: raise limits\.memory too"):
        parse_spec(data)


@pytest.mark.parametrize(("text", "value"), [("500m", "0.5"), ("4", "4"), ("1.5Gi", "1610612736"),
                                             ("2k", "2000"), (".5", "0.5")])
def test_quantities_read_as_kubernetes_reads_them(text: str, value: str) -> None:
    assert quantity(text) == Decimal(value)


def test_a_mig_profile_asks_each_replica_for_mig_devices_instead_of_gpus() -> None:
    data = fleet_data()
    data["kubernetes"]["mig_profile"] = "3g.40gb"
    objects = rendered(parse_spec(data))
    deployment = objects[f"Deployment/{k.INFERENCE_NAME}"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    limits = container["resources"]["limits"]
    assert limits["nvidia.com/mig-3g.40gb"] == 2  # gpus_per_replica MIG devices
    assert k.GPU_RESOURCE not in limits
    for document in objects.values():
        assert errors(document) == [], document["kind"]
    whole = rendered(fleet_spec())[f"Deployment/{k.INFERENCE_NAME}"]
    assert whole["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][
        k.GPU_RESOURCE] == 2


@pytest.mark.parametrize("profile", ["3g.40gb; rm -rf /", "8g.80gb", "1g.0gb", "1g.10GB", "",
                                     "1g.10gb\n", 3, ["1g.10gb"], "1g." + "9" * 5000 + "gb"])
def test_a_bad_mig_profile_is_a_spec_error(profile: object) -> None:
    data = fleet_data()
    data["kubernetes"]["mig_profile"] = profile
    with pytest.raises(SpecError) as caught:
        parse_spec(data)
    message = str(caught.value)
    assert "kubernetes.mig_profile" in message
    assert "MIG profile" in message or "longer than 1024 characters" in message
    assert len(message) < 2000


def mounted_token(objects: dict[str, dict[str, Any]], name: str, option: str) -> str | None:
    """The token file ``option`` names in the Deployment ``name``, checked to come from the
    Secret's key of that name, mounted; None when the option is not given."""
    pod = objects[f"Deployment/{name}"]["spec"]["template"]["spec"]
    command = pod["containers"][0].get("args") or pod["containers"][0]["command"]
    if option not in command:
        return None
    path = command[command.index(option) + 1]
    key = Path(path).name
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    secrets = {v["name"]: v["secret"] for v in pod["volumes"] if "secret" in v}
    (volume,) = [n for n, s in secrets.items() if s["secretName"] == k.SECRET]
    assert str(Path(mounts[volume]) / key) == path
    assert {"key": key, "path": key} in secrets[volume]["items"]
    return key


def test_the_probe_and_every_replica_read_the_same_probe_token_from_the_secret() -> None:
    objects = rendered(fleet_spec())
    assert mounted_token(objects, k.INFERENCE_NAME, "--probe-token-file") == k.PROBE_TOKEN_KEY
    assert mounted_token(objects, k.PROBE_NAME, "--probe-token-file") == k.PROBE_TOKEN_KEY


def test_before_stock_vllm_the_probe_carries_no_token_it_would_only_hand_out() -> None:
    objects = rendered(parse_checked_spec(stock_data()))
    assert mounted_token(objects, k.PROBE_NAME, "--probe-token-file") is None
    pods = [objects[f"Deployment/{name}"]["spec"]["template"]["spec"]
            for name in (k.PROBE_NAME, k.INFERENCE_NAME)]
    keys = {item["key"] for pod in pods for volume in pod["volumes"] if "secret" in volume
            for item in volume["secret"].get("items", [])}
    assert k.PROBE_TOKEN_KEY not in keys
