"""Scoring the drill matrix from its JSON lines, against the issue's targets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from governor.drills import catalog
from governor.drills.matrix import JSONL, summarize
from governor.drills.score import MIN_LOADS, MIN_SEEDS, read_records, render, right, score


def drill(name: str, found: str | None, seconds: float | None = 30.0, changes: int = 0,
          **extra: Any) -> dict[str, Any]:
    expected = None if name == "healthy" else name
    return {"drill": name, "seed": 1, "expected": expected, "found": found,
            "onset_to_verdict_seconds": seconds if found else None,
            "controller_changes": changes, "verdict_polls": 3 if found else 0, **extra}


def whole(stock_vllm_spec: bool = False, spec: str = "slo.yaml") -> list[dict[str, Any]]:
    """A whole matrix, every drill right: each fault drill the spec sees on three seeds, healthy
    at three loads."""
    faults = [d.name for d in catalog.DRILLS
              if d.cause is not None and (d.stock_vllm or not stock_vllm_spec)]
    extra = {"spec": spec, "stock_vllm_spec": stock_vllm_spec}
    return ([{**drill(name, name), "seed": seed, **extra} for name in faults
             for seed in range(1, MIN_SEEDS + 1)]
            + [{**drill("healthy", None), "load_scale": 0.5 * (i + 1), **extra}
               for i in range(MIN_LOADS)])


def test_a_fault_drill_is_right_when_its_cause_leads() -> None:
    assert right(drill("queue", "queue"))
    assert not right(drill("queue", "gpu_compute_bound"))
    assert not right(drill("queue", None))


def test_a_healthy_drill_is_right_only_without_any_verdict() -> None:
    assert right(drill("healthy", None))
    assert not right(drill("healthy", "batching"))
    # No verdict held for two polls, but one was seen: a healthy run must not see any.
    assert not right({**drill("healthy", None), "verdict_polls": 1})


def test_every_target_met() -> None:
    records = whole()
    records[0] = {**records[0], "controller_changes": 2}  # batching: the controller retunes
    s = score(records)
    faults = len(records) - MIN_LOADS
    assert (s.fault_runs, s.fault_right, s.healthy_runs, s.healthy_quiet) == (
        faults, faults, MIN_LOADS, MIN_LOADS)
    assert s.accuracy == 1.0 and s.late == 0 and s.stray_changes == 0 and not s.missing
    assert s.met
    assert "targets met" in render(s)


def test_a_matrix_short_of_seeds_or_loads_meets_no_target() -> None:
    """Six right drills are not a score: each fault drill needs three seeds, healthy three
    loads, per spec."""
    s = score([drill(name, name) for name in ("batching", "kv_cache", "queue")]
              + [drill("healthy", None)])
    assert s.accuracy == 1.0 and not s.met
    text = render(s)
    assert "MISS a whole matrix" in text and "batching on 1 seed" in text
    assert "gpu_throttled on 0 seeds" in text and "healthy at 1 load" in text
    short = whole()
    short = [r for r in short if not (r["drill"] == "queue" and r["seed"] == 3)]
    assert score(short).missing == ("slo.yaml: queue on 2 seeds",)


def test_a_stock_vllm_spec_is_whole_without_what_it_cannot_see() -> None:
    s = score(whole(stock_vllm_spec=True, spec="stock.yaml"))
    assert not s.missing and s.met
    both = whole() + whole(stock_vllm_spec=True, spec="stock.yaml")
    assert score(both).met
    # A default spec's matrix needs the service-side drills too.
    cut = [r for r in whole() if r["drill"] != "client_stream"]
    assert score(cut).missing == ("slo.yaml: client_stream on 0 seeds",)


@pytest.mark.parametrize(("records", "miss"), [
    pytest.param([drill("queue", "queue")] * 19 + [drill("queue", "unknown")],
                 None, id="19 of 20 right is 95%: met"),
    pytest.param([drill("queue", "queue")] * 18 + [drill("queue", "unknown")] * 2,
                 "leading cause right in 18/20", id="18 of 20 right misses the accuracy target"),
    pytest.param([drill("queue", "queue"), drill("healthy", "batching")],
                 "healthy drills without a verdict: 0/1", id="a healthy run with a verdict"),
    pytest.param([drill("queue", "queue", 121)], "later than 120 s: 1",
                 id="a right verdict after two minutes is late"),
    pytest.param([drill("gpu_throttled", "gpu_throttled", changes=1)],
                 "limit changes outside batching/kv_cache drills: 1",
                 id="the controller changed limits for a throttled GPU"),
])
def test_each_target_can_be_missed(records: list[dict[str, Any]], miss: str | None) -> None:
    s = score(records)
    text = render(s)
    if miss is None:
        assert not any(line.startswith("MISS") for line in text.splitlines()
                       if "whole matrix" not in line), text
    else:
        assert not s.met
        assert any(line.startswith("MISS") and miss in line for line in text.splitlines()), text


def test_the_table_has_a_row_per_drill_with_its_runs_median_and_changes() -> None:
    s = score([drill("batching", "batching", 20, changes=1),
               drill("batching", "batching", 40, changes=2),
               drill("batching", "queue", 10), drill("healthy", None)])
    row = s.rows[0]
    assert (row.drill, row.runs, row.right, row.median_seconds, row.slowest_seconds,
            row.changes, row.found) == ("batching", 3, 2, 30.0, 40.0, 3,
                                        ("batching", "batching", "queue"))
    assert [r.drill for r in s.rows] == ["batching", "healthy"]


def test_drills_the_spec_cannot_see_are_listed_not_scored() -> None:
    s = score([drill("client_stream", None, applicable=False), drill("queue", "queue")])
    assert s.fault_runs == 1 and s.not_scored == ("client_stream",)
    assert "client_stream" in render(s) and "n/a" in render(s)


def test_the_summary_reads_drills_jsonl_and_skips_a_torn_line(tmp_path: Path) -> None:
    lines = [json.dumps(drill("queue", "queue")), json.dumps(drill("healthy", None)),
             '{"drill": "batch']  # a drill cut short while writing
    (tmp_path / JSONL).write_text("\n".join(lines))
    assert len(read_records(tmp_path / JSONL)) == 2
    text = summarize(tmp_path)
    assert "queue" in text and "healthy drills without a verdict: 1/1" in text


def test_no_jsonl_to_summarize_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no drills have run there"):
        summarize(tmp_path)
