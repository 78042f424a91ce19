"""Every scrape job Governor writes for a user bounds what one scrape may bring (N4 of issue 32,
docs/reliability.md): the jobs of ``prometheus.yml`` for compose and for ``governor up``
(``--local``), the ServiceMonitors and PodMonitors of ``deploy/kubernetes/``, for both specs, as
generated and as committed, and the jobs docs/stock-vllm.md tells a user to add on hosts. Each
job's limit is its role's in the one table (``SAMPLE_LIMITS``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from governor.contracts.endpoints import JOB_PROBE
from governor.generate import build_parser, render_all, settings
from governor.generation.catalog import load_checked_spec
from governor.generation.scrape import SAMPLE_LIMITS
from governor.slo.spec import SloSpec
from tests.support.hosts_recipe import snippet

ROOT = Path(__file__).resolve().parents[2]
SPECS = {"governor": ROOT / "slo.yaml", "stock-vllm": ROOT / "examples" / "stock-vllm" / "slo.yaml"}
TREES = {"governor": ROOT / "deploy", "stock-vllm": ROOT / "examples" / "stock-vllm" / "deploy"}
MONITORS = {"ServiceMonitor": "endpoints", "PodMonitor": "podMetricsEndpoints"}


def roles(spec: SloSpec) -> dict[str, str]:
    """Job name → its role (the key of SAMPLE_LIMITS), as the spec names the jobs."""
    return {spec.targets.inference.job: "inference", spec.targets.gpu.job: "gpu",
            spec.targets.controller.job: "controller", JOB_PROBE: "probe"}


def scrape_jobs(files: Mapping[str, str]) -> Iterator[tuple[str, str, Any]]:
    """``(where, job, limit)`` for every scrape job of the files (relative path → text): each
    job of a ``prometheus.yml``, each endpoint of a monitor (its job is what it relabels
    ``job`` to); ``limit`` is None where none is set."""
    for path, text in files.items():
        if path.endswith("prometheus.yml"):
            for job in yaml.safe_load(text)["scrape_configs"]:
                yield path, job["job_name"], job.get("sample_limit")
        elif path.endswith(".yaml"):
            for document in yaml.safe_load_all(text):
                if document is None or document["kind"] not in MONITORS:
                    continue
                where = f"{path}: {document['kind']}/{document['metadata']['name']}"
                for endpoint in document["spec"][MONITORS[document["kind"]]]:
                    (job,) = [r["replacement"] for r in endpoint["relabelings"]
                              if r.get("targetLabel") == "job"]
                    yield where, job, document["spec"].get("sampleLimit")


def unbounded(files: Mapping[str, str], spec: SloSpec) -> tuple[list[str], list[str]]:
    """The jobs found (``where: job``), and those without their role's limit."""
    found, wrong = [], []
    for where, job, limit in scrape_jobs(files):
        found.append(f"{where}: {job}")
        if limit != SAMPLE_LIMITS[roles(spec)[job]]:
            wrong.append(f"{where}: {job} has sample limit {limit!r}")
    return found, wrong


def generated(name: str, *options: str) -> dict[str, str]:
    args = build_parser().parse_args(["--slo", str(SPECS[name]), *options])
    return render_all(load_checked_spec(SPECS[name]), settings(args), source="slo.yaml")


@pytest.mark.parametrize("local", [False, True], ids=["compose", "local"])
@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_generated_scrape_job_bounds_its_samples(name: str, local: bool) -> None:
    spec = load_checked_spec(SPECS[name])
    found, wrong = unbounded(generated(name, *(["--local"] if local else [])), spec)
    assert wrong == []
    # Each job of prometheus.yml, and each component's monitor: Governor's exporter's only
    # where the spec's GPUs are its own (dcgm-exporter's monitor is the GPU Operator's).
    monitors = {"inference", "controller", "probe"} | (set() if spec.targets.gpu.dcgm else {"gpu"})
    assert sorted(roles(spec)[job.rpartition(": ")[2]] for job in found) == sorted(
        ["inference", "gpu", "controller", "probe", *monitors]), found


@pytest.mark.parametrize("name", sorted(TREES))
def test_every_committed_scrape_job_bounds_its_samples(name: str) -> None:
    tree = TREES[name]
    files = {str(path.relative_to(tree)): path.read_text(encoding="utf-8")
             for path in [tree / "prometheus" / "prometheus.yml",
                          *sorted((tree / "kubernetes").glob("*.yaml"))]}
    found, wrong = unbounded(files, load_checked_spec(SPECS[name]))
    assert found and wrong == []


def test_the_scrape_jobs_the_hosts_recipe_gives_bound_their_samples() -> None:
    """docs/stock-vllm.md's copy (held to what its command writes by the recipe's own test)."""
    text = yaml.safe_dump(snippet("scrape_configs"))
    found, wrong = unbounded({"docs/stock-vllm.md prometheus.yml": text},
                             load_checked_spec(SPECS["stock-vllm"]))
    assert len(found) == 4 and wrong == []
