"""The sim-fidelity command line and its report (the full replay is in test_sim_calibration)."""

from __future__ import annotations

import pytest

from lab.calibration import sim_fidelity as fidelity


def test_an_unknown_preset_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert fidelity.main(["--preset", "gpt-9@tpu"]) == 2
    assert "unknown sim preset 'gpt-9@tpu'" in capsys.readouterr().err


@pytest.mark.parametrize("tolerance", ["abc", "-1", "0", "1e9", "nan"])
def test_a_bad_tolerance_is_refused(tolerance: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        fidelity.main(["--tolerance", tolerance])
    assert exited.value.code == 2
    assert "tolerance" in capsys.readouterr().err


def test_options_also_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOVERNOR_SIM_FIDELITY_PRESET", "nope")
    assert fidelity.main([]) == 2


def _cell(measured: float, simulated: float, row: str = "r") -> fidelity.Cell:
    return fidelity.Cell("budget", row, "ITL p99", measured, simulated)


def test_the_report_shows_ratio_and_error_and_flags_misses() -> None:
    report = fidelity.render([_cell(10.0, 10.5), _cell(10.0, 14.0, "bad")], 0.15)
    assert "| budget | r | ITL p99 | 10.00 | 10.50 | 1.05 | +5.0% |" in report
    assert "| 14.00 | 1.40 | +40.0% ✗ |" in report
    assert "1/2 cells within ±15%; worst +40.0% (bad, ITL p99)" in report


def test_documented_misses_are_noted_not_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    key = ("budget", "bad", "ITL p99")
    monkeypatch.setitem(fidelity.UNREPRODUCED, key, "a reason")
    documented = _cell(10.0, 16.0, "bad")
    other = _cell(10.0, 16.0, "other")
    assert fidelity.failures([documented, other], 0.15) == [other]
    report = fidelity.render([documented, other], 0.15)
    assert "+60.0% [1] |" in report
    assert "+60.0% ✗ |" in report
    assert "[1] a reason" in report


def test_the_grid_lays_cells_out_like_the_reference_tables() -> None:
    cells = [
        fidelity.Cell("decode", "B=1", "ITL p50", 4.85, 4.9),
        fidelity.Cell("decode", "B=1", "tokens/s", 206.0, 202.0),
        fidelity.Cell("decode", "B=8", "ITL p50", 5.0, 7.0),
        fidelity.Cell("decode", "B=8", "tokens/s", 1600.0, 1571.0),
    ]
    grid = fidelity.render_grid(cells, 0.15)
    assert "| decode | ITL p50 | tokens/s |" in grid
    assert "| B=1 | 4.85 → 4.90 (+1%) | 206.0 → 202.0 (-2%) |" in grid
    assert "| B=8 | 5.00 → 7.00 (+40% ✗) | 1,600 → 1,571 (-2%) |" in grid
