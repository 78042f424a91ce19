"""A co-tenant on the engine's GPU: a process of our own that holds memory and runs bf16 matrix
multiplies in a loop, the ``gpu_shared`` live drill's cause::

    python -m lab.live.cotenant --gib 16 --trigger /tmp/go --seconds 300

It imports torch at once but touches the GPU only once ``--trigger`` exists (the drill's onset:
a CUDA context alone is a second process holding memory), then allocates ``--gib`` GiB in all
(a block it holds, and the matrices), multiplies until ``--seconds`` pass or it is stopped, and
prints its rate every few seconds, so the drill's log shows how much of the GPU it got. It
changes no setting of the GPU (clocks, power limit, compute mode): it is only a program.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

GIB = 1024**3
SIDE = 8192  # square bf16 matrices: 128 MiB each, ~1.1 TFLOP a product
REPORT_SECONDS = 5.0


def flops_per_product(side: int = SIDE) -> float:
    """Floating-point operations of one ``side`` by ``side`` matrix product.

    >>> flops_per_product(2)
    16.0
    """
    return 2.0 * side**3


def held_bytes(gib: float, side: int = SIDE) -> int:
    """What the held block takes: ``gib`` less the three matrices (bf16), never negative.

    >>> held_bytes(1.0, 8192) == GIB - 3 * 2 * 8192 * 8192
    True
    >>> held_bytes(0.0)
    0
    """
    return max(0, int(gib * GIB) - 3 * 2 * side * side)


def _wait_for(trigger: Path, stop: list[bool]) -> bool:
    while not trigger.exists():
        if stop:
            return False
        time.sleep(0.1)
    return True


def run(gib: float, seconds: float, trigger: Path) -> int:
    import torch  # only here: the module's helpers and its tests need no torch

    stop: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    print(json.dumps({"waiting_for": str(trigger), "gib": gib}), flush=True)
    if not _wait_for(trigger, stop):
        return 0
    if not torch.cuda.is_available():
        print("cotenant: no CUDA device", file=sys.stderr, flush=True)
        return 2
    device = torch.device("cuda")
    held = torch.empty(held_bytes(gib), dtype=torch.uint8, device=device)
    held.fill_(1)  # the pages are really taken
    a = torch.randn(SIDE, SIDE, dtype=torch.bfloat16, device=device)
    b = torch.randn(SIDE, SIDE, dtype=torch.bfloat16, device=device)
    c = torch.empty(SIDE, SIDE, dtype=torch.bfloat16, device=device)
    torch.cuda.synchronize()
    started = last = time.monotonic()
    products = reported = 0
    report: dict[str, Any] = {"allocated_gib": round(torch.cuda.memory_allocated() / GIB, 2)}
    print(json.dumps(report), flush=True)
    while not stop and time.monotonic() - started < seconds:
        for _ in range(16):
            torch.matmul(a, b, out=c)
        torch.cuda.synchronize()
        products += 16
        now = time.monotonic()
        if now - last >= REPORT_SECONDS:
            tflops = (products - reported) * flops_per_product() / (now - last) / 1e12
            print(json.dumps({"seconds": round(now - started, 1), "products": products,
                              "tflops": round(tflops, 1)}), flush=True)
            last, reported = now, products
    del held
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.live.cotenant",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--gib", type=float, default=16.0, help="GPU memory taken in all (GiB)")
    p.add_argument("--seconds", type=float, default=600.0, help="stop after this long")
    p.add_argument("--trigger", type=Path, required=True,
                   help="start once this file exists (the drill's onset)")
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    return run(args.gib, args.seconds, args.trigger)


if __name__ == "__main__":
    raise SystemExit(main())
