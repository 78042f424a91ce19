"""The load of a live drill, run as a child process beside the stack::

    python -m lab.live.drill_load --state S --drill batching --phase inject --seed 1

``--phase healthy`` drives the healthy chats (times ``--scale``) and the drill's background
traffic; ``--phase inject`` what the drill adds at its onset. Prompts are whole-word tokens of
the engine's own tokenizer (:func:`lab.live.runs.prompt_book`), so their lengths are exact;
clients send and read as :func:`governor.drills.clients.send` does. Every ``--stats-seconds`` it
prints one JSON line per traffic class (answers by status, mean duration, arrivals shed), so a
drill's log shows what its clients saw. Stopping it (SIGTERM) closes every connection, and the
service aborts the requests in the engine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import aiohttp

from governor.drills.clients import send
from governor.drills.loadgen import MAX_OUTSTANDING, Tally, model_name
from governor.drills.workload import Traffic, Workload
from lab.live import drills
from lab.live.replay import PromptBook
from lab.live.runs import prompt_book
from lab.live.state import State


def workload_of(drill: str, phase: str, scale: float) -> Workload:
    """The healthy chats (scaled) and the drill's background, or what its onset adds (scaled
    too: a rehearsal on a small machine scales every class)."""
    chosen = drills.by_name(drill)
    if phase == "healthy":
        return Workload((*drills.HEALTHY.traffic, *chosen.background.traffic)).scaled(scale)
    return chosen.workload.scaled(scale)


def request_body(traffic: Traffic, model: str, prompts: PromptBook,
                 rng: random.Random) -> dict[str, object]:
    """One chat completion of ``traffic``: a prompt of exactly the drawn number of tokens, an
    answer of exactly ``max_tokens`` (EOS ignored)."""
    tokens = rng.randint(*traffic.prompt_words)
    return {"model": model, "stream": traffic.stream, "ignore_eos": True,
            "max_tokens": rng.randint(*traffic.max_tokens),
            "messages": [{"role": "user",
                          "content": prompts.prompt(tokens, rng.getrandbits(32))}]}


async def _open_loop(session: aiohttp.ClientSession, url: str, model: str, traffic: Traffic,
                     prompts: PromptBook, rng: random.Random, tally: Tally) -> None:
    pending: set[asyncio.Task[None]] = set()

    async def one(body: dict[str, object]) -> None:
        tally.add(await send(session, url, body, traffic.client))

    while True:
        await asyncio.sleep(rng.expovariate(traffic.rate_per_second))
        if len(pending) >= MAX_OUTSTANDING:
            tally.shed += 1
            continue
        task = asyncio.create_task(one(request_body(traffic, model, prompts, rng)))
        pending.add(task)
        task.add_done_callback(pending.discard)


async def _closed_loop(session: aiohttp.ClientSession, url: str, model: str, traffic: Traffic,
                       prompts: PromptBook, rng: random.Random, tally: Tally) -> None:
    async def client(index: int) -> None:
        await asyncio.sleep(traffic.ramp_seconds * index / traffic.concurrency)
        while True:
            outcome = await send(session, url, request_body(traffic, model, prompts, rng),
                                 traffic.client)
            tally.add(outcome)
            if outcome.status == 0:
                await asyncio.sleep(1)  # the service is gone or restarting

    await asyncio.gather(*(client(i) for i in range(traffic.concurrency)))


async def _report(tallies: dict[str, Tally], every: float) -> None:
    while True:
        await asyncio.sleep(every)
        for name, tally in tallies.items():
            print(json.dumps(tally.take(name)), flush=True)


async def drive(url: str, workload: Workload, prompts: PromptBook, seed: int,
                stats_seconds: float) -> None:
    """Drive ``workload`` against ``url`` until cancelled, printing each class's tally."""
    if not workload.traffic:
        await asyncio.Event().wait()  # nothing to send: wait to be stopped
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        model = await model_name(session, url)
        tallies = {t.name: Tally() for t in workload.traffic}
        loops = [(_open_loop if t.rate_per_second else _closed_loop)(
            session, url, model, t, prompts, random.Random(f"{seed}/{t.name}"), tallies[t.name])
            for t in workload.traffic]
        await asyncio.gather(_report(tallies, stats_seconds), *loops)


async def _until_terminated(coroutine: asyncio.Future[None] | asyncio.Task[None]) -> None:
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, coroutine.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await coroutine


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.live.drill_load",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--state", type=Path, required=True, help="what python -m lab.live start left")
    p.add_argument("--drill", choices=drills.NAMES, required=True)
    p.add_argument("--phase", choices=("healthy", "inject"), required=True)
    p.add_argument("--scale", type=float, default=1.0, help="times every class's rate or clients")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--stats-seconds", type=float, default=10.0)
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    state = State.load(args.state)
    workload = workload_of(args.drill, args.phase, args.scale)
    for line in workload.describe():
        print(f"# {line} (prompt words are whole tokens)", flush=True)

    async def run() -> None:
        task = asyncio.ensure_future(drive(state.inference_urls()[0], workload,
                                           prompt_book(state), args.seed, args.stats_seconds))
        await _until_terminated(task)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
