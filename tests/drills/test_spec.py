"""The spec a drill runs on: the user's, or a copy with a tighter inter-token SLO."""

from __future__ import annotations

from pathlib import Path

import pytest

from governor.drills.spec import DrillSpecError, check, tightened_copy
from governor.slo.spec import LatencySLI

ROOT = Path(__file__).resolve().parents[2]
SPECS = [ROOT / "slo.yaml", ROOT / "examples" / "stock-vllm" / "slo.yaml"]


@pytest.mark.parametrize("path", SPECS, ids=["slo.yaml", "stock-vllm"])
def test_a_copy_tightens_the_inter_token_slo_and_keeps_the_rest(path: Path,
                                                               tmp_path: Path) -> None:
    copy = tightened_copy(path, 0.025, tmp_path / "slo.yaml", "a test")
    original, tightened = check(path), check(copy)
    assert copy.read_text().startswith(f"# {path} with inter-token-latency at 25 ms: a test")
    for before, after in zip(original.slos, tightened.slos, strict=True):
        assert before.name == after.name
        if before.name == "inter-token-latency":
            assert isinstance(after.sli, LatencySLI) and after.sli.threshold_seconds == 0.025
        else:
            assert before.sli == after.sli
    assert original.classes == tightened.classes and original.targets == tightened.targets


def test_a_threshold_off_the_histogram_s_edges_is_refused(tmp_path: Path) -> None:
    # vLLM's own histograms keep the edges vLLM was started with (the service's take any
    # threshold as one more edge).
    with pytest.raises(DrillSpecError, match="is invalid"):
        tightened_copy(ROOT / "examples/stock-vllm/slo.yaml", 0.033, tmp_path / "slo.yaml",
                       "a test")


def test_a_spec_without_an_inter_token_slo_cannot_be_tightened(tmp_path: Path) -> None:
    spec = tmp_path / "in.yaml"
    spec.write_text("version: governor/v1\nservice: s\nperiod: 30d\nslos:\n"
                    "  - name: ttft\n    objective: 99\n    sli:\n      latency:\n"
                    "        metric: governor_time_to_first_token_seconds\n"
                    "        threshold: 1s\n")
    with pytest.raises(DrillSpecError, match="no inter-token latency SLO"):
        tightened_copy(spec, 0.025, tmp_path / "out.yaml", "a test")


def test_an_invalid_spec_names_its_problems(tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text("version: governor/v1\nservice: x\nperiod: 30d\nslos: [{name: 7}]\n")
    with pytest.raises(DrillSpecError, match=r"bad\.yaml is invalid"):
        check(spec)
