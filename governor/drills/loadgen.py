"""The load generator of a drill, run as a child process beside the stack::

    python -m governor.drills.loadgen --url http://127.0.0.1:28100 --drill batching \\
        --phase inject --seed 1

``--phase healthy`` drives the healthy load every drill starts with (times ``--scale``), and
the drill's background traffic if it has any; ``--phase inject`` drives what the drill adds at
its onset (nothing for most drills: their cause is a fault set on the simulated GPU). Every
``--stats-seconds`` it prints one JSON line per traffic class: requests answered, by status,
and their mean duration, so a drill's log shows what its clients saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import aiohttp

from governor.common.cli import EnvArgumentParser, parse_duration_seconds
from governor.drills import catalog
from governor.drills.clients import Outcome, send
from governor.drills.workload import Traffic, Workload, request_body

# Open-loop arrivals beyond this many unanswered requests of one class are not sent (counted
# as "shed"): a drill that outruns the server must not exhaust this machine instead.
MAX_OUTSTANDING = 1500
_READY_SECONDS = 120.0


@dataclass
class Tally:
    """What one traffic class's clients saw since the last report."""

    statuses: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    shed: int = 0

    def add(self, outcome: Outcome) -> None:
        self.statuses[str(outcome.status) if outcome.error is None else "error"] += 1
        self.seconds += outcome.seconds

    def take(self, name: str) -> dict[str, object]:
        """The report since the last one, as a JSON object; the tally starts again."""
        answered = sum(self.statuses.values())
        line: dict[str, object] = {"traffic": name, "answered": dict(sorted(self.statuses.items())),
                "mean_seconds": round(self.seconds / answered, 3) if answered else None,
                "shed": self.shed}
        self.statuses, self.seconds, self.shed = Counter(), 0.0, 0
        return line


async def model_name(session: aiohttp.ClientSession, url: str) -> str:
    """The served model's name, once the service answers (it may still be starting)."""
    deadline = time.monotonic() + _READY_SECONDS
    while True:
        try:
            async with session.get(f"{url}/v1/models") as response:
                payload = await response.json()
            return str(payload["data"][0]["id"])
        except (aiohttp.ClientError, KeyError, IndexError, ValueError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(1)


async def _open_loop(session: aiohttp.ClientSession, url: str, model: str, traffic: Traffic,
                     rng: random.Random, tally: Tally) -> None:
    pending: set[asyncio.Task[None]] = set()

    async def one(body: dict[str, object]) -> None:
        tally.add(await send(session, url, body, traffic.client))

    while True:
        await asyncio.sleep(rng.expovariate(traffic.rate_per_second))
        if len(pending) >= MAX_OUTSTANDING:
            tally.shed += 1
            continue
        task = asyncio.create_task(one(request_body(traffic, model, rng)))
        pending.add(task)
        task.add_done_callback(pending.discard)


async def _closed_loop(session: aiohttp.ClientSession, url: str, model: str, traffic: Traffic,
                       rng: random.Random, tally: Tally) -> None:
    async def client(index: int) -> None:
        await asyncio.sleep(traffic.ramp_seconds * index / traffic.concurrency)
        while True:
            outcome = await send(session, url, request_body(traffic, model, rng), traffic.client)
            tally.add(outcome)
            if outcome.status == 0:
                await asyncio.sleep(1)  # the service is gone or restarting

    await asyncio.gather(*(client(i) for i in range(traffic.concurrency)))


async def drive(url: str, workload: Workload, seed: int, stats_seconds: float) -> None:
    """Drive ``workload`` against ``url`` until cancelled, printing each class's tally."""
    if not workload.traffic:
        await asyncio.Event().wait()  # nothing to send: wait to be stopped
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        model = await model_name(session, url)
        tallies = {t.name: Tally() for t in workload.traffic}
        loops = [(_open_loop if t.rate_per_second else _closed_loop)(
            session, url, model, t, random.Random(f"{seed}/{t.name}"), tallies[t.name])
            for t in workload.traffic]
        await asyncio.gather(_report(tallies, stats_seconds), *loops)


async def _report(tallies: dict[str, Tally], every: float) -> None:
    while True:
        await asyncio.sleep(every)
        for name, tally in tallies.items():
            print(json.dumps(tally.take(name)), flush=True)


def workload_of(drill: str, phase: str, scale: float) -> Workload:
    chosen = catalog.by_name(drill)
    if phase == "healthy":
        return Workload((*catalog.HEALTHY.scaled(scale).traffic, *chosen.background.traffic))
    return chosen.workload


def main(argv: Sequence[str] | None = None) -> int:
    p = EnvArgumentParser(prog="governor.drills.loadgen", env_prefix="GOVERNOR_DRILL_LOAD_",
                          description=__doc__)
    p.add_argument("--url", required=True, help="the inference service")
    p.add_argument("--drill", choices=catalog.NAMES, default=catalog.HEALTHY_NAME)
    p.add_argument("--phase", choices=("healthy", "inject"), default="healthy")
    p.add_argument("--scale", type=float, default=1.0, help="times the healthy load")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--stats-seconds", type=parse_duration_seconds, default=10.0)
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    workload = workload_of(args.drill, args.phase, args.scale)
    for line in workload.describe():
        print(f"# {line}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(drive(args.url.rstrip("/"), workload, args.seed, args.stats_seconds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
