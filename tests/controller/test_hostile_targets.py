"""The controller against hostile targets and their Prometheus (tests/controller/hostile.py):
answers in small pieces, slow, huge, deep, with hostile labels and values. Each test names the
finding of issue 32 it covers (docs/reliability.md, "Red-team findings, turn 4")."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from governor.contracts import causes
from governor.contracts.admission import AdmissionBound, requested
from governor.contracts.batching import MAX_LIMIT
from governor.contracts.metrics import controller as names
from governor.controller.app import _target_status
from governor.controller.model import Limits
from governor.controller.observe import MAX_LABEL_VALUES
from governor.controller.ranks import MAX_RANKS
from governor.controller.state import PersistedTarget, StateStore
from tests.controller.fakes import CEILING, FLOOR
from tests.controller.hostile import CALM, STAGES, HostileFleet, Hostility, Pieces

ServerFactory = Callable[[web.Application], Awaitable[TestServer]]
# A TCP segment's payload on a 1500-byte Ethernet path, a millisecond apart: how a large answer
# reaches the controller across a real network.
SEGMENTS = Pieces(size=1448, delay_seconds=0.001)


def reconciles(stack_registry_metric: Callable[..., float | None], result: str) -> float:
    return stack_registry_metric(names.RECONCILES.name + "_total", result=result) or 0.0


async def test_n1_answers_in_small_pieces_are_read_whole_at_100_targets(
    aiohttp_server: ServerFactory, tmp_path: Path,
) -> None:
    """Every Prometheus and admin answer in 1,448-byte pieces 1 ms apart, 100 targets of eight
    data-parallel ranks: every target is observed and its limits read, as with answers in one
    piece."""
    fleet = HostileFleet(100, pieces=SEGMENTS, ranks=8)
    server = await aiohttp_server(fleet.app())
    async with fleet.controller(server, tmp_path) as stack:
        await stack.reconciler.reconcile_once()
        reconciler = stack.reconciler
        assert reconciler.prometheus_error is None
        assert len(reconciler.targets) == 100
        for name, rt in reconciler.targets.items():
            assert (rt.last_result, rt.last_error) == (names.RESULT_OK, None), name
            assert rt.limits is not None and rt.limits.current == CEILING
            assert rt.observation is not None and rt.observation.itl_tail_seconds == 0.05
            assert rt.observation.rank_itl_tails.keys() == {str(r) for r in range(8)}
            assert rt.observation.stage_seconds.keys() == set(fleet.stages)
        assert reconciles(stack.metric, names.RESULT_OK) == 100
    # The premise: the answers did arrive in many pieces.
    assert max(fleet.sent["prometheus"]) > 10
    assert min(fleet.sent["admin"]) >= 2 and len(fleet.sent["admin"]) == 100


async def test_n1_an_answer_past_its_limit_is_refused_by_name(
    aiohttp_server: ServerFactory, tmp_path: Path,
) -> None:
    fleet = HostileFleet(2, hostile={1: Hostility(body=b" " * (1024 * 1024 + 1) + b"{}")})
    server = await aiohttp_server(fleet.app())
    async with fleet.controller(server, tmp_path) as stack:
        await stack.reconciler.reconcile_once()
        ok, refused = stack.reconciler.targets["t000:8000"], stack.reconciler.targets["t001:8000"]
    assert ok.last_result == names.RESULT_OK
    assert refused.last_result == names.RESULT_PERMANENT_ERROR
    assert refused.last_error == ("GET t001:8000: refused: the answer is larger than 1048576 "
                                  "bytes")


async def test_n12_an_answer_nested_100000_deep_is_a_refused_answer(
    aiohttp_server: ServerFactory, tmp_path: Path,
) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    fleet = HostileFleet(2, hostile={1: Hostility(body=deep)})
    server = await aiohttp_server(fleet.app())
    async with fleet.controller(server, tmp_path) as stack:
        await stack.reconciler.reconcile_once()
        refused = stack.reconciler.targets["t001:8000"]
        assert refused.last_result == names.RESULT_PERMANENT_ERROR
        assert refused.last_error == ("GET t001:8000: refused: the answer is JSON nested too "
                                      "deeply (over 32 levels)")
        assert reconciles(stack.metric, names.RESULT_INTERNAL_ERROR) == 0
        assert stack.reconciler.targets["t000:8000"].last_result == names.RESULT_OK


async def test_n12_a_deep_value_inside_a_report_is_refused_too(
    aiohttp_server: ServerFactory, tmp_path: Path,
) -> None:
    """Deep enough to pass the parser, too deep for an error message that prints it."""
    nested: object = 1
    for _ in range(900):
        nested = [nested]
    report = {**Limits(1, 1).as_dict(), "floor": nested, "ceiling": CEILING.as_dict()}
    fleet = HostileFleet(1, hostile={0: Hostility(body=report)})
    server = await aiohttp_server(fleet.app())
    async with fleet.controller(server, tmp_path) as stack:
        await stack.reconciler.reconcile_once()
        rt = stack.reconciler.targets["t000:8000"]
        assert rt.last_result == names.RESULT_PERMANENT_ERROR
        assert rt.last_error is not None and "nested too deeply" in rt.last_error
        assert reconciles(stack.metric, names.RESULT_INTERNAL_ERROR) == 0


BREACH = {"itl_tail_seconds": 0.3, "itl_tail_long_seconds": 0.3, "itl_spike_seconds": 0.35,
          "itl_good_ratio": 0.9}


async def test_n5_limits_past_the_contracts_bounds_are_neither_used_nor_saved(
    aiohttp_server: ServerFactory, tmp_path: Path,
) -> None:
    """A target reporting 10^30 is refused before the law sees it: nothing is put back, and
    the state file, written for the target the law did retune, loads whole after a restart."""
    huge = {"max_num_seqs": 256, "max_num_batched_tokens": 10**30}
    report = {**huge, "floor": FLOOR.as_dict(), "ceiling": huge}
    fleet = HostileFleet(2, hostile={1: Hostility(body=report)})
    fleet.values.update(BREACH)
    server = await aiohttp_server(fleet.app())
    async with fleet.controller(server, tmp_path) as stack:
        await stack.reconciler.reconcile_once()
        refused = stack.reconciler.targets["t001:8000"]
        assert refused.last_result == names.RESULT_PERMANENT_ERROR
        assert refused.last_error is not None
        assert "integers from 1 to 2147483647" in refused.last_error
    assert [name for name, _ in fleet.puts] == ["t000:8000"]  # the law retuned the other
    saved, aside = restart(tmp_path)
    assert saved["t000:8000"].state.limits == fleet.limits["t000:8000"]
    assert aside == []


def restart(tmp: Path) -> tuple[dict[str, PersistedTarget], list[Path]]:
    """What a restarted controller loads, and the state files it moved aside."""
    return StateStore(tmp / "state.json").load(), list(tmp.glob("state.json.corrupt-*"))


async def test_n6_a_stalling_target_is_cut_off_at_its_deadline_and_the_pass_goes_on(
    aiohttp_server: ServerFactory, tmp_path: Path,
) -> None:
    """One target sends nothing at all: the pass ends at its deadline, the others reconciled.
    Without the deadline the pass would wait for the admin client's own timeout (here two
    minutes, past the test's guard)."""
    fleet = HostileFleet(3, hostile={1: Hostility(stall=True)})
    server = await aiohttp_server(fleet.app())
    async with fleet.controller(server, tmp_path, target_deadline_seconds=2.0) as stack:
        await asyncio.wait_for(stack.reconciler.reconcile_once(), timeout=60.0)
        targets = stack.reconciler.targets
        stalled = targets["t001:8000"]
        assert stalled.last_result == names.RESULT_TEMPORARY_ERROR
        assert stalled.last_error == ("no answer within the pass's deadline for one target "
                                      "(2s, --target-deadline)")
        assert stalled.retry_at > stack.clock.now
        assert targets["t000:8000"].last_result == targets["t002:8000"].last_result == \
            names.RESULT_OK


async def test_n6_a_long_retry_after_is_the_reconcilers_wait_not_the_passs(
    aiohttp_server: ServerFactory, tmp_path: Path,
) -> None:
    """``Retry-After: 1e308`` on a 503: no wait within the call, and the target is left alone
    for the longest backoff, not for 10^308 seconds."""
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    busy = Hostility(status=503, headers={"Retry-After": "1e308"},
                     body={"error": {"message": "engine not ready"}})
    fleet = HostileFleet(2, hostile={1: busy})
    server = await aiohttp_server(fleet.app())
    async with fleet.controller(server, tmp_path, sleep=sleep) as stack:
        await stack.reconciler.reconcile_once()
        rt = stack.reconciler.targets["t001:8000"]
        assert rt.last_result == names.RESULT_TEMPORARY_ERROR
        assert rt.last_error == ("GET t001:8000: HTTP 503: engine not ready (after 1 attempt)")
        max_backoff = stack.reconciler.config.max_backoff_seconds
        assert rt.retry_at == stack.clock.now + max_backoff
    assert waits == []
    assert [call for call in fleet.calls if call[0] == "t001:8000"] == [("t001:8000", "GET")]


async def test_n4_label_values_from_a_target_are_bounded_and_go_when_they_go(
    aiohttp_server: ServerFactory, tmp_path: Path,
) -> None:
    """5,000 stage, cause and rank values on one target: the controller keeps a bounded few
    (the contract's stages among them), its audit line and /status stay small, and once the
    values go, so do their series."""
    many = [f"hostile-{i:05d}" for i in range(5000)]
    fleet = HostileFleet(1, stages=STAGES + tuple(many), causes=causes.NAMES + tuple(many),
                         engines=tuple(str(i) for i in range(5000)))
    fleet.values.update(BREACH)
    server = await aiohttp_server(fleet.app())
    async with fleet.controller(server, tmp_path) as stack:
        await stack.reconciler.reconcile_once()
        rt = stack.reconciler.targets["t000:8000"]
        assert rt.last_result == names.RESULT_OK and rt.observation is not None
        assert set(STAGES) <= rt.observation.stage_seconds.keys()
        assert len(rt.observation.stage_seconds) == MAX_LABEL_VALUES
        assert len(rt.observation.rank_itl_tails) == MAX_RANKS
        assert stack.series(names.OBSERVED.name) <= 30 + MAX_RANKS + 4 * MAX_LABEL_VALUES
        (line,) = stack.audit()
        assert len(json.dumps(line)) < 64 * 1024
        assert len(json.dumps(_target_status(rt))) < 128 * 1024
        fleet.stages, fleet.causes, fleet.engines = STAGES, (), None
        stack.clock.now += 60.0
        await stack.reconciler.reconcile_once()
        quantities = {labels["quantity"] for labels in stack.labels(names.OBSERVED.name)}
        assert quantities == set(rt.observation.as_inputs())
        assert not any("hostile" in quantity for quantity in quantities)


# What a target's Prometheus series may hold that no healthy target sends: no number, either
# infinity, a number past any bound, a negative one, one next to zero.
HOSTILE_VALUES = (math.nan, math.inf, -math.inf, 1e30, -1.0, 1e-300, 1.7e308, -1.7e308, 5e-324)
# What the admin API's contract accepts of the two readings the law keeps and puts back.
ACCEPTED = {"vllm_max_num_queued_tokens": (math.inf,),  # unbounded
            "deadline_slack": ()}  # 1e-300 and 5e-324 too: under the contract's 0.01
# A target the law moves on all three knobs: an inter-token breach behind a deadline gate that
# refuses, in front of a vLLM whose own bound the user set to 65,536 prompt tokens.
ACTING = {**CALM, **BREACH, "deadline_slack": 1.0, "admission_refused_per_second": 5.0,
          "vllm_max_num_queued_tokens": 65536.0}
CALMED = {**CALM, "deadline_slack": 1.0, "admission_refused_per_second": 0.0,
          "vllm_max_num_queued_tokens": 65536.0}
HEALTHY = ("t000:8000", "t001:8000")


@pytest.mark.parametrize("value", HOSTILE_VALUES, ids=repr)
async def test_n5_hostile_sample_values_on_every_series_cost_nothing_but_their_own_target(
    aiohttp_server: ServerFactory, tmp_path: Path, value: float,
) -> None:
    """Issue 32, N5 and the harness: a fleet of two healthy targets, one whose every series
    holds ``value``, and one per series that holds it there alone (the queued-tokens gauge and
    the gate's slack among them), over a pass that moves all three knobs and one that hands
    them back. The controller counts no internal error, puts nothing outside the contract's
    bounds, writes a state that loads whole, names each refused reading in an audit line, and
    serves the healthy targets as it would alone."""
    series = HostileFleet(0).series()
    alone = {name: f"t{3 + i:03d}:8000" for i, name in enumerate(series)}
    fleet = HostileFleet(3 + len(series), values=dict(ACTING), target_values={
        2: dict.fromkeys(series, value),
        **{3 + i: {name: value} for i, name in enumerate(series)}})
    server = await aiohttp_server(fleet.app())
    async with fleet.controller(server, tmp_path) as stack:
        await stack.reconciler.reconcile_once()
        for name in HEALTHY:
            moved = [body for target, body in fleet.admission_puts if target == name]
            assert moved == [{"deadline_slack": moved[0]["deadline_slack"]},
                             {"max_num_queued_tokens": moved[1]["max_num_queued_tokens"]}]
            assert [target for target, _ in fleet.puts].count(name) == 1
        fleet.values = dict(CALMED)
        stack.clock.now += 120.0
        await stack.reconciler.reconcile_once()
        reconciler = stack.reconciler
        assert reconciles(stack.metric, names.RESULT_INTERNAL_ERROR) == 0
        for name in HEALTHY:
            rt = reconciler.targets[name]
            assert (rt.last_result, rt.last_error) == (names.RESULT_OK, None)
            handed_back = [body for target, body in fleet.admission_puts if target == name][2:]
            assert handed_back == [{"deadline_slack": 1.0}, {"max_num_queued_tokens": 65536}]
        states = {name: rt.state for name, rt in reconciler.targets.items()}
        refused: dict[str, set[str]] = {}
        for line in stack.audit():
            refused.setdefault(line["target"], set()).update(line["refused"] or ())
    assert not any(refused.get(name) for name in HEALTHY)
    for name, accepted in ACCEPTED.items():
        assert (name in refused[alone[name]]) == (value not in accepted), name
        assert (name in refused["t002:8000"]) == (value not in accepted), name
    if value == math.inf:  # vLLM's bound unbounded: set while the gate refuses, handed back
        moved = [body for target, body in fleet.admission_puts
                 if target == alone["vllm_max_num_queued_tokens"]]
        assert [list(body) for body in moved] == [["deadline_slack"], ["max_num_queued_tokens"],
                                                  ["deadline_slack"], ["max_num_queued_tokens"]]
        assert moved[3] == {"max_num_queued_tokens": None}
    for name, body in fleet.puts:
        assert all(isinstance(v, int) and 1 <= v <= MAX_LIMIT for v in body.values()), name
    for _, body in fleet.admission_puts:  # what a server accepts: the contract's check
        requested(body, AdmissionBound(1.0, None, vllm_queued_tokens=True))
    saved, aside = restart(tmp_path)
    assert aside == []
    assert {name: target.state for name, target in saved.items()} == states
