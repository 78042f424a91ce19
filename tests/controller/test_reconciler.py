"""The reconcile loop on a fake clock with a fake Prometheus and a fake admin API."""

from __future__ import annotations

import asyncio
import errno
import json
import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from governor.contracts.metrics import controller as names
from governor.controller.audit import AuditLog
from governor.controller.config import ControllerConfig
from governor.controller.intake import AlertBook, parse_webhook
from governor.controller.metrics import ControllerMetrics
from governor.controller.model import (
    Decision,
    Limits,
    Observation,
    SloTargets,
    Target,
    TargetLimits,
)
from governor.controller.queries import QuerySet
from governor.controller.reconciler import MAX_NOTED, MAX_WAKING_ALERTS, Reconciler
from governor.controller.state import StateStore
from tests.controller.fakes import (
    CEILING,
    FLOOR,
    FakeActuator,
    FakeClock,
    FakeObserver,
    permanent,
    temporary,
)

SLO = SloTargets(0.12, 0.99, 1.0, 0.99)
BREACH = Observation(itl_tail_seconds=0.21, itl_median_seconds=0.006, itl_tail_long_seconds=0.2,
                     ttft_tail_seconds=0.3, prompt_tokens_per_second=14000.0,
                     requests_running=64.0)
CALM = replace(BREACH, itl_tail_seconds=0.01, itl_tail_long_seconds=0.01)
A = Target("a:8000", "http://a:8000")


class Recorder:
    def __init__(self) -> None:
        self.annotations: list[tuple[str, Decision]] = []

    async def annotate(self, target: str, decision: Decision, at: float) -> bool:
        self.annotations.append((target, decision))
        return True


class Harness:
    def __init__(self, tmp: Path, *, dry_run: bool = False, discover: str | None = None,
                 **config: Any) -> None:
        self.tmp = tmp
        self.clock = FakeClock()
        self.observer = FakeObserver({A.name: BREACH})
        self.actuator = FakeActuator()
        self.book = AlertBook()
        self.annotator = Recorder()
        self.registry = CollectorRegistry()
        self.config = ControllerConfig(
            slo=SLO, queries=QuerySet.default(), static_targets=(A,),
            discover=None if discover is None else re.compile(discover),
            dry_run=dry_run, state_path=tmp / "state.json", audit_path=tmp / "audit.jsonl",
            **config)
        self.reconciler = self.build()

    def build(self) -> Reconciler:
        """A controller process; each build is a fresh process with its own metrics."""
        self.registry = CollectorRegistry()
        return Reconciler(self.config, self.observer, self.actuator,
                          StateStore(self.config.state_path), AuditLog(self.config.audit_path),
                          ControllerMetrics(self.registry), self.book, annotator=self.annotator,
                          clock=self.clock)

    def audit(self) -> list[dict[str, object]]:
        path = self.tmp / "audit.jsonl"
        return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []

    def metric(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, labels)


async def test_a_breach_is_applied_recorded_persisted_and_annotated(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    await h.reconciler.reconcile_once()
    ((name, limits),) = h.actuator.applied
    assert name == A.name
    assert limits.max_num_batched_tokens < CEILING.max_num_batched_tokens
    (line,) = h.audit()
    assert (line["action"], line["reason"], line["applied"]) == ("tighten", "itl_breach", True)
    assert h.metric(names.DECISIONS.name + "_total", action="tighten", reason="itl_breach") == 1
    assert h.metric(names.TARGET_LIMITS.name, target=A.name,
                    param="max_num_batched_tokens") == limits.max_num_batched_tokens
    # The range the admin route allows, as read: what a board of stock vLLM draws around it.
    assert h.metric(names.TARGET_CEILING.name, target=A.name,
                    param="max_num_batched_tokens") == CEILING.max_num_batched_tokens
    assert h.metric(names.TARGET_FLOOR.name, target=A.name,
                    param="max_num_seqs") == FLOOR.max_num_seqs
    assert h.metric(names.RECONCILES.name + "_total", result="ok") == 1
    # Not overloaded: the scale-out signal says one replica, under its reason.
    assert h.metric(names.DESIRED_REPLICAS.name, target=A.name,
                    reason=names.SCALE_NOT_OVERLOADED) == 1
    assert [t for t, _ in h.annotator.annotations] == [A.name]
    saved = json.loads((tmp_path / "state.json").read_text())
    assert saved["targets"][A.name]["state"]["probe"]["kind"] == "tighten"


async def test_a_restart_remembers_the_cooldown_and_does_not_act_again(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    await h.reconciler.reconcile_once()
    h.clock.now += 5
    restarted = h.build()  # a new process reading the same state file
    await restarted.reconcile_once()
    assert len(h.actuator.applied) == 1
    assert restarted.targets[A.name].last_decision["reason"] == "cooldown"  # type: ignore[index]


async def test_identical_holds_are_audited_once(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.observer.observations[A.name] = CALM
    for _ in range(3):
        await h.reconciler.reconcile_once()
        h.clock.now += 10
    assert [line["reason"] for line in h.audit()] == ["at_ceiling"]
    assert h.metric(names.DECISIONS.name + "_total", action="hold", reason="at_ceiling") == 3
    assert h.annotator.annotations == []


async def test_dry_run_decides_and_logs_but_never_applies(tmp_path: Path) -> None:
    h = Harness(tmp_path, dry_run=True)
    await h.reconciler.reconcile_once()
    h.clock.now += 5
    await h.reconciler.reconcile_once()
    assert h.actuator.applied == []
    lines = h.audit()
    assert (lines[0]["action"], lines[0]["applied"], lines[0]["dry_run"]) == ("tighten", False,
                                                                              True)
    assert lines[1]["reason"] == "cooldown"
    assert h.metric(names.DRY_RUN.name) == 1


async def test_a_temporary_error_backs_off_then_retries(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.actuator.errors = [temporary(), temporary()]
    await h.reconciler.reconcile_once()
    runtime = h.reconciler.targets[A.name]
    assert (runtime.last_result, runtime.retry_at) == ("temporary_error", h.clock.now + 10)
    await h.reconciler.reconcile_once()  # backing off: skipped without calling the target
    assert h.actuator.reads == 1
    assert h.metric(names.RECONCILES.name + "_total", result="skipped") == 1
    h.clock.now += 10
    await h.reconciler.reconcile_once()  # second failure doubles the backoff
    assert runtime.retry_at == h.clock.now + 20
    h.clock.now += 20
    await h.reconciler.reconcile_once()
    assert runtime.last_result == "ok"
    assert len(h.actuator.applied) == 1


async def test_a_permanent_error_waits_long_before_trying_again(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.actuator.errors = [permanent()]
    await h.reconciler.reconcile_once()
    runtime = h.reconciler.targets[A.name]
    assert runtime.last_result == "permanent_error"
    assert runtime.retry_at == h.clock.now + h.config.permanent_retry_seconds
    assert "cannot retune live" in (runtime.last_error or "")


async def test_prometheus_down_holds_everything_and_says_so(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.observer.error = "connection refused"
    await h.reconciler.reconcile_once()
    assert h.actuator.reads == 0
    assert h.actuator.applied == []
    assert h.reconciler.prometheus_error == "connection refused"
    assert h.metric(names.RECONCILES.name + "_total", result="temporary_error") == 1


async def test_missing_observations_for_a_target_hold(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.observer.observations = {}
    await h.reconciler.reconcile_once()
    assert h.actuator.applied == []
    assert h.reconciler.targets[A.name].last_decision["reason"] == "missing_data"  # type: ignore[index]


async def test_discovered_instances_are_managed_and_unknown_alert_instances_are_not(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path, discover=".*")
    h.observer.scraped = {"b:8000"}
    h.observer.observations["b:8000"] = BREACH
    h.observer.observations["evil:1"] = BREACH
    payload = parse_webhook(json.dumps({"version": "4", "status": "firing", "alerts": [
        {"status": "firing", "fingerprint": "f", "startsAt": "x",
         "labels": {"instance": "evil:1"}}]}).encode())
    h.book.record(payload, 0.0)
    await h.reconciler.reconcile_once()
    assert sorted(name for name, _ in h.actuator.applied) == ["a:8000", "b:8000"]
    assert h.reconciler.targets["b:8000"].target.url == "http://b:8000"
    assert "evil:1" not in h.reconciler.targets


async def _next_pass(reconciler: Reconciler) -> None:
    """Until the loop has finished a pass after this call (each sets ``last_pass_at``; the
    fake clock moves between them)."""
    before = reconciler.last_pass_at
    for _ in range(300):
        if reconciler.last_pass_at != before:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("no pass")


def _woken_only(tmp_path: Path) -> tuple[Harness, Reconciler]:
    """A loop whose periodic check is an hour away, on a calm target: past its first pass, only
    a wake-up starts one."""
    h = Harness(tmp_path)
    h.config = replace(h.config, resync_seconds=3600.0)
    reconciler = h.build()
    h.observer.observations[A.name] = CALM
    return h, reconciler


async def test_the_loop_runs_on_wake_and_on_resync(tmp_path: Path) -> None:
    h, reconciler = _woken_only(tmp_path)
    task = asyncio.create_task(reconciler.run())
    try:
        await _next_pass(reconciler)
        reads = h.actuator.reads
        reconciler.wake()
        for _ in range(100):
            if h.actuator.reads > reads:
                break
            await asyncio.sleep(0.01)
        assert h.actuator.reads == reads + 1
    finally:
        task.cancel()


async def test_with_alertmanager_silent_the_resync_still_finds_and_fixes_a_breach(
    tmp_path: Path,
) -> None:
    """Alertmanager down: no notification ever wakes the loop, and no alert is firing. The
    loop passes on its timer anyway and acts on what Prometheus shows."""
    h = Harness(tmp_path)
    h.config = replace(h.config, resync_seconds=0.01)
    reconciler = h.build()
    passes = names.RECONCILE_DURATION.name + "_count"
    task = asyncio.create_task(reconciler.run())
    try:
        for _ in range(200):
            if (h.metric(passes) or 0) >= 3:
                break
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
    assert (h.metric(passes) or 0) >= 3
    assert [name for name, _ in h.actuator.applied] == [A.name]
    assert h.book.firing() == []


async def test_each_audit_line_records_what_started_its_pass(tmp_path: Path) -> None:
    """The first pass at start, then a wake-up from the webhook for an alert (named), then the
    periodic check: each decision's audit line and /status's last decision say which."""
    h, reconciler = _woken_only(tmp_path)
    task = asyncio.create_task(reconciler.run())
    try:
        await _next_pass(reconciler)
        h.observer.observations[A.name] = BREACH
        h.clock.now += 1
        reconciler.wake(["InterTokenLatencyP99High"])
        await _next_pass(reconciler)
    finally:
        task.cancel()
    h.clock.now += 1
    await reconciler.reconcile_once()  # what the loop runs after --resync without a wake-up
    hold, cut, periodic = h.audit()
    assert (hold["reason"], hold["woken_by"]) == ("at_ceiling", {"by": "start"})
    assert (cut["reason"], cut["applied"]) == ("itl_breach", True)
    assert cut["woken_by"] == {"by": "alert", "alerts": ["InterTokenLatencyP99High"]}
    assert periodic["woken_by"] == {"by": "periodic"}
    assert reconciler.targets[A.name].last_decision["woken_by"] == {"by": "periodic"}  # type: ignore[index]


async def test_the_alerts_a_pass_was_woken_for_are_bounded(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.reconciler.wake(f"Alert{i:03}" for i in range(1000))
    h.reconciler.wake(["InterTokenLatencyP99High"])
    await h.reconciler.reconcile_once()
    woken = h.reconciler.woken_by
    assert woken is not None and woken["by"] == "alert"
    assert len(woken["alerts"]) == MAX_WAKING_ALERTS
    await h.reconciler.reconcile_once()  # nothing woke this one: the names went with the last
    assert h.reconciler.woken_by == {"by": "periodic"}


async def test_limits_are_read_from_the_target_every_pass(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.actuator.limits[A.name] = Limits(100, 4096)  # set by someone else
    h.observer.observations[A.name] = replace(CALM, itl_tail_seconds=0.11)  # inside the margin
    await h.reconciler.reconcile_once()
    assert h.metric(names.TARGET_LIMITS.name, target=A.name, param="max_num_seqs") == 100
    assert h.metric(names.TARGET_LIMITS.name, target=A.name, param="max_num_batched_tokens") == 4096
    assert h.actuator.applied == []


async def test_without_discovery_a_scraped_instance_never_gets_the_token(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.observer.scraped = {"b:8000"}
    h.observer.observations["b:8000"] = BREACH
    await h.reconciler.reconcile_once()
    assert [name for name, _ in h.actuator.applied] == ["a:8000"]


async def test_discovery_manages_only_instances_its_pattern_allows(tmp_path: Path) -> None:
    h = Harness(tmp_path, discover=r"inference-\d+:8000")
    h.observer.scraped = {"inference-1:8000", "intruder:8000", "inference-2:8000/x"}
    for name in h.observer.scraped:
        h.observer.observations[name] = BREACH
    await h.reconciler.reconcile_once()
    assert sorted(name for name, _ in h.actuator.applied) == ["a:8000", "inference-1:8000"]


async def test_the_managed_set_is_bounded_and_vanished_targets_are_forgotten(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path, discover=".*", max_targets=3, forget_after_seconds=60.0)
    h.observer.scraped = {f"n{i}:8000" for i in range(50)}
    await h.reconciler.reconcile_once()
    assert len(h.reconciler.targets) == 3  # a:8000 and the first two discovered
    assert _series_targets(h.registry) == set(h.reconciler.targets)
    h.observer.scraped = set()
    h.clock.now += 61.0
    await h.reconciler.reconcile_once()
    await h.reconciler.reconcile_once()
    assert sorted(h.reconciler.targets) == ["a:8000"]
    # N4: a forgotten target's series go with it.
    assert _series_targets(h.registry) == {"a:8000"}


def _series_targets(registry: CollectorRegistry) -> set[str]:
    """The targets any of the controller's per-target series names."""
    return {sample.labels["target"] for family in registry.collect()
            for sample in family.samples if "target" in sample.labels}


async def test_hostile_alert_labels_cannot_grow_the_controllers_memory(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    alerts = [{"status": "firing", "fingerprint": f"f{i}", "startsAt": "x",
               "labels": {"instance": f"evil-{i}:1"}} for i in range(1000)]
    for start in range(0, 1000, 500):
        h.book.record(parse_webhook(json.dumps({"version": "4", "status": "firing",
                                                "alerts": alerts[start:start + 500]}).encode()),
                      0.0)
        await h.reconciler.reconcile_once()
    assert sorted(h.reconciler.targets) == ["a:8000"]
    assert len(h.reconciler._ignored_instances) <= MAX_NOTED


async def test_a_full_disk_costs_the_state_file_not_the_decisions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    h = Harness(tmp_path)

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("governor.controller.state.os.fsync", no_space)
    await h.reconciler.reconcile_once()
    assert h.actuator.applied, "the breach is acted on whatever the disk says"
    assert "No space left on device" in (h.reconciler.state_error or "")
    assert not (tmp_path / "state.json").exists()
    debris = await asyncio.to_thread(lambda: list(tmp_path.glob(".state.json.*")))
    assert debris == []  # no temporary file left behind
    assert h.metric(names.STATE_WRITE_ERRORS.name + "_total") == 1
    errors = [r for r in caplog.records if "cannot write the controller's state" in r.message]
    assert len(errors) == 1
    # Still full on later passes: counted, not logged again.
    for _ in range(3):
        h.clock.now += h.config.law.cooldown_seconds + 1
        await h.reconciler.reconcile_once()
    assert len([r for r in caplog.records
                if "cannot write the controller's state" in r.message]) == 1
    # Space again: the next pass that changes the state writes it, and says so.
    monkeypatch.undo()
    written = False
    for _ in range(10):
        h.clock.now += h.config.law.cooldown_seconds + 1
        await h.reconciler.reconcile_once()
        if (tmp_path / "state.json").exists():
            written = True
            break
    assert written and h.reconciler.state_error is None


class BrokenFor(FakeActuator):
    """An admin API whose reads fail, for one target, with an error no client expects."""

    def __init__(self, broken: str) -> None:
        super().__init__()
        self.broken = broken

    async def read(self, target: Target) -> TargetLimits:
        if target.name == self.broken:
            raise KeyError("max_num_seqs")
        return await super().read(target)


async def test_one_target_failing_costs_that_target_not_the_pass(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    h = Harness(tmp_path, discover=".*")
    h.actuator = BrokenFor("b:8000")
    h.reconciler = h.build()
    h.observer.scraped = {"b:8000"}
    h.observer.observations["b:8000"] = BREACH
    await h.reconciler.reconcile_once()
    assert [name for name, _ in h.actuator.applied] == [A.name]
    saved = json.loads((tmp_path / "state.json").read_text())["targets"]
    assert saved[A.name]["state"]["probe"]["kind"] == "tighten"  # A's change is remembered
    assert h.reconciler.last_pass_at == h.clock.now
    broken = h.reconciler.targets["b:8000"]
    assert (broken.last_result, broken.last_error) == (
        names.RESULT_INTERNAL_ERROR, "internal error: KeyError: 'max_num_seqs'")
    assert broken.retry_at == h.clock.now + h.config.resync_seconds
    assert h.metric(names.RECONCILES.name + "_total", result=names.RESULT_INTERNAL_ERROR) == 1
    assert h.metric(names.RECONCILES.name + "_total", result=names.RESULT_OK) == 1
    assert "target b:8000: reconcile failed" in caplog.text
    h.clock.now += h.config.resync_seconds
    await h.reconciler.reconcile_once()  # retried, and the same failure is not logged again
    assert caplog.text.count("target b:8000: reconcile failed") == 1
    assert broken.retry_at == h.clock.now + 2 * h.config.resync_seconds


async def test_a_change_applied_before_a_failure_is_still_saved(tmp_path: Path) -> None:
    h = Harness(tmp_path)

    class BrokenAnnotator:
        async def annotate(self, target: str, decision: Decision, at: float) -> bool:
            raise RuntimeError("grafana client bug")

    h.annotator = BrokenAnnotator()  # type: ignore[assignment]
    h.reconciler = h.build()
    await h.reconciler.reconcile_once()
    assert len(h.actuator.applied) == 1
    h.clock.now += 5
    restarted = h.build()  # the state on disk holds the change: no second cut in its cooldown
    await restarted.reconcile_once()
    assert len(h.actuator.applied) == 1
    assert restarted.targets[A.name].last_decision["reason"] == "cooldown"  # type: ignore[index]


async def test_an_alert_alertmanager_stops_sending_expires_from_the_book(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.book.expire_after_seconds = 900.0
    h.book.record(parse_webhook(json.dumps({"version": "4", "status": "firing", "alerts": [
        {"status": "firing", "fingerprint": "f", "startsAt": "x",
         "labels": {"instance": A.name}}]}).encode()), h.clock.now)
    await h.reconciler.reconcile_once()
    assert h.metric(names.ALERTS_FIRING.name) == 1
    h.clock.now += 901.0  # no renewal, no "resolved": the notification was lost
    await h.reconciler.reconcile_once()
    assert h.metric(names.ALERTS_FIRING.name) == 0
    assert h.book.firing() == []


async def test_a_target_failing_for_days_keeps_retrying_at_the_longest_backoff(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path)
    await h.reconciler.reconcile_once()
    runtime = h.reconciler.targets[A.name]
    runtime.failures = 5000  # two-minute retries for a week
    h.clock.now += h.config.law.cooldown_seconds
    h.actuator.errors = [temporary()]
    await h.reconciler.reconcile_once()
    assert (runtime.last_result, runtime.retry_at) == (
        names.RESULT_TEMPORARY_ERROR, h.clock.now + h.config.max_backoff_seconds)


GATED = replace(BREACH, itl_median_seconds=0.08, deadline_slack=1.0,
                admission_refused_per_second=3.0)


class RefusingActuator(FakeActuator):
    """An admin API whose /admin/admission is absent (a server without the gate's route)."""

    async def set_slack(self, target: Target, slack: float) -> float:
        raise permanent("PUT a:8000: HTTP 404: Not Found")


async def test_a_budget_cut_behind_a_refusing_gate_moves_the_slack_and_audits_it(
        tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.observer.observations[A.name] = GATED
    await h.reconciler.reconcile_once()
    ((_, limits),) = h.actuator.applied
    ((name, slack),) = h.actuator.slacks
    assert name == A.name and 0.2 <= slack < 1.0
    (line,) = h.audit()
    admission = line["admission"]
    assert isinstance(admission, dict)
    assert (admission["deadline_slack_before"], admission["deadline_slack_after"],
            admission["applied"], admission["error"]) == (1.0, slack, True, None)
    assert f"to {limits.max_num_batched_tokens}" in str(admission["explanation"])
    assert h.reconciler.targets[A.name].state.slack_from == 1.0


async def test_a_slack_the_target_refuses_is_audited_and_forgotten_and_a_dry_run_moves_none(
        tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.actuator = RefusingActuator()
    h.reconciler = h.build()
    h.observer.observations[A.name] = GATED
    await h.reconciler.reconcile_once()
    assert len(h.actuator.applied) == 1  # the budget cut stands
    (line,) = h.audit()
    admission = line["admission"]
    assert isinstance(admission, dict)
    assert (admission["applied"], admission["error"]) == (False, "PUT a:8000: HTTP 404: Not Found")
    assert h.reconciler.targets[A.name].state.slack_from is None  # decided again next pass
    dry = Harness(tmp_path / "dry", dry_run=True)
    dry.observer.observations[A.name] = GATED
    await dry.reconciler.reconcile_once()
    assert dry.actuator.slacks == [] and dry.actuator.applied == []
    assert dry.reconciler.targets[A.name].state.slack_from is None


class OldVllmActuator(FakeActuator):
    """A gate in front of a vLLM that has no max_num_queued_tokens (the route answers 422)."""

    async def set_queued_tokens(self, target: Target, bound: int | None) -> int | None:
        raise permanent("PUT a:8000: HTTP 422: 'max_num_queued_tokens' cannot be moved here")


async def test_behind_a_refusing_gate_vllms_bound_is_set_audited_and_remembered(
        tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.observer.observations[A.name] = replace(GATED, vllm_max_num_queued_tokens=math.inf)
    await h.reconciler.reconcile_once()
    ((name, bound),) = h.actuator.queued_tokens
    assert name == A.name and bound is not None and bound > 0
    (line,) = h.audit()
    moved = line["vllm_queued_tokens"]
    assert isinstance(moved, dict)
    assert (moved["max_num_queued_tokens_before"], moved["max_num_queued_tokens_after"],
            moved["applied"], moved["error"]) == (None, bound, True, None)
    state = h.reconciler.targets[A.name].state
    assert (state.queued_tokens_held, state.queued_tokens_from) == (True, None)


async def test_a_bound_the_target_refuses_is_audited_and_forgotten_and_a_dry_run_sets_none(
        tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.actuator = OldVllmActuator()
    h.reconciler = h.build()
    h.observer.observations[A.name] = replace(GATED, vllm_max_num_queued_tokens=math.inf)
    await h.reconciler.reconcile_once()
    (line,) = h.audit()
    moved = line["vllm_queued_tokens"]
    assert isinstance(moved, dict) and moved["applied"] is False
    assert "cannot be moved here" in str(moved["error"])
    assert not h.reconciler.targets[A.name].state.queued_tokens_held  # decided again next pass
    dry = Harness(tmp_path / "dry", dry_run=True)
    dry.observer.observations[A.name] = replace(GATED, vllm_max_num_queued_tokens=math.inf)
    await dry.reconciler.reconcile_once()
    assert dry.actuator.queued_tokens == []
    assert not dry.reconciler.targets[A.name].state.queued_tokens_held


async def test_a_refused_reading_is_audited_when_it_comes_and_goes_and_costs_no_memory(
        tmp_path: Path) -> None:
    """Issue 32, N5: vLLM's bound reported as 10^30 while the law holds it set: a line names
    the refused reading once (not at every pass), nothing is put, the bound to hand back is
    kept; once a bound in range is reported again it is handed back, in a line without it."""
    h = Harness(tmp_path)
    h.observer.observations[A.name] = replace(GATED, vllm_max_num_queued_tokens=math.inf)
    await h.reconciler.reconcile_once()
    assert h.reconciler.targets[A.name].state.queued_tokens_held
    why = "1e+30 is not a whole number from 1 to 1000000000000, or +Inf (unbounded)"
    calm = replace(GATED, itl_tail_seconds=0.09, itl_tail_long_seconds=0.09,
                   admission_refused_per_second=0.0)
    h.observer.observations[A.name] = replace(
        calm, vllm_max_num_queued_tokens=None, refused={"vllm_max_num_queued_tokens": why})
    for _ in range(3):
        h.clock.now += 10.0
        await h.reconciler.reconcile_once()
    assert len(h.actuator.queued_tokens) == 1  # the first pass's, nothing since
    state = h.reconciler.targets[A.name].state
    assert (state.queued_tokens_held, state.queued_tokens_from) == (True, None)
    refused = [line["refused"] for line in h.audit() if line["refused"] is not None]
    assert refused == [{"vllm_max_num_queued_tokens": why}]
    h.observer.observations[A.name] = replace(calm, vllm_max_num_queued_tokens=9000.0)
    h.clock.now += 10.0
    await h.reconciler.reconcile_once()
    assert h.actuator.queued_tokens[-1] == (A.name, None)  # handed back: unbounded
    last = h.audit()[-1]
    assert last["refused"] is None and last["vllm_queued_tokens"] is not None
