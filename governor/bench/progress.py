"""Progress of a long benchmark on stderr: n of N, elapsed, and an estimate of what is left.

    progress = Progress("governor bench service", total=8)
    for step in steps:
        run(step)
        progress.done(f"{step.name}")     # governor bench service: 3/8 governor c=16, 41s, ETA 68s
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO


class Progress:
    def __init__(self, label: str, total: int, *, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.label, self.total, self.count = label, max(1, total), 0
        self._stream, self._clock = stream, clock
        self._started = clock()

    def done(self, what: str) -> None:
        self.count += 1
        elapsed = self._clock() - self._started
        left = elapsed / self.count * (self.total - self.count)
        eta = f", ETA {left:.0f}s" if self.count < self.total else ""
        print(f"{self.label}: {self.count}/{self.total} {what}, {elapsed:.0f}s{eta}",
              file=self._stream or sys.stderr, flush=True)
