"""``python -m lab.overhead.tracer ARGS…``: ``python -m governor ARGS…`` with an opcode counter.

The counter counts the bytecodes the main thread (the event loop's) executes, per function,
between ``SIGUSR1`` (start, after a warm-up) and ``SIGUSR2`` (stop, and write the counts as JSON
to ``$OPCODES_OUT``: ``[[file, first line, function, count], …]``). Unlike CPU time on a shared
machine the count is deterministic for a given load, and it says where the work is; it does not
see work in C (builtins, the allocator) or in other threads (``lab.overhead.counts
--instructions`` does). The tracer makes the server some 20 times slower while it counts.
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
from collections import Counter
from types import FrameType
from typing import Any

Key = tuple[str, int, str]
_counts: Counter[Key] = Counter()


def _trace(frame: FrameType, event: str, arg: Any) -> Any:
    frame.f_trace_opcodes = True
    if event == "opcode":
        code = frame.f_code
        _counts[(code.co_filename, code.co_firstlineno, code.co_name)] += 1
    return _trace


def _start(signum: int, frame: FrameType | None) -> None:
    _counts.clear()
    sys.settrace(_trace)
    while frame is not None:  # the frames already running count from now on too
        frame.f_trace = _trace
        frame.f_trace_opcodes = True
        frame = frame.f_back


def _stop(signum: int, frame: FrameType | None) -> None:
    sys.settrace(None)
    rows = [[*key, count] for key, count in _counts.most_common()]
    with open(os.environ["OPCODES_OUT"], "w", encoding="utf-8") as out:
        json.dump(rows, out)


def main() -> None:
    signal.signal(signal.SIGUSR1, _start)
    signal.signal(signal.SIGUSR2, _stop)
    sys.argv = ["governor", *sys.argv[1:]]
    runpy.run_module("governor", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
