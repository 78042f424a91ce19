"""``prometheus.yml`` and the command-line flags Prometheus needs alongside it.

Retention and exemplar storage are flags, not configuration, in Prometheus 2.42:
:func:`prometheus_args` renders them for ``governor up`` and compose. Rule files are referenced
relative to the configuration file, so the same ``prometheus.yml`` works in a container
(``/etc/prometheus``) and natively (``deploy/prometheus``); so is the file that lists the
inference replicas (``targets/inference.json``), which Prometheus watches. The jobs are named,
and their targets labelled, as the spec's ``targets`` section says, so that the rules, boards and
controller queries generated from the same spec select what this configuration scrapes; each
job bounds what one scrape may bring (:data:`governor.generation.scrape.SAMPLE_LIMITS`, as the
Kubernetes monitors do).
"""

from __future__ import annotations

import json

from governor.contracts.endpoints import JOB_PROBE, LISTEN_HOST, PROMETHEUS
from governor.contracts.promql import format_duration
from governor.generation.params import Endpoints, RenderParams
from governor.generation.scrape import SAMPLE_LIMITS
from governor.slo.fleet import Target, Targets
from governor.slo.spec import SloSpec

RULES_GLOB = "rules/*.yml"
# The inference replicas, discovered from a file Prometheus re-reads when it changes: add a
# replica by editing it (or by `governor generate --inference-targets a:8000,b:8000`), no reload.
INFERENCE_TARGETS = "targets/inference.json"
DEFAULT_SCRAPE_TIMEOUT = 10
MAX_EXEMPLARS = 100_000


def retention_seconds(spec: SloSpec, params: RenderParams) -> int:
    """The SLO period plus a margin: a ``[30d]`` query needs all 30 days on disk."""
    return spec.period_seconds + params.retention_margin_seconds


def _static(target: Target, addresses: tuple[str, ...], sample_limit: int
            ) -> dict[str, object]:
    group: dict[str, object] = {"targets": list(addresses)}
    if target.selector:
        group["labels"] = dict(target.selector)
    return {"job_name": target.job, "sample_limit": sample_limit, "static_configs": [group]}


def prometheus_config(endpoints: Endpoints, params: RenderParams,
                      targets: Targets | None = None) -> dict[str, object]:
    """``targets``: the spec's jobs and target labels (Governor's own by default)."""
    targets = targets or Targets()
    others = ((targets.gpu, endpoints.exporter, SAMPLE_LIMITS["gpu"]),
              (targets.controller, endpoints.controller, SAMPLE_LIMITS["controller"]),
              (Target(JOB_PROBE), endpoints.probe, SAMPLE_LIMITS["probe"]))
    timeout = min(DEFAULT_SCRAPE_TIMEOUT, params.scrape_interval_seconds)
    return {
        "global": {
            "scrape_interval": format_duration(params.scrape_interval_seconds),
            "scrape_timeout": format_duration(timeout),
            "evaluation_interval": format_duration(params.evaluation_interval_seconds),
        },
        "rule_files": [RULES_GLOB],
        "alerting": {"alertmanagers": [{"static_configs": [
            {"targets": list(endpoints.alertmanager)}]}]},
        "scrape_configs": [
            {"job_name": targets.inference.job, "sample_limit": SAMPLE_LIMITS["inference"],
             "file_sd_configs": [{"files": [INFERENCE_TARGETS]}]},
            *(_static(target, addresses, limit) for target, addresses, limit in others
              if addresses),
        ],
        # Exemplars (trace ids on latency buckets) link Grafana's panels to Jaeger's traces.
        "storage": {"exemplars": {"max_exemplars": MAX_EXEMPLARS}},
    }


def inference_targets(endpoints: Endpoints, target: Target | None = None) -> str:
    """The file-based service-discovery file of the inference job (JSON, one group), its
    targets labelled with the spec's inference selector."""
    labels = dict(target.selector) if target else {}
    groups = [{"targets": list(endpoints.inference), "labels": labels}] \
        if endpoints.inference else []
    return json.dumps(groups, indent=2) + "\n"


def flags_note(spec: SloSpec, params: RenderParams) -> str:
    """A header for prometheus.yml naming the flags it relies on."""
    retention = format_duration(retention_seconds(spec, params))
    return (f"# Start Prometheus with --storage.tsdb.retention.time={retention} (the {spec.period} "
            "SLO period plus a margin)\n# and --enable-feature=exemplar-storage: in Prometheus "
            "2.42 both are flags, not configuration.\n")


def prometheus_args(
    spec: SloSpec, params: RenderParams, *, config_file: str, storage_path: str,
    listen_address: str = PROMETHEUS.address(LISTEN_HOST),
) -> list[str]:
    """The flags to start Prometheus 2.42 with this configuration."""
    return [
        f"--config.file={config_file}",
        f"--storage.tsdb.path={storage_path}",
        f"--storage.tsdb.retention.time={format_duration(retention_seconds(spec, params))}",
        "--enable-feature=exemplar-storage",
        f"--web.listen-address={listen_address}",
    ]
