"""``--start-limits``: a target without state starts from a recommendation, once, within its
floor and ceiling; the law runs as usual after; a bad value is one clear line at start."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from governor.contracts.metrics import controller as names
from governor.controller.cli import main
from governor.controller.model import Limits, TargetLimits, TargetState
from governor.controller.start_limits import (
    FORMAT,
    LIMITS_KEY,
    MAX_BYTES,
    StartLimits,
    StartLimitsError,
    start,
)
from tests.controller.fakes import CEILING, FLOOR, temporary
from tests.controller.hostile import HostileFleet
from tests.controller.test_reconciler import BREACH, CALM, A, Harness

REPO = Path(__file__).resolve().parents[2]
SLO_YAML = str(REPO / "slo.yaml")
ServerFactory = Callable[[web.Application], Awaitable[TestServer]]
WANTED = Limits(max_num_seqs=256, max_num_batched_tokens=3072)


def recommendation(path: Path, limits: object = None, **extra: object) -> Path:
    """A file as ``governor recommend --json`` writes it (only what the controller reads)."""
    body = {"v": FORMAT, LIMITS_KEY: WANTED.as_dict() if limits is None else limits,
            "workload": "azure-chat-code", "preset": "llama-3-8b@h200", "seed": 1, **extra}
    path.write_text(json.dumps(body))
    return path


# ---- what --start-limits takes ---------------------------------------------------------------

def test_tokens_and_seqs_on_the_command_line() -> None:
    assert StartLimits.parse(" 3072 , 256 ").limits == WANTED


def test_the_file_governor_recommend_writes(tmp_path: Path) -> None:
    parsed = StartLimits.parse(str(recommendation(tmp_path / "rec.json")))
    assert parsed.limits == WANTED
    assert "azure-chat-code" in parsed.source and "llama-3-8b@h200" in parsed.source


@pytest.mark.parametrize(("content", "problem"), [
    (None, "cannot read"),
    (b"{", "not JSON"),
    (b"\xff\xfe", "not JSON"),
    (b"[1, 2]", "not a recommendation"),
    (json.dumps({"v": "other/v1", LIMITS_KEY: WANTED.as_dict()}).encode(),
     "not a recommendation"),
    (json.dumps({"v": FORMAT}).encode(), "'recommended': limits must be an object"),
    (json.dumps({"v": FORMAT, LIMITS_KEY: {"max_num_seqs": 256,
                                           "max_num_batched_tokens": "3072"}}).encode(),
     "integers from 1"),
    (json.dumps({"v": FORMAT, LIMITS_KEY: {"max_num_seqs": 0,
                                           "max_num_batched_tokens": 3072}}).encode(),
     "integers from 1"),
    (b" " * (MAX_BYTES + 1), "larger than"),
], ids=["no such file", "truncated JSON", "not text", "not an object", "another format",
        "no limits", "a limit that is a string", "a zero limit", "a huge file"])
def test_a_bad_file_is_one_located_error(tmp_path: Path, content: bytes | None,
                                         problem: str) -> None:
    path = tmp_path / "rec.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(StartLimitsError, match=r"--start-limits .*rec\.json") as caught:
        StartLimits.parse(str(path))
    assert problem in str(caught.value)


def test_a_pair_past_the_contracts_bounds_is_refused() -> None:
    with pytest.raises(StartLimitsError, match="integers from 1"):
        StartLimits.parse("0,256")
    with pytest.raises(StartLimitsError, match="integers from 1"):
        StartLimits.parse("9999999999,256")


@pytest.mark.parametrize(("argv", "message"), [
    (["--start-limits", "/nonexistent/rec.json"],
     "--start-limits /nonexistent/rec.json: cannot read"),
    (["--start-limits", "3072,0"], "--start-limits '3072,0': both limits"),
], ids=["a missing file", "a zero limit"])
def test_the_controller_refuses_to_start_on_a_bad_value(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str,
) -> None:
    assert main(["--slo", SLO_YAML, *argv, "--allow-unauthenticated-webhook"], env={}) == 2
    err = capsys.readouterr().err
    assert f"governor controller: error: {message}" in err
    assert "Traceback" not in err


# ---- the first pass's decision (pure) --------------------------------------------------------

REPORT = TargetLimits(CEILING, FLOOR, CEILING)


@pytest.mark.parametrize(("wanted", "current", "after", "held"), [
    (WANTED, CEILING, WANTED, ""),
    (Limits(4096, 65536), Limits(64, 2048), CEILING, "held to 8192 by the target's ceiling"),
    (Limits(256, 100), CEILING, Limits(256, 256), "held to 256 by the target's floor"),
], ids=["within the bounds", "above the ceiling", "below the floor"])
def test_the_start_is_clamped_to_the_targets_floor_and_ceiling(
    wanted: Limits, current: Limits, after: Limits, held: str,
) -> None:
    decision = start(StartLimits(wanted, "rec.json"), TargetLimits(current, FLOOR, CEILING),
                     TargetState(), 100.0)
    assert decision is not None and decision.after == after
    assert decision.reason.value == "start_limits"
    assert decision.explanation.startswith("start limits from the recommendation in rec.json")
    assert held in decision.explanation
    assert decision.state == TargetState(limits=after, last_change_at=100.0)


def test_a_target_with_state_is_left_to_the_law() -> None:
    state = TargetState(limits=CEILING, last_change_at=1.0)
    assert start(StartLimits(WANTED, "x"), REPORT, state, 100.0) is None


def test_limits_already_in_force_are_noted_and_not_moved() -> None:
    decision = start(StartLimits(CEILING, "x"), REPORT, TargetState(), 100.0)
    assert decision is not None and not decision.changes
    assert "already in force" in decision.explanation
    assert decision.state != TargetState()  # so the next pass is the law's


# ---- in the reconcile loop -------------------------------------------------------------------

async def test_applied_once_at_start_audited_then_the_law_runs(tmp_path: Path) -> None:
    h = Harness(tmp_path, start_limits=StartLimits(WANTED, "rec.json (azure-chat-code)"))
    h.observer.observations[A.name] = CALM
    await h.reconciler.reconcile_once()
    assert h.actuator.applied == [(A.name, WANTED)]
    (line,) = h.audit()
    assert (line["reason"], line["action"], line["applied"]) == ("start_limits", "tighten", True)
    assert line["before"] == CEILING.as_dict() and line["after"] == WANTED.as_dict()
    assert "start limits from the recommendation in rec.json (azure-chat-code)" in \
        str(line["explanation"])
    assert h.metric(names.DECISIONS.name + "_total", action="tighten",
                    reason="start_limits") == 1
    # Later passes are the law's: a breach after the cooldown is cut from the start limits.
    h.observer.observations[A.name] = BREACH
    for _ in range(12):
        h.clock.now += 10
        await h.reconciler.reconcile_once()
    reasons = [line["reason"] for line in h.audit()]
    assert reasons.count("start_limits") == 1 and "itl_breach" in reasons
    assert h.actuator.applied[1][1].max_num_batched_tokens < WANTED.max_num_batched_tokens


async def test_a_restart_with_state_does_not_start_again(tmp_path: Path) -> None:
    h = Harness(tmp_path, start_limits=StartLimits(WANTED, "rec.json"))
    h.observer.observations[A.name] = CALM
    await h.reconciler.reconcile_once()
    h.actuator.limits[A.name] = Limits(128, 2048)  # the law's (or an operator's) since
    h.clock.now += 60
    restarted = h.build()  # a new process on the same state file
    await restarted.reconcile_once()
    assert [line["reason"] for line in h.audit()].count("start_limits") == 1
    assert restarted.targets[A.name].last_decision["reason"] != "start_limits"  # type: ignore[index]
    assert WANTED not in [limits for _, limits in h.actuator.applied[1:]]


async def test_a_state_file_from_before_wins_over_the_start_limits(tmp_path: Path) -> None:
    before = Harness(tmp_path)
    await before.reconciler.reconcile_once()  # the law cuts on the breach: state is written
    cut = before.actuator.applied[-1][1]
    h = Harness(tmp_path, start_limits=StartLimits(WANTED, "rec.json"))
    h.actuator = before.actuator
    h.reconciler = h.build()
    await h.reconciler.reconcile_once()
    assert [limits for _, limits in h.actuator.applied] == [cut]


async def test_a_failed_start_is_retried_on_the_next_pass(tmp_path: Path) -> None:
    h = Harness(tmp_path, start_limits=StartLimits(WANTED, "rec.json"))
    h.observer.observations[A.name] = CALM
    h.actuator.errors.append(temporary())
    await h.reconciler.reconcile_once()
    assert h.actuator.applied == []
    h.clock.now += 60
    await h.reconciler.reconcile_once()
    assert h.actuator.applied == [(A.name, WANTED)]


async def test_a_dry_run_says_what_it_would_start_from_once(tmp_path: Path) -> None:
    h = Harness(tmp_path, dry_run=True, start_limits=StartLimits(WANTED, "rec.json"))
    h.observer.observations[A.name] = CALM
    for _ in range(3):
        await h.reconciler.reconcile_once()
        h.clock.now += 10
    assert h.actuator.applied == []
    lines = [line for line in h.audit() if line["reason"] == "start_limits"]
    assert len(lines) == 1 and lines[0]["applied"] is False


async def test_the_admin_api_of_real_targets_is_sent_the_start_once_each(
    aiohttp_server: ServerFactory, tmp_path: Path,
) -> None:
    """Through the real admin client, over HTTP, on the hostile harness's well-behaved
    targets: one PUT of both limits each at the first pass, none at the second."""
    fleet = HostileFleet(3)
    server = await aiohttp_server(fleet.app())
    wanted = StartLimits(Limits(max_num_seqs=4096, max_num_batched_tokens=3072), "rec.json")
    async with fleet.controller(server, tmp_path, start_limits=wanted) as stack:
        await stack.reconciler.reconcile_once()
        stack.clock.now += 10
        await stack.reconciler.reconcile_once()
        starts = [line for line in stack.audit() if line["reason"] == "start_limits"]
    clamped = Limits(max_num_seqs=CEILING.max_num_seqs, max_num_batched_tokens=3072)
    assert sorted(fleet.puts) == [(name, clamped.as_dict()) for name in fleet.names()]
    assert all(fleet.limits[name] == clamped for name in fleet.names())
    assert len(starts) == 3 and all("held to 1024 by the target's ceiling" in line[
        "explanation"] for line in starts)


def test_the_start_up_log_says_what_targets_start_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("governor.controller.cli.web.run_app", lambda *a, **k: None)
    path = recommendation(tmp_path / "rec.json")
    assert main(["--slo", SLO_YAML, "--start-limits", str(path),
                 "--allow-unauthenticated-webhook"], env={}) == 0
    assert ("a target without state starts at max_num_batched_tokens 3072, max_num_seqs 256 "
            f"(within its floor and ceiling), from {path} (workload azure-chat-code") in \
        capsys.readouterr().err
