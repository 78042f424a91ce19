"""Reading generated boards back: panels, their PromQL, Grafana's variables expanded.

Shared by the schema, content, PromQL and live-Prometheus tests.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from governor.alerts.catalog import load_checked_spec
from governor.dashboards.render import DASHBOARDS_DIR, render_all

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SCHEMAS = ROOT / "tests" / "data" / "grafana"
# shared/ lies beside the checkout (CI, the main checkout) or beside the worktrees' folder.
SHARED_SCHEMAS = next((p / "shared" / "schemas" / "grafana" for p in ROOT.parents[:2]
                       if (p / "shared" / "schemas" / "grafana").is_dir()), None)
TESTDATA = ROOT / "tests" / "alerts" / "testdata"
GOLDEN = Path(__file__).parent / "golden"

# Golden cases: name → spec (the alerts tests' specs: another period, OpenSLO input).
CASES = {
    "period-28d-guarded": TESTDATA / "period-28d-guarded.yaml",
    "openslo": TESTDATA / "openslo.yaml",
    "classes": TESTDATA / "classes.yaml",
}


@functools.cache
def _default_files() -> tuple[tuple[str, str], ...]:
    return tuple(render_all(load_checked_spec(ROOT / "slo.yaml")).items())


def default_files() -> dict[str, str]:
    """The default spec rendered with default parameters (once per session)."""
    return dict(_default_files())


def boards(files: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """uid → dashboard JSON of every generated board."""
    files = default_files() if files is None else files
    loaded = (json.loads(text) for path, text in files.items()
              if path.startswith(DASHBOARDS_DIR + "/"))
    return {board["uid"]: board for board in loaded}


def panels(board: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel that is not a row (rows of these boards are expanded, so flat)."""
    for panel in board["panels"]:
        if panel["type"] != "row":
            yield panel
        yield from panel.get("panels", [])


@dataclass(frozen=True)
class PanelQuery:
    board: str
    panel: str  # the panel's title, or "annotation: <name>"
    ref_id: str
    expr: str

    @property
    def where(self) -> str:
        return f"{self.board} / {self.panel} / {self.ref_id}"


def queries(board: Mapping[str, Any]) -> Iterator[PanelQuery]:
    """Every PromQL expression of a board: panel targets and Prometheus annotations."""
    for panel in panels(board):
        for target in panel.get("targets", []):
            yield PanelQuery(board["uid"], panel["title"], target["refId"], target["expr"])
    for annotation in board["annotations"]["list"]:
        if "expr" in annotation:
            yield PanelQuery(board["uid"], f"annotation: {annotation['name']}", "-",
                             annotation["expr"])


def all_queries(files: Mapping[str, str] | None = None) -> list[PanelQuery]:
    return [q for board in boards(files).values() for q in queries(board)]


# What Grafana substitutes before a query reaches Prometheus. Multi-value variables with "All"
# selected become their allValue regex.
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


def expand(expr: str, rate_interval: str = "1m", range_: str = "1h",
           interval: str = "15s") -> str:
    builtins = {"__rate_interval": rate_interval, "__range": range_, "__interval": interval}

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return builtins.get(name, ".*")

    return _VARIABLE.sub(substitute, expr)


def metric_references(expr: str) -> set[str]:
    """Metric names the expression selects (every selector here carries matchers: ``name{``)."""
    return set(re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{", expr))
