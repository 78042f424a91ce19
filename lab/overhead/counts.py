"""The service's work per request, counted, one tree against another.

``python -m lab.overhead.counts BASE TREE`` starts ``governor serve`` on the sim in zero-cost mode
from each checkout in turn (its code on ``PYTHONPATH``, as ``lab.overhead.trees`` does), warms it
up, gives it the same load and counts what it does per request:

* by default the bytecodes the event loop's thread executes, per function
  (:mod:`lab.overhead.tracer`): where the work is, and which functions a change made dearer;
* with ``--instructions``, the machine instructions of every thread, builtins, the allocator
  and the garbage collector included, under valgrind's callgrind (toggled on after the
  warm-up by ``callgrind_control``; valgrind must be installed).

Both counts are deterministic for a given load, unlike CPU time on a shared machine, and
neither is CPU time: a cache miss or a system call costs time and few instructions. What a
change costs is what ``lab.overhead.trees`` measures; these say where it comes from::

    python -m lab.overhead.counts ../base . --requests 1000 --tokens 1      # about 2 minutes
    python -m lab.overhead.counts ../base . --streams --instructions
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from governor.bench.api import LoadSpec, run_load
from governor.common.cli import EnvArgumentParser, positive_int
from governor.common.process import Child, free_port, running
from governor.contracts.endpoints import LOCAL_HOST
from lab.overhead.trees import MODEL, add_checkouts, checkouts, serve_argv

TRACER = Path(__file__).with_name("tracer.py")
SETTLE_SECONDS = 1.0  # for a signal to land, or callgrind to write its dump


def load(url: str, requests: int, tokens: int, concurrency: int) -> None:
    asyncio.run(run_load(LoadSpec(url=url, model=MODEL, requests=requests,
                                  concurrency=concurrency, max_tokens=tokens)))


def count(root: Path, requests: int, tokens: int, concurrency: int,
          instructions: bool) -> tuple[float, Counter[str]]:
    """Per request: the total count and the count by function (opcodes only)."""
    port = free_port()
    url = f"http://{LOCAL_HOST}:{port}"
    with tempfile.TemporaryDirectory(prefix="governor-counts-") as scratch:
        out = Path(scratch) / "counts"
        env = {**os.environ, "PYTHONPATH": str(root), "GOVERNOR_SERVE_LOG_LEVEL": "warning",
               "OPCODES_OUT": str(out)}
        if instructions:
            argv = ["valgrind", "--quiet", "--tool=callgrind", "--instr-atstart=no",
                    f"--callgrind-out-file={out}.%p", sys.executable, "-m", "governor",
                    *serve_argv(port)]
        else:
            argv = [sys.executable, str(TRACER), *serve_argv(port)]
        child = Child(root.name, argv, f"{url}/health", Path(os.devnull), env=env, cwd=root,
                      log_stderr=False)
        with running([child], limit_seconds=300):
            load(url, 300, 8, concurrency)  # warm-up: imports, caches, connections
            if instructions:
                control = ["callgrind_control", "--instr=on", str(child.pid)]
                subprocess.run(control, check=True, capture_output=True)
            else:
                os.kill(child.pid, signal.SIGUSR1)
                time.sleep(SETTLE_SECONDS)
            load(url, requests, tokens, concurrency)
            if instructions:
                for action in ("--instr=off", "--dump"):
                    subprocess.run(["callgrind_control", action, str(child.pid)], check=True,
                                   capture_output=True)
            else:
                os.kill(child.pid, signal.SIGUSR2)
            time.sleep(SETTLE_SECONDS)
        if instructions:
            return callgrind_total(Path(scratch)) / requests, Counter()
        by_function: Counter[str] = Counter()
        for filename, _, function, n in json.loads(out.read_text(encoding="utf-8")):
            by_function[f"{short(filename, root)}:{function}"] += n / requests
        return sum(by_function.values()), by_function


def callgrind_total(folder: Path) -> int:
    """The instructions in callgrind's dumps (the ``totals:`` line of each)."""
    total = 0
    for dump in folder.glob("counts.*.*"):
        for line in dump.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("totals:"):
                total += int(line.split()[1])
    if not total:
        raise SystemExit(f"no callgrind dump with a total in {folder}")
    return total


def short(filename: str, root: Path) -> str:
    """A file's name without the checkout or site-packages in front (the same in both)."""
    for prefix in ("site-packages/", f"{sys.base_prefix}/lib/", f"{root}/"):
        if prefix in filename:
            return filename.split(prefix, 1)[1]
    return filename


def render(names: Sequence[str], totals: Sequence[float], by: Sequence[Counter[str]],
           unit: str, top: int) -> str:
    base, tree = totals
    lines = [f"{unit} per request: {names[0]} {base:,.0f}, {names[1]} {tree:,.0f} "
             f"({tree - base:+,.0f}, {tree / base:.4f}x)"]
    if by[0] or by[1]:
        lines.append(f"| {names[0]} | {names[1]} | difference | function |")
        lines.append("| ---: | ---: | ---: | --- |")
        functions = sorted(set(by[0]) | set(by[1]), key=lambda f: -abs(by[1][f] - by[0][f]))
        for function in functions[:top]:
            lines.append(f"| {by[0][function]:.1f} | {by[1][function]:.1f} | "
                         f"{by[1][function] - by[0][function]:+.1f} | `{function}` |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = EnvArgumentParser(prog="python -m lab.overhead.counts", description=__doc__)
    add_checkouts(parser)
    parser.add_argument("--requests", type=positive_int, default=1000)
    parser.add_argument("--tokens", type=positive_int, default=1, help="tokens per request")
    parser.add_argument("--concurrency", type=positive_int, default=256)
    parser.add_argument("--instructions", action="store_true",
                        help="machine instructions of every thread, under callgrind")
    parser.add_argument("--top", type=positive_int, default=25,
                        help="functions listed by their difference (opcodes)")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    roots = checkouts(parser, args)
    if args.instructions and shutil.which("valgrind") is None:
        parser.error("--instructions needs valgrind (apt-get install valgrind)")
    counted = [count(root, args.requests, args.tokens, args.concurrency, args.instructions)
               for root in roots]
    unit = "instructions" if args.instructions else "opcodes"
    print(f"{args.requests} requests of {args.tokens} token(s) at concurrency "
          f"{args.concurrency}")
    print(render([str(root) for root in roots], [total for total, _ in counted],
                 [by for _, by in counted], unit, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
