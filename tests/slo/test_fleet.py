"""The fleet sections of slo.yaml: targets, alerting, kubernetes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from governor.contracts.promql import Selector, parse_selector
from governor.slo.fleet import Alerting, GpuTarget, Kubernetes, Target, Targets
from governor.slo.spec import SpecError, load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[2]


def base() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "slo.yaml").read_text(encoding="utf-8"))
    return loaded


def problems(**sections: object) -> list[str]:
    with pytest.raises(SpecError) as raised:
        parse_spec({**base(), **sections})
    return list(raised.value.errors)


def test_without_the_sections_the_spec_describes_governors_own_stack() -> None:
    spec = load_spec(ROOT / "slo.yaml")
    assert spec.targets == Targets()
    assert spec.targets.jobs() == ("inference", "gpu", "controller")
    assert spec.alerting == Alerting()
    assert spec.kubernetes == Kubernetes()


def test_a_fleet_spec_is_read_whole() -> None:
    spec = parse_spec({**base(),
                       "targets": {"inference": {"job": "kubernetes-pods/vllm",
                                                 "selector": {"namespace": "llm",
                                                              "cluster": "eu-1"}},
                                   "gpu": {"job": "dcgm"}},
                       "alerting": {"page": "critical", "ticket": "warning",
                                    "runbooks": "https://wiki.example/governor/runbooks"},
                       "kubernetes": {"namespace": "llm", "labels": {"release": "prom"},
                                      "replicas": 4}})
    assert spec.targets.inference == Target("kubernetes-pods/vllm",
                                            {"cluster": "eu-1", "namespace": "llm"})
    assert spec.targets.controller == Target("controller")  # unset: the default
    rendered = Selector("up", spec.targets.inference.matchers()).render()
    assert rendered == 'up{job="kubernetes-pods/vllm", cluster="eu-1", namespace="llm"}'
    assert spec.alerting.severity("page") == "critical"
    assert spec.alerting.severity("control") == "control"
    assert spec.alerting.runbook("GpuLost") == \
        "https://wiki.example/governor/runbooks#gpulost"
    assert spec.kubernetes.labels == {"release": "prom"}
    assert spec.kubernetes.replicas == 4 and spec.kubernetes.namespace == "llm"


def test_every_problem_is_reported_at_once() -> None:
    found = problems(
        targets={"inference": {"job": "a b", "selector": {"job": "x", "instance": "y"}},
                 "gpu": "dcgm", "web": {}},
        alerting={"page": "p", "ticket": "p", "runbooks": "has space"},
        kubernetes={"namespace": "LLM", "labels": {"re lease": "x", "ok": "-bad"},
                    "prometheus": "ftp://x", "replicas": True, "gpus_per_replica": 9,
                    "image": "", "model": "a model"})
    text = "\n".join(found)
    for expected in ("targets.web: unknown key", "targets.inference.job: 'a b' is not a job",
                     "selector.job: label 'job' cannot be selected here",
                     "selector.instance: label 'instance' cannot be selected here",
                     "targets.gpu: must be a mapping",
                     "alerting.runbooks: 'has space' is not a URL",
                     "kubernetes.namespace: 'LLM' is not a namespace",
                     "'re lease' is not a Kubernetes label key",
                     "kubernetes.labels.ok: '-bad' is not a Kubernetes label value",
                     "kubernetes.prometheus: 'ftp://x' is not an http(s) URL",
                     "kubernetes.replicas: must be an integer from 1 to 64",
                     "kubernetes.gpus_per_replica: must be an integer from 1 to 8",
                     "kubernetes.image: '' is not a container image reference",
                     "kubernetes.model: 'a model' is not a model name"):
        assert expected in text, expected
    assert "slo.yaml" not in text or "<memory>" in text


def test_components_need_different_jobs_and_severities_different_names() -> None:
    assert any("need different jobs" in p for p in problems(targets={"gpu": {"job": "inference"}}))
    assert any("need different severities" in p
               for p in problems(alerting={"ticket": "page"}))


@pytest.mark.parametrize("value", ['llm"}', "a\nb", "x" * 300, 'x",job="evil'])
def test_a_selector_value_cannot_break_out_of_its_quotes(value: str) -> None:
    try:
        spec = parse_spec({**base(), "targets": {"inference": {"selector": {"ns": value}}}})
    except SpecError as exc:
        assert "ns" in str(exc)
        return
    rendered = Selector("up", spec.targets.inference.matchers()).render()
    # Read back, it is still one job matcher and one ns matcher holding the value verbatim.
    assert parse_selector(rendered).matchers == spec.targets.inference.matchers()
    assert [(m.label, m.value) for m in parse_selector(rendered).matchers] == [
        ("job", "inference"), ("ns", value)]


@pytest.mark.parametrize("job", ['inference"', "", "j" * 129, "a{b}", 7, None])
def test_hostile_job_names_are_refused(job: object) -> None:
    assert any("targets.inference.job" in p
               for p in problems(targets={"inference": {"job": job}}))


def test_a_per_model_slo_selects_its_model_on_vllms_histogram() -> None:
    from governor.alerts.render import render_all
    from governor.contracts.metrics.latency import HISTOGRAM_BUCKETS

    data = base()
    data["slos"].append({"name": "itl-llama", "objective": 99, "sli": {"latency": {
        "metric": "vllm:inter_token_latency_seconds", "threshold": "100ms",
        "selector": {"model_name": "meta-llama/Meta-Llama-3-8B-Instruct"}}}})
    spec = parse_spec(data, histograms=HISTOGRAM_BUCKETS)
    rules = render_all(spec)["prometheus/rules/slo-itl-llama.yml"]
    assert ('vllm:inter_token_latency_seconds_count{job="inference", '
            'model_name="meta-llama/Meta-Llama-3-8B-Instruct"}') in rules


def test_the_gpus_come_from_governors_exporter_unless_the_spec_names_dcgm_exporter() -> None:
    assert load_spec(ROOT / "slo.yaml").targets.gpu == GpuTarget("gpu", source="governor")
    spec = parse_spec({**base(), "targets": {"gpu": {"job": "nvidia-dcgm-exporter",
                                                     "selector": {"namespace": "gpu-operator"},
                                                     "source": "dcgm"}}})
    assert spec.targets.gpu == GpuTarget("nvidia-dcgm-exporter", {"namespace": "gpu-operator"},
                                         source="dcgm")
    assert spec.targets.gpu.dcgm
    # The source changes what is read, not where: the matchers are the job's and selector's.
    assert [m.render() for m in spec.targets.gpu.matchers()] == [
        'job="nvidia-dcgm-exporter"', 'namespace="gpu-operator"']


@pytest.mark.parametrize(("targets", "expected"), [
    ({"gpu": {"source": "dcmg"}},
     "targets.gpu.source: 'dcmg' is not a GPU source (did you mean 'dcgm'?): governor "
     "(Governor's exporter) or dcgm (NVIDIA's dcgm-exporter)"),
    ({"gpu": {"source": 3}}, "targets.gpu.source: 3 is not a GPU source"),
    ({"gpu": {"source": None}}, "targets.gpu.source: None is not a GPU source"),
    ({"inference": {"source": "dcgm"}},
     "targets.inference.source: unknown key 'source' (expected: job, selector)"),
], ids=["a misspelt source", "a number", "nothing", "a source on another target"])
def test_a_gpu_source_that_is_not_one_is_refused_with_its_place(
        targets: dict[str, Any], expected: str) -> None:
    assert any(expected in problem for problem in problems(targets=targets)), problems(
        targets=targets)


def test_a_bad_source_is_reported_with_the_gpu_targets_other_problems() -> None:
    found = "\n".join(problems(targets={"gpu": {"job": "a b", "source": "nvml"}}))
    assert "targets.gpu.job: 'a b' is not a job" in found
    assert "targets.gpu.source: 'nvml' is not a GPU source" in found


def test_the_prefix_cache_alert_is_relative_to_its_baseline_unless_a_floor_is_set() -> None:
    from governor.slo.fleet import PrefixCacheAlert

    assert Alerting().prefix_cache == PrefixCacheAlert(0.5, 6 * 3600, None, 50.0, 900)
    spec = parse_spec({**base(), "alerting": {"prefix_cache": {
        "below_baseline": 0.7, "baseline": "1d", "min_queried_tokens_per_second": 0,
        "for": "30m"}}})
    assert spec.alerting.prefix_cache == PrefixCacheAlert(0.7, 86400, None, 0.0, 1800)
    assert spec.alerting.prefix_cache.relative
    floor = parse_spec({**base(), "alerting": {"prefix_cache": {"below": 0.25}}})
    assert floor.alerting.prefix_cache.below == 0.25
    assert not floor.alerting.prefix_cache.relative
    assert floor.alerting.prefix_cache.below_baseline is None


def test_prefix_cache_problems_are_reported_with_their_lines(tmp_path: Path) -> None:
    data = {**base(), "alerting": {"ticket": "warning", "prefix_cache": {
        "below_baseline": 1.5, "baseline": "10m", "min_queried_tokens_per_second": -1,
        "for": "2d", "floor": 0.1}}}
    path = tmp_path / "slo.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(SpecError) as raised:
        load_spec(path)
    text = "\n".join(raised.value.errors)
    lines = path.read_text().splitlines()
    for key, expected in (("below_baseline", "a share of the baseline"),
                          ("baseline", "between 1h and 7d"),
                          ("min_queried_tokens_per_second", "prompt tokens per second"),
                          ("for", "between 1m and 1d"), ("floor", "unknown key")):
        line = next(n for n, text_ in enumerate(lines, 1) if text_.strip().startswith(f"{key}:"))
        assert f"slo.yaml:{line}: alerting.prefix_cache.{key}: " in text, (key, text)
        assert expected in text, expected
    both = problems(alerting={"prefix_cache": {"below": 0.2, "below_baseline": 0.5}})
    assert any("are alternatives: set one" in p for p in both)


def test_gpu_health_reads_a_count_durations_and_a_size() -> None:
    from governor.slo.fleet import GpuHealth

    assert Alerting().gpu_health == GpuHealth(1, 900, 512 * 2**20, 1800)
    spec = parse_spec({**base(), "alerting": {"gpu_health": {
        "max_processes": 2, "processes_for": "5m", "idle_growth": "1Gi", "idle_window": "1h"}}})
    assert spec.alerting.gpu_health == GpuHealth(2, 300, 2**30, 3600)
    plain = parse_spec({**base(), "alerting": {"gpu_health": {"idle_growth": 2**21}}})
    assert plain.alerting.gpu_health.idle_growth_bytes == 2**21


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("max_processes", 0, "an integer from 1 to 64"),
    ("max_processes", 1.5, "an integer from 1 to 64"),
    ("max_processes", 10**400, "an integer from 1 to 64"),
    ("processes_for", "10s", "between 1m and 1d"),
    ("idle_window", "2d", "between 1m and 1d"),
    ("idle_window", "soon", "idle_window"),
    ("idle_growth", "1Ki", "whole bytes from 1Mi to 1Pi"),
    ("idle_growth", "9" * 5000, "positive Kubernetes quantity"),
    ("idle_growth", -1, "positive Kubernetes quantity"),
    ("idle_growth", "1.5m", "whole bytes"),
    ("leak", 1, "unknown key"),
], ids=lambda x: str(x)[:20])
def test_gpu_health_problems_name_their_field(key: str, value: object, expected: str) -> None:
    found = problems(alerting={"gpu_health": {key: value}})
    assert any(f"alerting.gpu_health.{key}" in p and expected in p for p in found), found


def test_the_gpu_hour_price_is_optional_and_positive() -> None:
    from governor.slo.fleet import Cost

    unpriced = {key: value for key, value in base().items() if key != "cost"}
    assert parse_spec(unpriced).cost == Cost(None)
    assert parse_spec({**base(), "cost": {"gpu_hour_price": 2.49}}).cost == Cost(2.49)
    assert parse_spec({**base(), "cost": {"gpu_hour_price": 3}}).cost.gpu_hour_price == 3.0
    assert parse_spec({**base(), "cost": {"gpu_hour_price": None}}).cost == Cost(None)


@pytest.mark.parametrize("price", [0, -1, True, "2.49", 1e309, 10**400],
                         ids=["zero", "negative", "a boolean", "a string", "infinite",
                              "a 400-digit number"])
def test_a_bad_gpu_hour_price_is_named(price: object) -> None:
    found = problems(cost={"gpu_hour_price": price})
    assert any("cost.gpu_hour_price" in p and "price of one GPU hour" in p for p in found), found


def test_the_cost_section_takes_only_its_key() -> None:
    assert any("unknown key" in p for p in problems(cost={"gpu_hour": 2}))
    assert any("cost" in p for p in problems(cost=[2.49]))
