"""The generated artifacts: committed copies up to date, golden files, what each file says."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from governor.alerts.prometheus_config import prometheus_args, retention_seconds
from governor.alerts.render import (
    ALERTMANAGER_CONFIG,
    PROMETHEUS_CONFIG,
    PROMETHEUS_RULE,
    PROMETHEUS_TARGETS,
    differences,
    render_all,
    write_all,
)
from governor.contracts import causes
from governor.contracts.metrics import gpu, vllm
from governor.contracts.metrics import service as svc
from governor.contracts.metrics import slo as n
from governor.generation.catalog import load_checked_spec
from governor.generation.params import Endpoints, RenderParams
from governor.generation.scrape import SAMPLE_LIMITS
from tests.alerts.cases import CASES, DEPLOY, FAST, GOLDEN, ROOT, TESTDATA


@functools.cache
def _default_files() -> tuple[tuple[str, str], ...]:
    return tuple(render_all(load_checked_spec(ROOT / "slo.yaml")).items())


def default_files() -> dict[str, str]:
    """The default spec rendered with default parameters (rendered once per session)."""
    return dict(_default_files())


def load(text: str) -> Any:
    return yaml.safe_load(text)


def rules_of(files: dict[str, str]) -> list[dict[str, Any]]:
    return [rule for path, text in files.items() if path.startswith("prometheus/rules/")
            for group in load(text)["groups"] for rule in group["rules"]]


# ---- committed artifacts and golden files --------------------------------------------------------


def test_the_committed_deploy_files_are_what_the_generator_writes_now() -> None:
    stale = differences(default_files(), DEPLOY)
    assert not stale, (f"deploy/ is stale ({', '.join(stale)}): run "
                       "`governor generate --slo slo.yaml --out deploy` and commit the result")


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_output_matches_the_golden_files(case: str, update_golden: bool) -> None:
    spec_path, endpoints, params = CASES[case]
    files = render_all(load_checked_spec(spec_path), endpoints, params, source=spec_path.name)
    golden = GOLDEN / case
    if update_golden:
        write_all(files, golden)
    stale = differences(files, golden)
    assert not stale, f"{case}: {stale} differ; rerun with --update-golden if that is intended"


def test_rendering_is_deterministic() -> None:
    assert render_all(load_checked_spec(ROOT / "slo.yaml")) == default_files()


def test_writing_removes_generated_files_that_are_no_longer_produced(tmp_path: Path) -> None:
    files = default_files()
    write_all(files, tmp_path)
    old = tmp_path / "prometheus/rules/slo-retired.yml"
    old.write_text(files["prometheus/rules/slo-availability.yml"], encoding="utf-8")
    mine = tmp_path / "prometheus/rules/hand-written.yml"
    mine.write_text("groups: []\n", encoding="utf-8")
    assert differences(files, tmp_path) == ["prometheus/rules/slo-retired.yml"]
    assert old in write_all(files, tmp_path)
    assert not old.exists()
    assert mine.exists()
    assert write_all(files, tmp_path) == []


# ---- rules ---------------------------------------------------------------------------------------


def test_every_alert_has_a_unit_test_that_sees_it_fire_and_stay_quiet() -> None:
    files = render_all(load_checked_spec(TESTDATA / "period-28d-guarded.yaml"))
    alerts = {rule["alert"] for rule in rules_of(files) if "alert" in rule}
    firing: set[str] = set()
    quiet: set[str] = set()
    for path, text in files.items():
        if path.startswith("prometheus/tests/"):
            for test in load(text)["tests"]:
                for check in test["alert_rule_test"]:
                    (firing if check["exp_alerts"] else quiet).add(check["alertname"])
    assert alerts == firing == quiet
    assert len(alerts) > 15


def test_the_default_spec_yields_the_expected_alerts() -> None:
    alerts = sorted({rule["alert"] for rule in rules_of(default_files()) if "alert" in rule})
    slo_alerts = [a for a in alerts if a.endswith(("ErrorBudgetBurn", "P99High"))]
    assert slo_alerts == ["AvailabilityErrorBudgetBurn",
                          "InterTokenLatencyClassErrorBudgetBurn",  # per request class
                          "InterTokenLatencyErrorBudgetBurn", "InterTokenLatencyP99High",
                          "ProbeSuccessErrorBudgetBurn",  # the synthetic probe's SLI
                          "TimeToFirstTokenClassErrorBudgetBurn",
                          "TimeToFirstTokenErrorBudgetBurn"]
    for health in ("GovernorTargetDown", "GpuExporterStale", "VllmKvCacheNearlyFull",
                   "VllmPreemptionsHigh", "VllmQueueGrowing", "GpuXidErrors",
                   "GpuThermalThrottling", "GpuPowerThrottling", "GpuMemoryNearlyFull",
                   "VllmPrefixCacheHitRatioLow"):
        assert health in alerts


def test_the_fast_alert_is_per_instance_and_routed_to_the_controller() -> None:
    (rule,) = [r for r in rules_of(default_files()) if r.get("alert") == "InterTokenLatencyP99High"]
    assert rule["expr"] == (
        f"histogram_quantile(0.99, sum by (le, instance) "
        f'(rate({svc.INTER_TOKEN_LATENCY.bucket}{{job="inference", class!~"doc"}}[1m])))\n'
        "> 0.12"
    )
    assert rule["for"] == "1m"
    assert rule["labels"] == {"slo": "inter-token-latency", "severity": "control",
                              "service": "inference", "team": "inference"}


def test_latency_slis_count_the_threshold_bucket_in_both_le_spellings() -> None:
    exprs = "\n".join(r["expr"] for r in rules_of(default_files()) if "record" in r)
    # The default spec's chats (the default class) at the SLOs' thresholds; documents at theirs.
    job = 'job="inference", '
    assert f'{svc.TIME_TO_FIRST_TOKEN.bucket}{{{job}class!~"doc", le=~"1|1\\\\.0"}}[5m]' in exprs
    assert f'{svc.TIME_TO_FIRST_TOKEN.bucket}{{{job}class="doc", le=~"20|20\\\\.0"}}[5m]' in exprs
    assert f'{svc.INTER_TOKEN_LATENCY.bucket}{{{job}class!~"doc", le="0.12"}}[1h]' in exprs
    assert f'{svc.INTER_TOKEN_LATENCY.bucket}{{{job}class="doc", le="0.25"}}[1h]' in exprs


def test_the_period_ratio_is_weighted_by_events() -> None:
    (expr,) = {r["expr"] for r in rules_of(default_files())
               if r.get("record") == n.SLI_ERROR_RATIO_PERIOD.name
               and r["labels"]["slo"] == "availability"}
    assert expr == (
        'sum_over_time(slo:sli_error_events:rate5m{slo="availability", service="inference"}[30d])'
        '\n/\n'
        'sum_over_time(slo:sli_events:rate5m{slo="availability", service="inference"}[30d])'
    )


def test_thresholds_carry_no_float_noise() -> None:
    for rule in rules_of(render_all(load_checked_spec(TESTDATA / "period-28d-guarded.yaml"))):
        for number in re.findall(r"\d+\.\d+", rule["expr"]):
            assert len(number.rstrip("0").split(".")[1]) <= 6, (number, rule["expr"])


def test_health_alerts_read_the_components_metric_names() -> None:
    exprs = "\n".join(r["expr"] for r in rules_of(default_files()) if "alert" in r)
    for name in (vllm.KV_CACHE_USAGE.name, vllm.NUM_PREEMPTIONS.total,
                 vllm.NUM_REQUESTS_WAITING.name, gpu.UP.name, gpu.EXPORTER_LAST_SUCCESS.name,
                 gpu.XID_ERRORS.total, gpu.CLOCK_EVENT_ACTIVE.name, gpu.MEMORY_USED.name):
        assert name in exprs


# ---- Alertmanager, Prometheus, Kubernetes -----------------------------------------------------


def test_alertmanager_sends_control_alerts_to_the_controller_with_a_bearer_token_file() -> None:
    config = load(default_files()[ALERTMANAGER_CONFIG])
    (control,) = [r for r in config["route"]["routes"] if r["receiver"] == "controller"]
    assert control["matchers"] == ['severity="control"']
    assert "instance" in control["group_by"]
    (receiver,) = [r for r in config["receivers"] if r["name"] == "controller"]
    (webhook,) = receiver["webhook_configs"]
    assert webhook == {
        "url": "http://controller:9500/alerts", "send_resolved": True, "max_alerts": 0,
        "http_config": {"authorization": {"type": "Bearer",
                                          "credentials_file": "/run/secrets/controller_token"}},
    }


def test_alertmanager_groups_by_slo_and_pages_inhibit_tickets() -> None:
    config = load(default_files()[ALERTMANAGER_CONFIG])
    assert config["route"]["group_by"] == ["alertname", "slo", "severity"]
    assert {r["name"] for r in config["receivers"]} == {"controller", "page", "ticket"}
    (inhibit,) = config["inhibit_rules"]
    assert inhibit["source_matchers"][0] == 'severity="page"'
    assert inhibit["target_matchers"][0] == 'severity="ticket"'
    assert inhibit["equal"] == ["slo", "service", "class"]  # a class page silences its ticket


def test_prometheus_scrapes_the_four_jobs_and_loads_the_rules() -> None:
    config = load(default_files()[PROMETHEUS_CONFIG])
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"inference", "gpu", "controller", "probe"}
    assert jobs["gpu"]["static_configs"][0]["targets"] == ["exporter:9400"]
    assert jobs["controller"]["static_configs"][0]["targets"] == ["controller:9500"]
    assert jobs["probe"]["static_configs"][0]["targets"] == ["probe:9600"]
    # Inference replicas come from a file Prometheus re-reads, so adding one needs no reload.
    assert jobs["inference"]["file_sd_configs"] == [{"files": ["targets/inference.json"]}]
    (group,) = json.loads(default_files()[PROMETHEUS_TARGETS])
    assert group["targets"] == ["inference:8000"]
    assert config["rule_files"] == ["rules/*.yml"]
    assert config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == [
        "alertmanager:9093"]
    assert config["storage"]["exemplars"]["max_exemplars"] > 0


def test_every_scrape_sets_a_sample_limit() -> None:
    """N4 (issue 32): a target exposing label values without end fails its own scrape, past
    its job's limit, instead of growing Prometheus."""
    config = load(default_files()[PROMETHEUS_CONFIG])
    limits = {job["job_name"]: job.get("sample_limit") for job in config["scrape_configs"]}
    assert limits == {"inference": SAMPLE_LIMITS["inference"], "gpu": SAMPLE_LIMITS["gpu"],
                      "controller": SAMPLE_LIMITS["controller"], "probe": SAMPLE_LIMITS["probe"]}


def test_local_endpoints_and_fast_params_reach_the_configs() -> None:
    files = render_all(load_checked_spec(ROOT / "slo.yaml"), Endpoints.local(), FAST)
    prometheus = load(files[PROMETHEUS_CONFIG])
    assert prometheus["global"] == {"scrape_interval": "1s", "scrape_timeout": "1s",
                                    "evaluation_interval": "1s"}
    (group,) = json.loads(files[PROMETHEUS_TARGETS])
    assert group["targets"] == ["127.0.0.1:8000"]
    webhook = load(files[ALERTMANAGER_CONFIG])["receivers"][0]["webhook_configs"][0]
    assert webhook["url"] == "http://127.0.0.1:9500/alerts"
    assert webhook["http_config"]["authorization"]["credentials_file"] == "/tmp/token"


def test_prometheus_keeps_the_slo_period_and_stores_exemplars() -> None:
    spec = load_checked_spec(ROOT / "slo.yaml")
    args = prometheus_args(spec, RenderParams(), config_file="p.yml", storage_path="/data")
    assert "--storage.tsdb.retention.time=35d" in args
    assert "--enable-feature=exemplar-storage" in args
    assert retention_seconds(spec, RenderParams()) > spec.period_seconds
    assert "--storage.tsdb.retention.time=35d" in default_files()[PROMETHEUS_CONFIG]


def test_the_prometheus_rule_holds_the_same_groups() -> None:
    files = default_files()
    resource = load(files[PROMETHEUS_RULE])
    assert (resource["apiVersion"], resource["kind"]) == ("monitoring.coreos.com/v1",
                                                          "PrometheusRule")
    assert resource["metadata"]["namespace"] == "governor"
    # kube-prometheus-stack's rule selector, by default.
    assert resource["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    groups = [g for path, text in files.items() if path.startswith("prometheus/rules/")
              for g in load(text)["groups"]]
    # The same groups; the control alerts carry the namespace, which confines the generated
    # AlertmanagerConfig to them.
    for group in resource["spec"]["groups"]:
        for rule in group["rules"]:
            if rule.get("labels", {}).get("severity") == "control":
                assert rule["labels"].pop("namespace") == "governor"
            assert "namespace" not in rule.get("labels", {})
    assert sorted(resource["spec"]["groups"], key=lambda g: g["name"]) == sorted(
        groups, key=lambda g: g["name"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"scrape_interval_seconds": 0}, "positive whole number"),
     ({"fast_window_seconds": 20}, "at least two scrapes"),
     ({"controller_token_file": ""}, "must be a path")],
)
def test_render_params_are_validated(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RenderParams(**kwargs)


@pytest.mark.parametrize("addresses", [("inference",), ("a:b",), ("a:0",), ("a b:1",), "a:1"])
def test_endpoints_are_validated(addresses: Any) -> None:
    with pytest.raises(ValueError, match="host:port"):
        Endpoints(inference=addresses)


def _github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings: lower case, punctuation dropped, spaces dashed."""
    headings = re.findall(r"^#{1,6} (.+)$", markdown, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in headings}


@pytest.mark.parametrize("case", ["deploy", *sorted(CASES)])
def test_every_alert_links_its_section_of_the_runbooks(case: str) -> None:
    if case == "deploy":
        spec, files = load_checked_spec(ROOT / "slo.yaml"), default_files()
    else:
        spec_path, endpoints, params = CASES[case]
        spec = load_checked_spec(spec_path)
        files = render_all(spec, endpoints, params, source=spec_path.name)
    anchors = _github_anchors((ROOT / "docs" / "runbooks.md").read_text(encoding="utf-8"))
    alerts = [r for r in rules_of(files) if "alert" in r]
    assert alerts
    for alert in alerts:
        url = alert["annotations"]["runbook_url"]
        base, _, anchor = url.partition("#")
        assert base == spec.alerting.runbooks, url
        assert anchor in anchors, f"{alert['alert']}: no section #{anchor} in docs/runbooks.md"
        assert alert["labels"]["severity"] in {spec.alerting.page, spec.alerting.ticket,
                                               spec.alerting.control}


def test_a_fleets_severities_reach_the_routes_and_the_inhibition() -> None:
    spec_path, endpoints, params = CASES["fleet"]
    files = render_all(load_checked_spec(spec_path), endpoints, params)
    config = load(files[ALERTMANAGER_CONFIG])
    routes = {r["receiver"]: r["matchers"] for r in config["route"]["routes"]}
    assert routes == {"controller": ['severity="autotune"'], "page": ['severity="critical"'],
                      "ticket": ['severity="warning"']}
    (inhibit,) = config["inhibit_rules"]
    assert inhibit["source_matchers"][0] == 'severity="critical"'
    assert inhibit["target_matchers"][0] == 'severity="warning"'
    severities = {r["labels"]["severity"] for r in rules_of(files) if "alert" in r}
    assert severities == {"critical", "warning", "autotune"}


def test_every_cause_of_a_verdict_has_its_section_of_the_runbooks() -> None:
    anchors = _github_anchors((ROOT / "docs" / "runbooks.md").read_text(encoding="utf-8"))
    for cause in causes.CAUSES:
        assert cause.runbook_anchor in anchors, f"{cause.name}: no section in docs/runbooks.md"
