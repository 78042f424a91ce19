"""``kubernetes.autoscaling``: the bounds and triggers of the example autoscalers, checked where
the spec enters, written schema-valid, and queries that answer what KEDA is meant to read."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from governor.generation.params import RenderParams
from governor.manifests.autoscaling import SCALE_TO_ZERO_COOLDOWN_SECONDS
from governor.manifests.render import HPA, SCALED_OBJECT, render_all
from governor.slo.spec import SpecError, parse_spec
from tests.deploy.kube_schemas import errors
from tests.deploy.test_kubernetes import documents, fleet_data

GATEWAY = 'envoy_cluster_upstream_rq_total{envoy_cluster_name="llm"}'


def spec_with(autoscaling: object, **kubernetes: object) -> Any:
    data = fleet_data()
    data["kubernetes"].update(kubernetes)
    data["kubernetes"]["autoscaling"] = autoscaling
    return parse_spec(data)


def scalers(spec: Any) -> dict[str, dict[str, Any]]:
    """``ScaledObject`` / ``HorizontalPodAutoscaler`` → the object, for those written."""
    files = render_all(spec, RenderParams(), source="slo.yaml")
    return {d["kind"]: d for path in (SCALED_OBJECT, HPA) if path in files
            for d in documents(files[path])}


def spec_errors(autoscaling: object, **kubernetes: object) -> str:
    with pytest.raises(SpecError) as raised:
        spec_with(autoscaling, **kubernetes)
    return "\n".join(raised.value.errors)


@pytest.mark.parametrize(("autoscaling", "expected"), [
    ({"min_replicas": 5, "max_replicas": 4},
     "kubernetes.autoscaling.max_replicas: 4 is below min_replicas (5)"),
    ({"max_replicas": 2}, "kubernetes.autoscaling.max_replicas: 2 is below kubernetes.replicas "
                          "(3)"),
    ({"min_replicas": -1}, "kubernetes.autoscaling.min_replicas: must be a whole number from 0 "
                           "to 64: got -1"),
    ({"max_replicas": 0}, "kubernetes.autoscaling.max_replicas: must be a whole number from 1 "
                          "to 64: got 0"),
    ({"max_replicas": 1000}, "must be a whole number from 1 to 64: got 1000"),
    ({"min_replicas": 2.5}, "must be a whole number from 0 to 64: got 2.5"),
    ({"min_replicas": True}, "must be a whole number from 0 to 64: got a boolean"),
    ({"min_replicas": 0, "demand": GATEWAY},
     "kubernetes.autoscaling.min_replicas: 0 needs autoscaler: keda: an HPA never scales to "
     "zero (autoscaler is both)"),
    ({"min_replicas": 0, "autoscaler": "hpa", "demand": GATEWAY},
     "0 needs autoscaler: keda: an HPA never scales to zero (autoscaler is hpa)"),
    ({"min_replicas": 0, "autoscaler": "keda"},
     "kubernetes.autoscaling.demand: min_replicas 0 needs a demand"),
    ({"demand": GATEWAY}, "kubernetes.autoscaling.demand: only wakes a fleet scaled to zero"),
    ({"triggers": {"gpu_util": 0.8}},
     "kubernetes.autoscaling.triggers.gpu_util: unknown key 'gpu_util' (did you mean "
     "'gpu_utilization'?)"),
    ({"triggers": {"cpu": 0.8}}, "triggers.cpu: unknown key 'cpu' (expected: queue_length, "
                                 "gpu_utilization)"),
    ({"triggers": {"queue_length": 0}}, "triggers.queue_length: must be a whole number from 1 "
                                        "to 100000: got 0"),
    ({"triggers": {"queue_length": "5"}}, "must be a whole number from 1 to 100000: got a "
                                          "string"),
    ({"triggers": {"gpu_utilization": 80}},
     "triggers.gpu_utilization: must be a utilisation ratio in (0, 1] or a percentage such as "
     "80%: got 80"),
    ({"triggers": {"gpu_utilization": "120%"}}, "percentage such as 80%: got '120%'"),
    ({"triggers": {"gpu_utilization": "lots%"}}, "percentage such as 80%: got 'lots%'"),
    ({"triggers": {"gpu_utilization": float("nan")}}, "percentage such as 80%: got nan"),
    ({"triggers": ["queue_length"]}, "kubernetes.autoscaling.triggers: must be a mapping"),
    ({"autoscaler": "knative"}, "kubernetes.autoscaling.autoscaler: must be one of keda, hpa, "
                                "both: got 'knative'"),
    ({"min_replicas": 0, "autoscaler": "keda", "demand": "rate(x[5m])"},
     "kubernetes.autoscaling.demand:"),
    ({"min_replicas": 0, "autoscaler": "keda", "demand": 'x{a="' + "b" * 2000 + '"}'},
     "kubernetes.autoscaling.demand: longer than 1024 characters"),
    ({"min_replicas": 0, "autoscaler": "keda", "demand": 'x{a="1"} or vector(1)'},
     "kubernetes.autoscaling.demand:"),
    ("many", "kubernetes.autoscaling: must be a mapping"),
], ids=lambda v: str(v)[:60] if not isinstance(v, dict) else None)
def test_a_bad_autoscaling_field_is_a_spec_error_that_names_it(autoscaling: object,
                                                               expected: str) -> None:
    assert expected in spec_errors(autoscaling, replicas=3)


def test_every_problem_of_the_section_is_reported_at_once() -> None:
    text = spec_errors({"min_replicas": -2, "max_replicas": 0, "triggers": {"gpu": 1},
                        "autoscaler": "kubernetes"})
    for field in ("min_replicas", "max_replicas", "triggers.gpu", "autoscaler"):
        assert f"kubernetes.autoscaling.{field}:" in text, field


def test_without_the_section_the_bounds_are_the_replicas_and_eight() -> None:
    written = scalers(parse_spec(fleet_data()))
    assert written["ScaledObject"]["spec"]["minReplicaCount"] == 3
    assert written["ScaledObject"]["spec"]["maxReplicaCount"] == 8
    assert written["HorizontalPodAutoscaler"]["spec"]["maxReplicas"] == 8
    many = fleet_data()
    many["kubernetes"]["replicas"] = 12
    assert scalers(parse_spec(many))["HorizontalPodAutoscaler"]["spec"]["minReplicas"] == 12
    assert scalers(parse_spec(many))["HorizontalPodAutoscaler"]["spec"]["maxReplicas"] == 12


@pytest.mark.parametrize("gpu", [{"job": "gpu"}, {"job": "dcgm", "source": "dcgm"}],
                         ids=["governor exporter", "dcgm-exporter"])
def test_the_spec_bounds_and_triggers_reach_both_autoscalers_schema_valid(gpu: Any) -> None:
    data = fleet_data()
    data["targets"]["gpu"] = gpu
    data["kubernetes"]["autoscaling"] = {"min_replicas": 2, "max_replicas": 16, "triggers": {
        "queue_length": 5, "gpu_utilization": "80%"}}
    written = scalers(parse_spec(data))
    keda, hpa = written["ScaledObject"], written["HorizontalPodAutoscaler"]
    assert errors(keda) == [] and errors(hpa) == []
    assert (keda["spec"]["minReplicaCount"], keda["spec"]["maxReplicaCount"]) == (2, 16)
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 16)
    triggers = [t["metadata"] for t in keda["spec"]["triggers"]]
    assert [(t["threshold"], t["metricType"]) for t in triggers] == [
        ("1", "AverageValue"), ("5", "AverageValue"), ("0.8", "Value")]
    assert triggers[1]["query"] == 'sum(vllm:num_requests_waiting{job="vllm-fleet", ' \
                                   'namespace="llm"})'
    assert not any("activationThreshold" in t for t in triggers)  # KEDA ignores it above 0
    targets = [m["external"]["target"] for m in hpa["spec"]["metrics"]]
    percent = gpu.get("source") == "dcgm"  # dcgm-exporter's default field is in percent
    assert targets == [{"type": "AverageValue", "averageValue": "1"},
                       {"type": "AverageValue", "averageValue": "5"},
                       {"type": "Value", "value": "80" if percent else "0.8"}]


def test_a_fleet_may_scale_to_zero_with_keda_woken_by_its_demand() -> None:
    spec = spec_with({"autoscaler": "keda", "min_replicas": 0, "max_replicas": 4,
                      "demand": GATEWAY, "triggers": {"queue_length": 5,
                                                      "gpu_utilization": 0.9}})
    written = scalers(spec)
    assert set(written) == {"ScaledObject"}  # no HPA: it cannot scale to zero
    keda = written["ScaledObject"]
    assert errors(keda) == []
    assert keda["spec"]["minReplicaCount"] == 0
    assert keda["spec"]["cooldownPeriod"] == SCALE_TO_ZERO_COOLDOWN_SECONDS
    triggers = [t["metadata"] for t in keda["spec"]["triggers"]]
    assert [t["activationThreshold"] for t in triggers] == ["1", "0", "0.9", "0"]
    assert triggers[-1]["query"] == f"sum(rate({GATEWAY}[2m]))"


def test_an_hpa_alone_is_written_without_its_twin() -> None:
    written = scalers(spec_with({"autoscaler": "hpa"}))
    assert set(written) == {"HorizontalPodAutoscaler"}


def test_the_validator_rejects_a_broken_scaled_object() -> None:
    keda = scalers(spec_with({"autoscaler": "keda"}))["ScaledObject"]
    keda["spec"]["minReplicaCount"] = "zero"
    assert any("minReplicaCount" in e for e in errors(keda))


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not installed (Debian: apt-get install prometheus)")
    return path


def test_the_keda_queries_read_the_fleets_queue_gpus_and_demand(promtool: str,
                                                                 tmp_path: Path) -> None:
    """Each trigger's query, run by Prometheus's own evaluator on series shaped like the
    fleet's: the queue summed over replicas (KEDA divides by them), the GPUs' mean ratio (dcgm's
    percent converted), and the demand's rate, which is 0 once requests stop."""
    data = fleet_data()
    data["targets"]["gpu"] = {"job": "dcgm", "source": "dcgm"}
    data["kubernetes"]["autoscaling"] = {
        "autoscaler": "keda", "min_replicas": 0, "demand": GATEWAY,
        "triggers": {"queue_length": 5, "gpu_utilization": 0.8}}
    triggers = scalers(parse_spec(data))["ScaledObject"]["spec"]["triggers"]
    controller, queue, gpus, demand = (t["metadata"]["query"] for t in triggers)
    series = [
        {"series": 'governor_controller_desired_replicas{job="slo-controller", target="a"}',
         "values": "1+0x20"},
        {"series": 'governor_controller_desired_replicas{job="slo-controller", target="b"}',
         "values": "1.5+0x20"},
        {"series": 'vllm:num_requests_waiting{job="vllm-fleet", namespace="llm", pod="a"}',
         "values": "4+0x20"},
        {"series": 'vllm:num_requests_waiting{job="vllm-fleet", namespace="llm", pod="b"}',
         "values": "9+0x20"},
        {"series": 'vllm:num_requests_waiting{job="other", pod="c"}', "values": "100+0x20"},
        {"series": 'DCGM_FI_DEV_GPU_UTIL{job="dcgm", gpu="0"}', "values": "60+0x20"},
        {"series": 'DCGM_FI_DEV_GPU_UTIL{job="dcgm", gpu="1"}', "values": "100+0x20"},
        # 60 requests a minute for 5 minutes, then none.
        {"series": GATEWAY, "values": "0+60x5 300+0x15"},
    ]

    def check(expr: str, at: str, value: float) -> dict[str, Any]:
        return {"expr": expr, "eval_time": at, "exp_samples": [{"labels": "{}",
                                                                "value": value}]}

    (tmp_path / "test.yml").write_text(yaml.safe_dump({
        "rule_files": [], "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": [
            check(controller, "3m", 2.5), check(queue, "3m", 13), check(gpus, "3m", 0.8),
            check(demand, "4m", 1), check(demand, "12m", 0)]}]}))
    result = subprocess.run([promtool, "test", "rules", str(tmp_path / "test.yml")],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
