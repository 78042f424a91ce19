"""The two-tree overhead measurement: its arithmetic, its report, its command line, and one
short run of the real service from this checkout against itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.overhead import trees
from lab.overhead.trees import Load, Turn, render, summarize

REPO = Path(__file__).resolve().parents[3]


def test_medians_ratios_and_rounds_where_the_tree_cost_more() -> None:
    turns = {"base": [Turn(600, 20.0), Turn(500, 22.0), Turn(700, 18.0)],
             "tree": [Turn(660, 20.0), Turn(500, 20.0), Turn(630, 19.8)]}
    report = summarize(turns, Load(256, 2000, 400, 128), Path("/b"), Path("/t"))
    single, streamed = report["us_per_request"], report["us_per_token"]
    assert single["median"] == {"base": 600, "tree": 630}
    assert single["ratio"] == pytest.approx(1.05)
    assert single["round_ratios"] == pytest.approx([1.1, 1.0, 0.9])
    assert single["tree_dearer"] == 1  # equal is not dearer
    assert streamed["median_round_ratio"] == pytest.approx(1.0)
    assert streamed["tree_dearer"] == 1
    text = render(report)
    assert "| 1 | 600 | 660 | 1.10 | 20.00 | 20.00 | 1.00 |" in text
    assert "median 600 -> 630 (1.050x" in text and "tree dearer in 1 of 3 rounds" in text


def test_a_folder_that_is_not_a_checkout_is_refused(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        trees.main([str(tmp_path), str(REPO)])
    assert exc.value.code == 2
    assert "not a checkout of this project" in capsys.readouterr().err


@pytest.mark.integration
def test_one_short_round_against_itself(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    assert trees.main([str(REPO), str(REPO), "--rounds", "2", "--requests", "40", "--streams",
                       "8", "--tokens", "4", "--concurrency", "8", "--json", str(out)]) == 0
    report = out.read_text(encoding="utf-8")
    assert '"rounds": 2' in report and '"us_per_token"' in report
