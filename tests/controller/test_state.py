"""Persisted per-target state: round trip, atomic replacement, a corrupt file moved aside."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from governor.controller.model import (
    Avoid,
    ChangeKind,
    Limits,
    LimitsScore,
    Param,
    Probe,
    TargetState,
)
from governor.controller.state import PersistedTarget, StateError, StateStore, decode, encode

FULL = TargetState(
    limits=Limits(64, 2048), last_change_at=100.0, last_breach_at=90.0,
    probe=Probe(ChangeKind.TIGHTEN, Param.MAX_NUM_BATCHED_TOKENS, Limits(64, 8192),
                Limits(64, 2048), 100.0, 0.21, None, 0.4, 0.9, 12.0, 14000.0),
    avoid=(Avoid(Param.MAX_NUM_BATCHED_TOKENS, 4096, 8192, 1900.0, 14000.0),),
    prefill_seconds_per_token=2.5e-5,
    ledger=(LimitsScore(Limits(64, 8192), 3.5, 0.4, 8.75, 95.0, 3),),
    queue_growing_since=80.0,
    overload_since=90.0,
    drain_from=2048,
    queued_tokens_held=True,
    queued_tokens_from=32768,
)

# A state file as the controller wrote it before it remembered goodput (same version).
OLD_FILE = {"version": 1, "targets": {"a:8000": {"url": "http://a:8000", "state": {
    "limits": {"max_num_seqs": 64, "max_num_batched_tokens": 2048}, "last_change_at": 100.0,
    "last_breach_at": 90.0,
    "probe": {"kind": "tighten", "param": "max_num_batched_tokens",
              "before": {"max_num_seqs": 64, "max_num_batched_tokens": 8192},
              "after": {"max_num_seqs": 64, "max_num_batched_tokens": 2048}, "at": 100.0,
              "itl_tail_before": 0.21, "ttft_tail_before": None},
    "avoid": [], "prefill_seconds_per_token": 2.5e-5}}}}


def test_every_field_survives_a_round_trip_through_disk(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state.json")
    targets = {"a:8000": PersistedTarget("http://a:8000", FULL),
               "b:8000": PersistedTarget("https://b:8000", TargetState())}
    store.save(targets)
    assert StateStore(tmp_path / "state.json").load() == targets


def test_saving_replaces_the_file_whole_and_leaves_no_temporary_files(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state.json")
    for i in range(5):
        store.save({"a": PersistedTarget("http://a", TargetState(last_change_at=float(i)))})
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]
    assert store.load()["a"].state.last_change_at == 4.0


@pytest.mark.parametrize(
    "content",
    [b"{", b"[]", b'{"version": 99, "targets": {}}',
     json.dumps({"version": 1, "targets": {"a": {"url": "x", "state": {"limits": "y"}}}}).encode()],
    ids=["truncated", "a list", "future version", "wrong field type"],
)
def test_an_unreadable_file_is_moved_aside_and_the_controller_starts_afresh(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(content)
    store = StateStore(path, clock=lambda: 1234.0)
    assert store.load() == {}
    assert not path.exists()
    assert (tmp_path / "state.json.corrupt-1234").read_bytes() == content


NOW = 1_000_000.0


def _with(change: dict[str, Any]) -> bytes:
    """A state file the controller wrote at ``NOW``, with ``change`` applied to target a's
    state (a key path joined by dots → value)."""
    data = encode({"a:8000": PersistedTarget("http://a:8000", FULL)})
    for path, value in change.items():
        *parents, last = path.split(".")
        node: Any = data["targets"]["a:8000"]
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[last] = value
    return json.dumps(data, allow_nan=True).encode()


DEEP = b'{"version": 1, "targets": {"a:8000": {"url": "u", "state": ' + b"[" * 5000 + \
    b"]" * 5000 + b"}}}"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (_with({"state": None}), "targets['a:8000'].state: must be an object, got null"),
        (_with({"state": "x"}), "targets['a:8000'].state: must be an object, got a string"),
        (_with({"state.limits.max_num_seqs": 1e400}),
         "state.limits.max_num_seqs: must be an integer from 1 to 2147483647, got inf"),
        (_with({"state.limits.max_num_seqs": 10**400}), "got an integer too large"),
        (_with({"state.limits.max_num_batched_tokens": 0}), "got 0"),
        (_with({"state.limits.max_num_seqs": True}), "got True"),
        (_with({"state.limits.max_num_seqs": 64.5}), "got 64.5"),
        (DEEP, "nested too deeply"),
        (_with({"state.last_change_at": math.nan}),
         "state.last_change_at: must be a finite number, got nan"),
        (_with({"state.last_change_at": 1e18}),
         "state.last_change_at: 1e+18 is not a moment up to now"),
        (_with({"state.last_breach_at": NOW + 3600}), "state.last_breach_at"),
        (_with({"state.probe.at": NOW + 3600}), "state.probe.at"),
        (_with({"state.ledger.0.at": -1.0}), "state.ledger[0].at"),
        (_with({"state.overload_since": 1e18}), "state.overload_since"),
        (_with({"state.avoid.0.until": 1e18}), "lies further ahead than an avoided range lasts"),
        (_with({"state.probe.kind": "sideways"}),
         "state.probe.kind: must be one of tighten, relax, undo, got a string"),
        (_with({"state.ledger": [{}] * 2000}), "state.ledger: must be a list of at most 1000"),
        (_with({"url": None}), "targets['a:8000'].url: must be a URL"),
        (_with({"state.ledger.0.samples": "3"}), "state.ledger[0].samples"),
        (_with({"state.drain_from": 0}),
         "state.drain_from: must be an integer from 1 to 2147483647, got 0"),
        (_with({"state.queued_tokens_from": -1}),
         "state.queued_tokens_from: must be an integer from 1 to 1000000000000, got -1"),
        (_with({"state.queued_tokens_held": "yes"}),
         "state.queued_tokens_held: must be true or false, got a string"),
        (b"\xff\xfe\x00garbage", "Expecting value"),
        (b" " * (65 * 2**20), "larger than 67108864 bytes"),
    ],
    ids=["a null state", "a string state", "an infinite limit", "a limit of 400 digits",
         "a zero budget", "a boolean limit", "a fractional limit", "nested 5000 deep",
         "a NaN timestamp", "a change in the year 31 billion", "a breach an hour ahead",
         "a probe an hour ahead", "a negative timestamp", "an overload from the future",
         "an avoided range that never ends", "an unknown change kind",
         "a ledger of 2000 entries", "no url", "a count written as text",
         "a drain from a zero budget", "a negative vLLM bound", "a held flag as text", "binary",
         "65 MiB"],
)
def test_a_state_file_that_is_not_what_the_controller_wrote_is_moved_aside_with_its_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes, message: str
) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(content)
    assert StateStore(path, clock=lambda: NOW).load() == {}
    assert not path.exists()
    assert (tmp_path / f"state.json.corrupt-{int(NOW)}").read_bytes() == content
    (line,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert message in line
    assert "moved to" in line and "starting without memory" in line


def test_a_moment_a_little_ahead_is_a_clock_in_step_and_loads(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(_with({"state.last_change_at": NOW + 30}))
    state = StateStore(path, clock=lambda: NOW).load()["a:8000"].state
    assert state.last_change_at == NOW + 30


def test_a_second_bad_file_does_not_overwrite_the_first_moved_aside(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    store = StateStore(path, clock=lambda: NOW)
    for content in (b"{", b"[]", b"null"):
        path.write_bytes(content)
        assert store.load() == {}
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert kept == [f"state.json.corrupt-{int(NOW)}", f"state.json.corrupt-{int(NOW)}-1",
                    f"state.json.corrupt-{int(NOW)}-2"]


def test_no_path_means_memory_only(tmp_path: Path) -> None:
    store = StateStore(None)
    store.save({"a": PersistedTarget("http://a", FULL)})
    assert store.load() == {}


def test_decode_names_the_broken_target() -> None:
    data = encode({"good": PersistedTarget("u", FULL), "bad": PersistedTarget("u", FULL)})
    data["targets"]["bad"]["state"]["probe"]["kind"] = "sideways"
    with pytest.raises(StateError, match="bad"):
        decode(data)


def test_a_state_file_from_before_the_goodput_memory_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps(OLD_FILE))
    state = StateStore(path).load()["a:8000"].state
    assert state.probe is not None
    assert (state.probe.good_share_before, state.probe.waiting_before) == (None, None)
    assert (state.ledger, state.overload_since, state.queue_growing_since, state.drain_from) == (
        (), None, None, None)
    assert state.limits == Limits(64, 2048)


def test_one_unusable_target_costs_that_target_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """N5: a limit past 32 bits in one target's state (as an older controller saved what a
    target reported) no longer quarantines every target: the others load and are written back;
    the original file is kept aside."""
    good = {f"t{i}:8000": PersistedTarget(f"http://t{i}:8000", FULL) for i in range(3)}
    data = encode({**good, "bad:8000": PersistedTarget("http://bad:8000", FULL)})
    data["targets"]["bad:8000"]["state"]["limits"]["max_num_batched_tokens"] = 10**30
    path = tmp_path / "state.json"
    content = json.dumps(data).encode()
    path.write_bytes(content)
    assert StateStore(path, clock=lambda: NOW).load() == good
    assert (tmp_path / f"state.json.corrupt-{int(NOW)}").read_bytes() == content
    assert StateStore(path, clock=lambda: NOW).load() == good  # written back whole
    (line,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert "1 of 4 targets unusable, the first: targets['bad:8000'].state.limits" in line
    assert "starting without memory of those targets" in line


@pytest.mark.parametrize(("bad", "why"), [
    (replace(FULL, queued_tokens_from=10**30), "state.queued_tokens_from: must be an integer "
                                               "from 1 to 1000000000000, got an integer too large"),
    (replace(FULL, slack_from=1e30), "state.slack_from: a deadline slack must be within "
                                     "[0.01, 100], got 1e+30"),
    (replace(FULL, prefill_seconds_per_token=math.inf), "state.prefill_seconds_per_token: must be "
                                                        "a finite number, got inf"),
], ids=["vLLM's bound at 10^30", "a slack of 10^30", "an infinite cost"])
def test_a_state_that_would_not_load_again_is_never_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, bad: TargetState, why: str,
) -> None:
    """Issue 32, N5: whatever reading reached a target's state, the file written loads whole:
    that target's state is written as it last was (a target never written is left out), the
    others' newer states are written, and nothing is moved aside at the restart."""
    path = tmp_path / "state.json"
    store = StateStore(path, clock=lambda: NOW)
    first = {"a": PersistedTarget("http://a", FULL), "b": PersistedTarget("http://b", FULL)}
    store.save(first)
    newer = PersistedTarget("http://b", replace(FULL, last_change_at=150.0))
    for _ in range(2):
        store.save({"a": PersistedTarget("http://a", bad), "b": newer,
                    "c": PersistedTarget("http://c", bad)})
    assert StateStore(path, clock=lambda: NOW).load() == {"a": first["a"], "b": newer}
    assert list(tmp_path.glob("state.json.corrupt-*")) == []
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors == [  # once per reason, not at every save
        f"target a: its state would not load again (targets['a'].{why}); writing it as last "
        "written",
        f"target c: its state would not load again (targets['c'].{why}); leaving it out of "
        "the state file"]
