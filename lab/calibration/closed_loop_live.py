"""The closed loop in real time: ``vllm bench serve``'s random workload over HTTP against the
simulated engine as ``governor serve`` (and so ``governor up``) runs it.

:mod:`lab.calibration.closed_loop` replays the workload in virtual time, where the host costs
nothing. In real time the same preset runs behind the aiohttp service, paced by the wall clock,
and shares this machine's cores with the client; this measures what that mode delivers, on the
same figures and the same H200 table (out of sample)::

    python -m lab.calibration.sim_fidelity --closed-loop --real-time --concurrency 1,32,128,256

Each request is a completion whose prompt is exactly ``input_len`` tokens of the sim's
tokenizer (distinct random five-letter words, so no prefix is shared, as with ``vllm bench
serve``'s random prompts) and whose ``ignore_eos`` answer is exactly ``output_len`` tokens.
"""

from __future__ import annotations

import asyncio
import random
import string
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from governor.bench.api import LoadResult, LoadSpec, run_load
from governor.common.commands import Serve
from governor.common.process import Child, ChildError, free_port
from governor.contracts.endpoints import HEALTH_PATH, LOCAL_HOST
from governor.inference.engines.sim.tokenizer import pieces
from lab.calibration.closed_loop import MEASURED_LIMITS, MS, ClosedLoop, Row

WORD_LETTERS = 5  # one sim token each, with its leading space
START_LIMIT_SECONDS = 60.0
BIND_ATTEMPTS = 3


def random_prompt(rng: random.Random, tokens: int) -> str:
    """A prompt of exactly ``tokens`` sim tokens: distinct random words, none shared."""
    words = ("".join(rng.choices(string.ascii_lowercase, k=WORD_LETTERS))
             for _ in range(tokens))
    return " ".join(words)


def prompts(loop: ClosedLoop, seed: int) -> tuple[str, ...]:
    rng = random.Random(seed)
    made = tuple(random_prompt(rng, loop.input_len) for _ in range(loop.num_prompts))
    assert all(len(pieces(p)) == loop.input_len for p in made)
    return made


def row(loop: ClosedLoop, load: LoadResult) -> Row:
    """The figures ``vllm bench serve`` reports, from the client's own timings."""
    failed = [r for r in load.results if not r.ok]
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(load.results)} requests failed; first: "
                           f"{failed[0].status} {failed[0].error}")
    ttfts = [r.ttft for r in load.results if r.ttft is not None]
    itls = [gap for r in load.results for gap in r.itls]
    outputs = sum(r.tokens for r in load.results)
    ttft50, ttft99 = np.percentile(ttfts, (50, 99)) / MS
    itl50, itl99 = np.percentile(itls, (50, 99)) / MS
    return Row(loop.concurrency, float(ttft50), float(ttft99), float(itl50), float(itl99),
               outputs / load.wall_seconds)


def measure(url: str, model: str, loop: ClosedLoop, *, seed: int = 0) -> Row:
    spec = LoadSpec(url=url, model=model, requests=loop.num_prompts,
                    concurrency=loop.concurrency, prompts=prompts(loop, seed),
                    max_tokens=loop.output_len, chat=False, ignore_eos=True)
    return row(loop, asyncio.run(run_load(spec)))


def _started(preset: str, logs: Path, seed: int) -> tuple[Child, str]:
    """The service on a free port; another port when one is taken between the pick and the
    bind (the pick cannot reserve it)."""
    for attempt in range(1, BIND_ATTEMPTS + 1):
        port = free_port()
        url = f"http://{LOCAL_HOST}:{port}"
        argv = Serve(engine="sim", preset=preset, host=LOCAL_HOST, port=port, seed=seed,
                     max_num_seqs=MEASURED_LIMITS.max_num_seqs,
                     max_num_batched_tokens=MEASURED_LIMITS.max_num_batched_tokens,
                     max_in_flight=1024, max_queue=1024).python()
        child = Child("sim", argv, url + HEALTH_PATH, logs).start()
        try:
            child.wait_healthy(START_LIMIT_SECONDS)
            return child, url
        except ChildError:
            child.stop()
            if attempt == BIND_ATTEMPTS or "address already in use" not in child.tail():
                raise
    raise AssertionError("unreachable")


@contextmanager
def sim_service(preset: str, logs: Path, *, seed: int = 0) -> Iterator[str]:
    """``governor serve --engine sim`` with the measured table's limits; yields its URL."""
    child, url = _started(preset, logs, seed)
    try:
        yield url
    finally:
        child.stop()
