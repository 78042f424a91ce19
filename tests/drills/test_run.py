"""One drill's set-up and its ending, without starting the stack."""

from __future__ import annotations

from pathlib import Path

import pytest

from governor.drills.finding import Finding
from governor.drills.run import DrillError, DrillOptions, _Run

ROOT = Path(__file__).resolve().parents[2]
STOCK = ROOT / "examples" / "stock-vllm" / "slo.yaml"


def prepared(tmp_path: Path, drill: str, slo: Path = ROOT / "slo.yaml") -> _Run:
    return _Run(DrillOptions(drill=drill, slo=slo, run_dir=tmp_path, wait_seconds=150,
                             settle_seconds=45), print, lambda: False)


def test_a_drill_that_needs_a_tighter_slo_writes_its_copy_and_says_so(tmp_path: Path) -> None:
    run = prepared(tmp_path, "gpu_memory_bound")
    assert run.stack.config.slo == tmp_path / "drill-slo.yaml"
    assert any("inter-token SLO at 25 ms on a copy of the spec" in n for n in run.notes)
    assert run.applicable


def test_a_drill_with_engine_options_passes_them_and_says_so(tmp_path: Path) -> None:
    run = prepared(tmp_path, "queue")
    assert run.stack.config.serve == ("--max-num-seqs", "32", "--seed", "1")
    assert any("max_num_seqs 32" in n for n in run.notes)


@pytest.mark.parametrize("drill", ["client_stream", "request_read"])
def test_a_stock_vllm_spec_cannot_see_the_client_and_says_so(tmp_path: Path,
                                                             drill: str) -> None:
    run = prepared(tmp_path, drill, STOCK)
    assert not run.applicable
    assert any("cannot see" in n for n in run.notes)
    assert prepared(tmp_path, drill).applicable


def test_an_unknown_drill_or_a_bad_spec_cannot_run(tmp_path: Path) -> None:
    with pytest.raises(DrillError, match="no drill 'nope'"):
        prepared(tmp_path, "nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: governor/v1\n")
    with pytest.raises(DrillError, match="is invalid"):
        prepared(tmp_path, "healthy", bad)


def test_a_fault_drill_ends_once_its_verdict_settled_healthy_at_the_wait(tmp_path: Path) -> None:
    fault = prepared(tmp_path, "gpu_throttled")
    assert not fault._done(100.0)
    fault.finder.found = Finding("gpu_throttled", 20.0, ())
    assert not fault._done(60.0) and fault._done(65.0)
    healthy = prepared(tmp_path, "healthy")
    healthy.finder.found = Finding("batching", 20.0, ())
    assert not healthy._done(100.0) and healthy._done(150.0)
