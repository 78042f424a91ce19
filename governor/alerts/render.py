"""Spec → every file of the rules side, as text: what ``governor up`` writes, and what
``governor generate`` writes beside the Grafana files::

    files = render_all(load_checked_spec("slo.yaml"))          # compose hostnames
    files = render_all(spec, Endpoints.local(), RenderParams(scrape_interval_seconds=5))
    write_all(files, Path("deploy"))

Paths are relative to the output directory and laid out as compose mounts them:
``prometheus/`` (``prometheus.yml``, ``rules/``, ``tests/``) on ``/etc/prometheus`` and
``alertmanager/`` on ``/etc/alertmanager``. Output is deterministic: no timestamps, stable order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from governor.alerts.alertmanager import HEADER_NOTE, alertmanager_config
from governor.alerts.kubernetes import prometheus_rule
from governor.alerts.prometheus_config import (
    INFERENCE_TARGETS,
    flags_note,
    inference_targets,
    prometheus_config,
)
from governor.alerts.rules import RuleFile
from governor.alerts.ruleset import RuleSetFile, Scope
from governor.alerts.rulesets import rulesets
from governor.alerts.ruletests import RuleTest, TestFile
from governor.alerts.runbooks import for_the_fleet
from governor.generation.artifacts import Artifacts, Owned
from governor.generation.catalog import histogram_edges
from governor.generation.params import Endpoints, RenderParams
from governor.generation.yamltext import dump_yaml, is_generated
from governor.slo.spec import SloSpec

PROMETHEUS_CONFIG = "prometheus/prometheus.yml"
PROMETHEUS_TARGETS = f"prometheus/{INFERENCE_TARGETS}"
ALERTMANAGER_CONFIG = "alertmanager/alertmanager.yml"
PROMETHEUS_RULE = "kubernetes/prometheusrule.yaml"
RULES_DIR = "prometheus/rules"
TESTS_DIR = "prometheus/tests"


def ruleset_files(
    spec: SloSpec, params: RenderParams, histograms: Mapping[str, Sequence[float]],
) -> tuple[RuleSetFile, ...]:
    """Every rule file with the tests of its alerts, rule set by rule set (see :func:`rulesets`)."""
    base = Scope(spec, params, histograms)
    return tuple(for_the_fleet(file, spec.alerting)
                 for ruleset in rulesets() for file in ruleset.files(base))


def promtool_file(rules: RuleFile, tests: Sequence[RuleTest]) -> TestFile:
    """promtool's file for the tests of one rule file, beside it in ``TESTS_DIR``."""
    interval = min((t.interval_seconds for t in tests), default=60)
    return TestFile((f"../rules/{rules.name}.yml",), interval, tuple(tests))


def render_all(
    spec: SloSpec,
    endpoints: Endpoints | None = None,
    params: RenderParams | None = None,
    *,
    histograms: Mapping[str, Sequence[float]] | None = None,
    source: str = "slo.yaml",
) -> dict[str, str]:
    """Every generated file: relative path → text; ``histograms``: the bucket edges of each
    histogram (default: those the spec's servers expose)."""
    endpoints = endpoints or Endpoints()
    params = params or RenderParams()
    rendered = ruleset_files(spec, params, histogram_edges(spec) if histograms is None
                             else histograms)
    rules = tuple(f.rules for f in rendered)
    files = {f"{RULES_DIR}/{f.name}.yml": dump_yaml(f.to_dict(), source) for f in rules}
    files.update({f"{TESTS_DIR}/{f.rules.name}.test.yml":
                  dump_yaml(promtool_file(f.rules, f.tests).to_dict(), source)
                  for f in rendered if f.tests})
    files[PROMETHEUS_TARGETS] = inference_targets(endpoints, spec.targets.inference)
    files[PROMETHEUS_CONFIG] = dump_yaml(prometheus_config(endpoints, params, spec.targets), source,
                                         flags_note(spec, params))
    files[ALERTMANAGER_CONFIG] = dump_yaml(
        alertmanager_config(endpoints, params, spec.alerting), source, HEADER_NOTE)
    files[PROMETHEUS_RULE] = dump_yaml(prometheus_rule(spec, rules), source)
    return dict(sorted(files.items()))


# The folders whose generated files the writer may delete when they are no longer produced.
ARTIFACTS = Artifacts(tuple(Owned(folder, "*.yml", is_generated)
                            for folder in (RULES_DIR, TESTS_DIR)))
write_all = ARTIFACTS.write_all
stale_files = ARTIFACTS.stale_files
differences = ARTIFACTS.differences
