"""What the benchmarks offer to code that builds on them, such as the project's own lab.

The open-loop load generator, the controller benchmark's virtual-time run with its workloads,
request logs and scores, and the progress line every long run prints. Everything else under
``governor.bench`` is the benchmarks' own and changes with them; ``lint-imports`` keeps the lab
to this module::

    from governor.bench.api import Scenario, Workload, run_scenario
"""

from __future__ import annotations

from governor.bench.controller import build_parser as controller_parser
from governor.bench.controller import build_scenario, workloads
from governor.bench.controller import score as score_run
from governor.bench.controller.loop import Admission, Scenario
from governor.bench.controller.loop import run as run_scenario
from governor.bench.controller.monitoring import Pipeline
from governor.bench.controller.request_logs import (
    ReplayOptions,
    RequestLog,
    Traffic,
    load_traffic,
)
from governor.bench.controller.scoring import (
    RequestOutcome,
    WindowScore,
    attainment,
    goodput,
    request_tail,
    series_episodes,
    windows_from_times,
    worst_recovery,
)
from governor.bench.controller.whatif import row_of as whatif_row
from governor.bench.controller.workload import Arrival, Workload, WorkloadError
from governor.bench.load import LoadResult, LoadSpec, RequestResult, run_load, summarize
from governor.bench.progress import Progress
from governor.bench.service import cpu_seconds

__all__ = [
    "Admission",
    "Arrival",
    "LoadResult",
    "LoadSpec",
    "Pipeline",
    "Progress",
    "ReplayOptions",
    "RequestLog",
    "RequestOutcome",
    "RequestResult",
    "Scenario",
    "Traffic",
    "WindowScore",
    "Workload",
    "WorkloadError",
    "attainment",
    "build_scenario",
    "controller_parser",
    "cpu_seconds",
    "goodput",
    "load_traffic",
    "request_tail",
    "run_load",
    "run_scenario",
    "score_run",
    "series_episodes",
    "summarize",
    "whatif_row",
    "windows_from_times",
    "workloads",
    "worst_recovery",
]
