"""Request classes in the controller benchmark: the service's admission policy in virtual time
(the same Ledger as ``governor serve``), vLLM priorities, and scores per class."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from governor.admission.policy import AdmissionPolicy, ClassLimit
from governor.bench.controller import main
from governor.bench.controller.admission import Gatekeeper, Limits
from governor.bench.controller.classes import ClassPlan
from governor.bench.controller.workload import Arrival
from governor.contracts.metrics.service import (
    DEFAULT_CLASS,
    REASON_QUEUE_FULL,
    REASON_QUEUE_TIMEOUT,
    REASON_SHED,
)
from governor.generation.catalog import load_checked_spec
from governor.inference.engines.sim.presets import get_preset
from governor.inference.engines.sim.virtual import VirtualSim

REPO = Path(__file__).resolve().parents[3]
SPEC = load_checked_spec(REPO / "slo.yaml")
TINY = get_preset("tiny")


def sim_with(policy: AdmissionPolicy, timeout: float, class_of: dict[str, str]
             ) -> tuple[VirtualSim, Gatekeeper]:
    keeper = Gatekeeper(policy, timeout, class_of)
    sim = VirtualSim(TINY, seed=1, gate=keeper.arrive, on_finish=keeper.finished,
                     policy="priority")
    return sim, keeper


def test_a_held_request_runs_when_a_slot_frees_and_its_wait_counts_in_its_ttft() -> None:
    sim, keeper = sim_with(AdmissionPolicy(1, 4), 60.0, {"a": DEFAULT_CLASS, "b": DEFAULT_CLASS})
    sim.submit(arrival=0.0, prompt=64, output_tokens=40, request_id="a")
    sim.submit(arrival=0.01, prompt=64, output_tokens=4, request_id="b")
    sim.run_until_idle()
    a, b = sim.record("a"), sim.record("b")
    assert b.queued_time >= a.finish_time  # reached the engine only once "a" had left
    assert b.time_to_first_token > a.finish_time - b.arrival_time
    assert not keeper.turned_away
    assert keeper.queued == {"b"}  # what bursts cost: the waiters, counted per class


def test_waiters_time_out_at_their_deadline_and_never_run() -> None:
    sim, keeper = sim_with(AdmissionPolicy(1, 4), 0.05, {"a": "default", "b": "default"})
    sim.submit(arrival=0.0, prompt=64, output_tokens=200, request_id="a")
    sim.submit(arrival=0.01, prompt=64, output_tokens=4, request_id="b")
    sim.run_until_idle()
    b = sim.record("b")
    assert keeper.turned_away == {"b": REASON_QUEUE_TIMEOUT}
    assert b.token_times == () and b.num_output_tokens == 0
    assert sim.core.scheduler.counters.finished  # "b" never reached the scheduler: no trace


def test_a_full_queue_sheds_the_lower_class_and_refuses_its_equals() -> None:
    policy = AdmissionPolicy(1, 1, (ClassLimit("chat", 0), ClassLimit("doc", 10)))
    kinds = {"d0": "doc", "d1": "doc", "d2": "doc", "c1": "chat"}
    sim, keeper = sim_with(policy, 60.0, kinds)
    for i, rid in enumerate(("d0", "d1", "d2", "c1")):
        sim.submit(arrival=0.001 * i, prompt=64, output_tokens=50, request_id=rid,
                   priority=0 if kinds[rid] == "chat" else 10)
    sim.run_until_idle()
    assert keeper.turned_away == {"d2": REASON_QUEUE_FULL, "d1": REASON_SHED}
    assert sim.record("c1").num_output_tokens == 50
    assert sim.record("d0").num_output_tokens == 50  # accepted, never lost


def test_the_gate_refuses_what_it_does_not_hold() -> None:
    sim, _ = sim_with(AdmissionPolicy(4, 4), 60.0, {"a": DEFAULT_CLASS})
    sim.submit(arrival=0.0, prompt=64, output_tokens=4, request_id="a")
    sim.run_until_idle()
    with pytest.raises(ValueError, match="not held"):
        sim.admit("a", 1.0)
    with pytest.raises(ValueError, match="not held"):
        sim.turn_away("a", 1.0)


def test_a_plan_classifies_by_prompt_length_with_each_class_thresholds() -> None:
    plan = ClassPlan.of(SPEC, itl_slo="inter-token-latency", ttft_slo="time-to-first-token",
                        apply=True)
    assert plan.classify(Arrival(0.0, 5000, 10, "doc")).name == "doc"
    assert plan.classify(Arrival(0.0, 500, 10, "doc")).name == "chat"  # the length decides
    assert (plan.targets["doc"].ttft_seconds, plan.targets["chat"].itl_seconds) == (20.0, 0.12)
    assert (plan.priority("doc"), plan.scheduling_policy) == (10, "priority")
    one = ClassPlan.of(SPEC, itl_slo="inter-token-latency", ttft_slo=None, apply=False)
    assert (one.priority("doc"), one.scheduling_policy, one.targets["doc"].ttft_seconds) == (
        0, "fcfs", None)
    assert Limits.service_defaults() == Limits(512, 1024, 60.0)


@pytest.mark.slow
def test_on_overload_classes_keep_the_chats_slo_and_turn_documents_away(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    summaries = {}
    for mode in ("one", "spec"):
        code = main(["--workload", str(REPO / "benchmarks" / "workloads" / "overload.yaml"),
                     "--minutes", "6", "--budgets", "2048", "--seqs", "1024", "--jobs", "1",
                     "--no-plots", "--classes", mode, "--slo", str(REPO / "slo.yaml"),
                     "--deploy", str(REPO / "deploy"), "--out", str(tmp_path / mode)])
        assert code == 0
        out = capsys.readouterr()
        summaries[mode] = json.loads(out.out.strip().splitlines()[-1])["classes"]
        assert "request classes:" in out.err
    one, spec = (summaries[m]["runs"]["default_static"] for m in ("one", "spec"))
    assert summaries["spec"]["classes"]["doc"] == {
        "priority": 10, "max_in_flight": 4, "itl_s": 0.25, "ttft_s": 20.0}
    assert spec["chat"]["served"] == spec["chat"]["requests"]  # no chat turned away
    assert spec["chat"]["attainment"] >= 0.9 > 0.5 > one["chat"]["attainment"]
    assert spec["chat"]["goodput_rps"] > one["chat"]["goodput_rps"]
    assert sum(spec["doc"]["turned_away"].values()) > 0
    assert not math.isnan(spec["doc"]["attainment"])
    # The documents the burst queued, and their first tokens, wait included.
    assert spec["doc"]["queued"] > 0 and spec["doc"]["queued_ttft_p99_s"] > 1.0
    assert spec["chat"]["queued"] == 0


def test_applying_classes_needs_a_spec_that_declares_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (REPO / "slo.yaml").read_text(encoding="utf-8")
    plain = tmp_path / "slo.yaml"
    plain.write_text(text[:text.index("\nclasses:")] + "\n", encoding="utf-8")
    assert main(["--classes", "spec", "--slo", str(plain), "--deploy", str(REPO / "deploy"),
                 "--no-plots", "--out", str(tmp_path)]) == 2
    assert "declares no request classes" in capsys.readouterr().err
