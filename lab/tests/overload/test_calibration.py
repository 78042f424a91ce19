"""``python -m lab.overload.calibration``: the controller with deadlines, with and without the
gate's calibration, side by side on a short overload in virtual time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.overload import calibration

# Three minutes of documents past what the preset prefills, beside chats.
WORKLOAD = """\
version: governor/workload/v1
name: short-overload
duration: 3m
classes:
  chat:
    prompt_tokens: [200, 1200]
    output_tokens: [50, 150]
    rate:
    - {start: 0%, end: 100%, from: 10.0}
  doc:
    prompt_tokens: [4000, 7500]
    output_tokens: [50, 150]
    rate:
    - {start: 0%, end: 100%, from: 9.0}
"""


@pytest.mark.slow
def test_each_run_is_scored_off_and_at_each_quantile(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    workload = tmp_path / "short.yaml"
    workload.write_text(WORKLOAD)
    assert calibration.main(["--workload", str(workload), "--quantiles", "0.9"]) == 0
    out, err = capsys.readouterr()
    rows = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert [r["calibration"] for r in rows] == [None, 0.9]
    off, on = rows
    assert off["requests"] == on["requests"] > 0
    assert off["turned_away"] > 0  # past capacity: the gate refuses with or without it
    assert "| short-overload | 1 | off |" in out and "| short-overload | 1 | q 0.9 |" in out
    assert "1.000x" in out  # the run without calibration is its own baseline
