"""Reading generated boards back: panels, their PromQL, Grafana's variables expanded.

Shared by the schema, content, PromQL and live-Prometheus tests.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from governor.dashboards.readback import PanelQuery, boards_of, queries
from governor.dashboards.render import render_all
from governor.generation.catalog import load_checked_spec

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SCHEMAS = ROOT / "tests" / "data" / "grafana"
TESTDATA = ROOT / "tests" / "alerts" / "testdata"
GOLDEN = Path(__file__).parent / "golden"

# Golden cases: name → spec (the alerts tests' specs: another period, OpenSLO input).
CASES = {
    "period-28d-guarded": TESTDATA / "period-28d-guarded.yaml",
    "openslo": TESTDATA / "openslo.yaml",
    "classes": TESTDATA / "classes.yaml",
    "fleet": TESTDATA / "fleet.yaml",
    # The GPUs from NVIDIA's dcgm-exporter (targets.gpu.source: dcgm).
    "dcgm": TESTDATA / "dcgm.yaml",
}


# Committed example specs, whose generated output is committed beside them (and checked there).
EXAMPLES = {"stock-vllm": ROOT / "examples" / "stock-vllm" / "slo.yaml"}


@functools.cache
def _default_files() -> tuple[tuple[str, str], ...]:
    return tuple(render_all(load_checked_spec(ROOT / "slo.yaml")).items())


def default_files() -> dict[str, str]:
    """The default spec rendered with default parameters (once per session)."""
    return dict(_default_files())


def boards(files: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """uid → dashboard JSON of every generated board."""
    return boards_of(default_files() if files is None else files)


def all_queries(files: Mapping[str, str] | None = None) -> list[PanelQuery]:
    return [q for board in boards(files).values() for q in queries(board)]


def metric_references(expr: str) -> set[str]:
    """Metric names the expression selects (every selector here carries matchers: ``name{``)."""
    return set(re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{", expr))
