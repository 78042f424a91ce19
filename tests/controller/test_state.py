"""Persisted per-target state: round trip, atomic replacement, a corrupt file moved aside."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from governor.controller.model import Avoid, ChangeKind, Limits, Param, Probe, TargetState
from governor.controller.state import PersistedTarget, StateError, StateStore, decode, encode

FULL = TargetState(
    limits=Limits(64, 2048), last_change_at=100.0, last_breach_at=90.0,
    probe=Probe(ChangeKind.TIGHTEN, Param.MAX_NUM_BATCHED_TOKENS, Limits(64, 8192),
                Limits(64, 2048), 100.0, 0.21, None),
    avoid=(Avoid(Param.MAX_NUM_BATCHED_TOKENS, 4096, 8192, 1900.0, 14000.0),),
    prefill_seconds_per_token=2.5e-5,
)


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
