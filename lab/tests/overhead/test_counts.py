"""Counting the service's work per request: the report, callgrind's totals, the command line,
and one short count of the real service from this checkout against itself."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from lab.overhead import counts
from lab.overhead.counts import callgrind_total, render, short

REPO = Path(__file__).resolve().parents[3]


def test_the_report_lists_functions_by_their_difference() -> None:
    base = Counter({"governor/a.py:f": 100.0, "governor/b.py:g": 10.0})
    tree = Counter({"governor/a.py:f": 90.0, "governor/b.py:g": 40.0, "governor/c.py:h": 5.0})
    text = render(["/b", "/t"], [110.0, 135.0], [base, tree], "opcodes", top=2)
    lines = text.splitlines()
    assert lines[0] == "opcodes per request: /b 110, /t 135 (+25, 1.2273x)"
    assert lines[3] == "| 10.0 | 40.0 | +30.0 | `governor/b.py:g` |"
    assert lines[4] == "| 100.0 | 90.0 | -10.0 | `governor/a.py:f` |"
    assert len(lines) == 5  # the top 2 only


def test_a_file_is_named_the_same_in_either_checkout(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    path = "governor/inference/openai/generation.py"
    assert short(f"{root}/{path}", root) == path
    venv = f"{root}/.venv/lib/python3.11/site-packages/aiohttp/web.py"
    assert short(venv, root) == "aiohttp/web.py"


def test_callgrinds_totals_are_summed_over_its_dumps(tmp_path: Path) -> None:
    (tmp_path / "counts.41").write_text("events: Ir\nsummary: 0\ntotals: 0\n")  # at start
    (tmp_path / "counts.41.1").write_text("events: Ir\nsummary: 0\nfn=x\n1 5\ntotals: 1200\n")
    (tmp_path / "counts.41.2").write_text("totals: 300\n")
    assert callgrind_total(tmp_path) == 1500
    with pytest.raises(SystemExit, match="no callgrind dump"):
        callgrind_total(tmp_path / "none")


def test_a_folder_that_is_not_a_checkout_is_refused(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        counts.main([str(tmp_path), str(REPO)])
    assert exc.value.code == 2
    assert "not a checkout of this project" in capsys.readouterr().err


@pytest.mark.integration
def test_one_short_count_against_itself(capsys: pytest.CaptureFixture[str]) -> None:
    assert counts.main([str(REPO), str(REPO), "--requests", "20", "--concurrency", "4",
                        "--top", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "20 requests of 1 token(s) at concurrency 4"
    totals = re.fullmatch(r"opcodes per request: \S+ ([\d,]+), \S+ ([\d,]+) \(.*", lines[1])
    assert totals is not None
    assert all(int(total.replace(",", "")) > 5_000 for total in totals.groups())
    assert len(lines) == 2 + 2 + 3  # the totals, the table's head, the top 3 functions
