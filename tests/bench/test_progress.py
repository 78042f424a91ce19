"""Long benchmarks say how far they are: n of N, elapsed, and what is left."""

from __future__ import annotations

import io

from governor.bench.progress import Progress


def test_progress_counts_and_estimates_what_is_left() -> None:
    now = [100.0]
    out = io.StringIO()
    progress = Progress("bench", 4, stream=out, clock=lambda: now[0])
    now[0] = 110.0
    progress.done("first")
    now[0] = 120.0
    progress.done("second")
    lines = out.getvalue().splitlines()
    assert lines == ["bench: 1/4 first, 10s, ETA 30s", "bench: 2/4 second, 20s, ETA 20s"]


def test_the_last_step_has_no_estimate() -> None:
    out = io.StringIO()
    progress = Progress("bench", 1, stream=out, clock=lambda: 5.0)
    progress.done("only")
    assert out.getvalue() == "bench: 1/1 only, 0s\n"
