"""Reading generated boards back: their panels, their PromQL, Grafana's variables expanded.

Used by ``governor preview`` (which draws every panel from a live Prometheus, no Grafana needed)
and by the tests that run every panel query against a live Prometheus::

    for board in boards_of(render_all(spec)).values():
        for query in queries(board):
            promql = expand(query.expr, rate_interval="1m", variables=query.variables)
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from governor.dashboards.render import DASHBOARDS_DIR


def boards_of(files: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """uid → dashboard JSON of every board among rendered files (path → text)."""
    loaded = (json.loads(text) for path, text in files.items()
              if path.startswith(DASHBOARDS_DIR + "/"))
    return {board["uid"]: board for board in loaded}


def panels(board: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel that is not a row (the rows of these boards are expanded, so flat)."""
    for panel in board["panels"]:
        if panel["type"] != "row":
            yield panel
        yield from panel.get("panels", [])


def defaults(board: Mapping[str, Any]) -> dict[str, str]:
    """The values a board's variables open with, where one is chosen rather than "All"
    (``$job``: the spec's job for the board's component)."""
    chosen: dict[str, str] = {}
    for variable in board.get("templating", {}).get("list", []):
        value = (variable.get("current") or {}).get("value")
        if isinstance(value, str) and value != "$__all":
            chosen[variable["name"]] = value
    return chosen


@dataclass(frozen=True)
class PanelQuery:
    board: str
    panel: str  # the panel's title, or "annotation: <name>"
    ref_id: str
    expr: str
    chosen: tuple[tuple[str, str], ...] = ()  # the board's opening values (hashable)

    @property
    def variables(self) -> dict[str, str]:
        """The board's variables with a value chosen, for :func:`expand`."""
        return dict(self.chosen)

    @property
    def where(self) -> str:
        return f"{self.board} / {self.panel} / {self.ref_id}"


def queries(board: Mapping[str, Any]) -> Iterator[PanelQuery]:
    """Every PromQL expression of a board: panel targets and Prometheus annotations."""
    chosen = tuple(sorted(defaults(board).items()))
    for panel in panels(board):
        for target in panel.get("targets", []):
            yield PanelQuery(board["uid"], panel["title"], target["refId"], target["expr"],
                             chosen)
    for annotation in board["annotations"]["list"]:
        if "expr" in annotation:
            yield PanelQuery(board["uid"], f"annotation: {annotation['name']}", "-",
                             annotation["expr"], chosen)


# What Grafana substitutes before a query reaches Prometheus. Multi-value variables with "All"
# selected become their allValue regex; a chosen value is escaped for the regex it lands in.
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


def expand(expr: str, rate_interval: str = "1m", range_: str = "1h",
           interval: str = "15s", variables: Mapping[str, str] | None = None) -> str:
    """Grafana's built-in variables replaced; each template variable set to its value in
    ``variables`` (a board's :func:`defaults`), or to "All"."""
    builtins = {"__rate_interval": rate_interval, "__range": range_, "__interval": interval}
    chosen = {name: re.escape(value).replace("\\", "\\\\")
              for name, value in (variables or {}).items()}

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return builtins.get(name, chosen.get(name, ".*"))

    return _VARIABLE.sub(substitute, expr)


_LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def legend(template: str, labels: Mapping[str, str]) -> str:
    """A series' legend as Grafana writes it: ``{{gpu}}`` replaced by the label's value."""
    if not template or template == "__auto":
        return ", ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__")
    return _LEGEND.sub(lambda m: labels.get(m.group(1), ""), template)
