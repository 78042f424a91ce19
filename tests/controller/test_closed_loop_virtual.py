"""The controller's law closing the loop on the sim engine, in virtual time (seconds of wall).

The engine is the ``llama-3-8b@h200`` preset; Prometheus and the alert pipeline are modelled with
the generated stack's timing (``deploy/``), exactly as ``governor bench controller`` runs them. A
load step of long documents breaches the 120 ms inter-token P99 under vLLM's default limits; the
controller must bring it back under the SLO within a minute of the breach showing in its query
and then hold still.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from governor.bench.controller import build_parser, build_scenario
from governor.bench.controller.loop import PolicyRun, Scenario, ceiling, run
from governor.bench.controller.workload import parse_workload
from governor.controller.model import Action, Param, Reason

REPO = Path(__file__).resolve().parents[2]
MINUTES = 6.0
pytestmark = pytest.mark.slow  # two 6-minute runs: ~15 s of wall time


@pytest.fixture(scope="module")
def scenario() -> Scenario:
    args = build_parser().parse_args(["--slo", str(REPO / "slo.yaml"),
                                      "--deploy", str(REPO / "deploy")])
    base = build_scenario(args)
    # Quiet for a minute, then documents at 1.6/s to the end: one load step, no relief.
    workload = parse_workload({
        "version": "governor/workload/v1", "name": "step", "duration": f"{MINUTES:g}m",
        "classes": {
            "chat": {"prompt_tokens": [200, 1200], "output_tokens": [150, 450],
                     "rate": [{"start": "0%", "end": "100%", "from": 12.0}]},
            "doc": {"prompt_tokens": [4000, 7500], "output_tokens": [200, 500],
                    "rate": [{"start": "0s", "end": "60s", "from": 0.5},
                             {"start": "60s", "end": "100%", "from": 1.6}]}}})
    return replace(base, workload=workload)


@pytest.fixture(scope="module")
def runs(scenario: Scenario) -> tuple[PolicyRun, PolicyRun]:
    arrivals = scenario.workload.arrivals(scenario.seed)
    default = run(scenario, arrivals, name="default", static=ceiling(scenario))
    controlled = run(scenario, arrivals, name="controller")
    return default, controlled


def late_windows(result: PolicyRun, after: float) -> list[float]:
    return [w.itl_tail for w in result.windows if w.start >= after]


def test_the_default_limits_breach_after_the_load_step(runs: tuple[PolicyRun, PolicyRun],
                                                       scenario: Scenario) -> None:
    default, _ = runs
    late = late_windows(default, 120.0)
    assert sum(t > scenario.slo.itl_seconds for t in late) > len(late) / 2
    assert default.episodes and default.episodes[-1].recovered_at is None


def test_the_controller_cuts_the_budget_and_recovers_within_a_minute(
    runs: tuple[PolicyRun, PolicyRun], scenario: Scenario
) -> None:
    _, controlled = runs
    first = controlled.traces[0].decision
    assert (first.action, first.reason) == (Action.TIGHTEN, Reason.ITL_BREACH)
    assert first.after.max_num_batched_tokens < first.before.max_num_batched_tokens
    assert controlled.episodes, "the breach should show in the controller's query"
    for episode in controlled.episodes:
        assert episode.seconds is not None
        assert episode.seconds <= 60.0
    assert all(t <= scenario.slo.itl_seconds for t in late_windows(controlled, 240.0))


def test_the_controller_holds_still_once_recovered(runs: tuple[PolicyRun, PolicyRun]) -> None:
    _, controlled = runs
    assert len(controlled.traces) <= 3
    budgets = [t.decision.after.get(Param.MAX_NUM_BATCHED_TOKENS) for t in controlled.traces]
    assert budgets == sorted(budgets, reverse=True), "no cut was followed by a relaxation"


def test_the_controller_keeps_the_goodput_the_default_loses(
        runs: tuple[PolicyRun, PolicyRun]) -> None:
    default, controlled = runs
    good = [sum(o.finished and o.ttft <= 1.0 and not o.itl_tail > 0.12 for o in r.outcomes)
            for r in (default, controlled)]
    assert good[1] > 1.3 * good[0]
