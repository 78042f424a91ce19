"""The deadline gate in virtual time: the service's own DeadlineGate, fed the simulated engine's
first tokens, refuses what its backlog would make late, sheds a waiter at its deadline, and never
takes back what reached the engine."""

from __future__ import annotations

from pathlib import Path

from governor.admission.deadline import DeadlineSettings
from governor.admission.policy import AdmissionPolicy
from governor.bench.controller import build_parser, build_scenario, workloads
from governor.bench.controller.admission import Deadlines, Gatekeeper, bound_label, deadlines_of
from governor.bench.controller.loop import Admission, run
from governor.contracts.metrics.service import (
    DEFAULT_CLASS,
    REASON_DEADLINE,
    REASON_DEADLINE_PASSED,
    REASON_TOKENS_AHEAD,
)
from governor.inference.engines.base import FinishReason
from governor.inference.engines.sim.presets import get_preset
from governor.inference.engines.sim.virtual import VirtualSim

PRESET = get_preset("llama-3-8b@h200")


def gated(ids: list[str], prompt: int, deadlines: Deadlines,
          policy: AdmissionPolicy | None = None) -> tuple[VirtualSim, Gatekeeper]:
    keeper = Gatekeeper(policy or AdmissionPolicy(512, 1024), 60.0,
                        dict.fromkeys(ids, DEFAULT_CLASS), dict.fromkeys(ids, prompt), deadlines)
    sim = VirtualSim(PRESET, seed=1, gate=keeper.arrive, on_first_token=keeper.first_token,
                     on_finish=keeper.finished)
    return sim, keeper


def test_a_burst_past_prefill_capacity_is_refused_and_the_served_meet_their_deadline() -> None:
    # 2 s of warm-up at 4 prompts/s, then 400 prompts of 4 000 tokens in one second: ~40 s of
    # prefill for a 1 s first-token target.
    warm = [f"w{i}" for i in range(8)]
    burst = [f"b{i}" for i in range(400)]
    sim, keeper = gated(warm + burst, 4_000,
                        Deadlines({DEFAULT_CLASS: 1.0}, DeadlineSettings()))
    for i, rid in enumerate(warm):
        sim.submit(arrival=i * 0.25, prompt=4_000, output_tokens=4, request_id=rid)
    for i, rid in enumerate(burst):
        sim.submit(arrival=2.0 + i / 400, prompt=4_000, output_tokens=4, request_id=rid)
    sim.run_until_idle()
    refused = [r for r, why in keeper.turned_away.items() if why == REASON_DEADLINE]
    served = [sim.record(r) for r in burst if r not in keeper.turned_away]
    assert len(refused) > 300 and len(served) >= 5
    assert all(r.token_times == () for r in map(sim.record, refused))  # never in the engine
    late = [r for r in served if r.time_to_first_token > 1.0]
    assert len(late) <= len(served) // 5  # the prediction errs, but not by much
    rate = keeper.gate.rate
    assert rate is not None and 20_000 < rate < 60_000  # the preset's prefill, as measured


def test_a_waiter_is_shed_at_its_deadline_before_it_reaches_the_engine() -> None:
    sim, keeper = gated(["a", "b"], 100, Deadlines({DEFAULT_CLASS: 0.5}, DeadlineSettings()),
                        AdmissionPolicy(1, 4))
    sim.submit(arrival=0.0, prompt=100, output_tokens=500, request_id="a")  # holds the slot
    sim.submit(arrival=0.1, prompt=100, output_tokens=4, request_id="b")
    sim.run_until_idle()
    assert keeper.turned_away == {"b": REASON_DEADLINE_PASSED}
    b = sim.record("b")
    assert b.token_times == () and b.finish_reason is FinishReason.ABORT  # never in the engine
    assert sim.record("a").num_output_tokens == 500  # what runs is never taken back
    assert keeper.gate.pending_tokens == keeper.gate.queued_tokens == 0


def test_a_static_bound_refuses_past_its_tokens_ahead() -> None:
    ids = [f"r{i}" for i in range(20)]
    sim, keeper = gated(ids, 4_000, deadlines_of({}, slack=None, max_tokens_ahead=16_384) or
                        Deadlines({}, DeadlineSettings()))
    for i, rid in enumerate(ids):
        sim.submit(arrival=i * 1e-3, prompt=4_000, output_tokens=4, request_id=rid)
    sim.run_until_idle()
    assert set(keeper.turned_away.values()) == {REASON_TOKENS_AHEAD}
    assert len(keeper.turned_away) >= 10


def test_no_gate_is_none_and_a_bound_has_a_short_label() -> None:
    assert deadlines_of({DEFAULT_CLASS: 1.0}, slack=None, max_tokens_ahead=None) is None
    assert bound_label(32_768) == "32k" and bound_label(1_000) == "1000"
    assert bound_label(None) == "none"


def test_the_controller_moves_its_gate_s_slack_with_a_budget_cut_and_hands_it_back() -> None:
    """(c+) on Azure's merged log at 3x, its first 2.5 minutes: the law cuts the budget behind a
    gate that refuses, lowers the slack by the cost model's ratio, and hands it back; without a
    gate the same law never touches a slack."""
    root = Path(__file__).resolve().parents[3]
    args = build_parser().parse_args([
        "--workload", str(root / "lab/workloads/stress/azure-chat-code-x30.yaml"),
        "--minutes", "2.5", "--no-plots", "--slo", str(root / "slo.yaml"),
        "--deploy", str(root / "deploy")])
    scenario = build_scenario(args, workloads(args)[0])
    arrivals = scenario.workload.arrivals(scenario.seed)
    gated_run = run(scenario, arrivals, name="(c+)", admission=Admission(slack=1.0))
    (start, first), *moves = gated_run.slacks
    assert (start, first) == (0.0, 1.0) and moves
    moved = [t.decision.admission for t in gated_run.traces if t.decision.admission is not None]
    lowered = [m for m in moved if m.after < m.before]
    assert lowered and "budget cut from 8192 to" in lowered[0].explanation
    assert 0.2 <= min(s for _, s in moves) < 1.0
    assert moves[-1][1] == 1.0  # handed back within the run
    ungated = run(scenario, arrivals, name="(c)")
    assert ungated.slacks == [] and all(t.decision.admission is None for t in ungated.traces)
