"""Persisted per-target state: round trip, atomic replacement, a corrupt file moved aside."""

from __future__ import annotations

import json
from pathlib import Path

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
    assert (state.ledger, state.overload_since, state.queue_growing_since) == ((), None, None)
    assert state.limits == Limits(64, 2048)
