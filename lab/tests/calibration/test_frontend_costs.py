"""The frontend-cost measurement's arithmetic, report and command line (the timing needs vLLM)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.calibration import frontend_costs
from lab.calibration.frontend_costs import Fit, fit_line, report


def test_a_line_through_timings_gives_the_fixed_and_the_per_unit_cost() -> None:
    fit = fit_line([(100, 0.2e-3 + 100e-6), (1000, 0.2e-3 + 1000e-6), (5000, 0.2e-3 + 5000e-6)])
    assert fit.fixed_seconds == pytest.approx(0.2e-3)
    assert fit.per_unit_seconds == pytest.approx(1e-6)


def test_a_line_needs_two_sizes() -> None:
    with pytest.raises(ValueError, match="two sizes"):
        fit_line([(10, 1.0), (10, 2.0)])


def test_the_report_shows_preset_measured_and_ratio() -> None:
    text = report("llama-3-8b@h200", Fit(0.1e-3, 1e-6), Fit(-5e-6, 15e-6))
    assert "| per prompt token | 2.90 | 1.00 | 2.90x |" in text
    assert "| per output | 15.00 | 15.00 | 1.00x |" in text
    assert "| per step message | 100.00 | 0.00 | — |" in text  # under the fit's noise


def test_an_unknown_preset_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert frontend_costs.main(["--model", str(tmp_path), "--preset", "nope"]) == 2
    assert "unknown sim preset 'nope'" in capsys.readouterr().err


def test_a_directory_without_a_model_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert frontend_costs.main(["--model", str(tmp_path / "missing")]) == 2
    assert "no config.json" in capsys.readouterr().err


def test_the_model_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        frontend_costs.main([])
    assert exited.value.code == 2
    assert "--model" in capsys.readouterr().err
