"""A live run as :mod:`lab.live.runs` wrote it (``run-*.json.gz``), read back for scoring,
plotting and prediction::

    run = LiveRun.load(Path("OUT/run-1-controller.json.gz"))
    run.label, run.duration, run.series("itl_p99"), run.changes()
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.live.replay import Trace


@dataclass(frozen=True)
class LiveRun:
    data: dict[str, Any]
    traces: list[Trace]
    name: str = ""  # the file's stem, "run-1-controller": which run, when a policy repeats

    @classmethod
    def load(cls, path: Path) -> LiveRun:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            data = json.load(handle)
        return cls(data, [Trace.from_row(row) for row in data["traces"]],
                   path.name.removesuffix(".json.gz"))

    @property
    def label(self) -> str:
        return str(self.data["label"])

    @property
    def duration(self) -> float:
        return float(self.data["duration_seconds"])

    @property
    def replicas(self) -> int:
        return int(self.data.get("replicas", 1))

    def series(self, name: str) -> list[tuple[float, float]]:
        """A Prometheus range result as (seconds since the run started, value); with several
        series (replicas, or data-parallel ranks) the highest at each step, the worst one."""
        start = float(self.data["started_unix"])
        worst: dict[float, float] = {}
        for one in self.data["prometheus"].get(name) or []:
            for t, v in one["values"]:
                at, value = float(t) - start, float(v)
                if at not in worst or math.isnan(worst[at]) or value > worst[at]:
                    worst[at] = value
        return sorted(worst.items())

    def limit_series(self, param: str) -> list[tuple[float, float]]:
        start = float(self.data["started_unix"])
        for series in self.data["prometheus"].get("limit") or []:
            if series["metric"].get("param") == param:
                return [(float(t) - start, float(v)) for t, v in series["values"]]
        return []

    def changes(self) -> list[dict[str, Any]]:
        """Applied audit lines that moved a limit, with their time since the run started; lines
        from before the run (an aborted attempt's, in a reused folder) are not the run's."""
        start = float(self.data["started_unix"])
        found = []
        for line in self.data.get("audit") or []:
            if not line.get("applied") or line["before"] == line["after"]:
                continue
            at = dt.datetime.fromisoformat(line["at"].replace("Z", "+00:00")).timestamp()
            if at < start:
                continue
            found.append({**line, "at_s": round(at - start, 1)})
        return found
