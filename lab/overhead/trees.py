"""The service's overhead, one tree against another, both running and taking turns.

``python -m lab.overhead.trees BASE TREE`` starts ``governor serve`` on the sim in zero-cost
mode (``--time-scale 0``: every CPU second of the server is the service's own) from each of two
checkouts (``git worktree add --detach BASE COMMIT``), each with its own ``PYTHONPATH``, and
gives them the same load in turns: per round, one-token requests and then streams, first to
one, then to the other, the order alternating each round. Server CPU comes from ``/proc``.

On a shared machine a run of one tree after the other measures the neighbours as much as the
trees; taking turns every few seconds puts both under the same noise, and the per-round ratio
and the medians are what the report gives::

    python -m lab.overhead.trees /work/base /work/tree --rounds 12     # about 5 minutes
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import statistics
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from governor.bench.api import LoadSpec, cpu_seconds, run_load
from governor.common.cli import EnvArgumentParser, positive_int
from governor.common.commands import Serve
from governor.common.process import Child, free_port, running
from governor.contracts.endpoints import LOCAL_HOST

MODEL = "bench"
SIDES = ("base", "tree")


@dataclass(frozen=True, slots=True)
class Load:
    concurrency: int
    requests: int  # one-token requests per turn
    streams: int  # streams per turn
    tokens: int  # tokens per stream


@dataclass(frozen=True, slots=True)
class Turn:
    """One side's turn of one round: server CPU µs per one-token request and per token."""

    us_per_request: float
    us_per_token: float


def serve_argv(port: int) -> list[str]:
    """``governor serve``'s arguments (after ``python -m governor``): the sim in zero-cost mode,
    every CPU second of the server the service's own."""
    return Serve(engine="sim", preset="tiny", time_scale=0, port=port, host=LOCAL_HOST,
                 served_model_name=MODEL, max_in_flight=4096).argv()


def server(side: str, root: Path, port: int) -> Child:
    """``governor serve`` run from the checkout ``root`` (its code on ``PYTHONPATH``)."""
    argv = [sys.executable, "-m", "governor", *serve_argv(port)]
    env = {**os.environ, "PYTHONPATH": str(root), "GOVERNOR_SERVE_LOG_LEVEL": "warning"}
    return Child(side, argv, f"http://{LOCAL_HOST}:{port}/health", Path(os.devnull), env=env,
                 cwd=root, log_stderr=False)


def cpu_us(child: Child, url: str, load: Load, requests: int, tokens: int) -> float:
    """Server CPU µs for ``requests`` requests of ``tokens`` tokens each at the load's
    concurrency."""
    spec = LoadSpec(url=url, model=MODEL, requests=requests, concurrency=load.concurrency,
                    max_tokens=tokens)
    before = cpu_seconds(child.pid)
    asyncio.run(run_load(spec))
    return (cpu_seconds(child.pid) - before) * 1e6


def turn(child: Child, url: str, load: Load) -> Turn:
    single = cpu_us(child, url, load, load.requests, 1) / load.requests
    streamed = cpu_us(child, url, load, load.streams, load.tokens) / (load.streams * load.tokens)
    return Turn(single, streamed)


@contextlib.contextmanager
def servers(roots: Sequence[Path]) -> Iterator[list[tuple[Child, str]]]:
    ports = [free_port() for _ in roots]
    children = [server(side, root, port) for side, root, port in zip(SIDES, roots, ports,
                                                                       strict=True)]
    with running(children):
        yield [(child, f"http://{LOCAL_HOST}:{port}") for child, port in zip(children, ports,
                                                                               strict=True)]


def measure(base: Path, tree: Path, rounds: int, load: Load) -> dict[str, Any]:
    """``rounds`` rounds of both sides' turns; the report (per round, medians, ratios)."""
    turns: dict[str, list[Turn]] = {side: [] for side in SIDES}
    with servers([base, tree]) as started:
        for child, url in started:  # warm-up: imports, caches, connections
            cpu_us(child, url, load, 300, 8)
        for number in range(rounds):
            order = (0, 1) if number % 2 == 0 else (1, 0)
            for index in order:
                turns[SIDES[index]].append(turn(*started[index], load))
            print(render_round(number, turns), file=sys.stderr, flush=True)
    return summarize(turns, load, base, tree)


def summarize(turns: dict[str, list[Turn]], load: Load, base: Path,
              tree: Path) -> dict[str, Any]:
    """Medians of each side, the ratio of the medians, and each round's ratio."""
    report: dict[str, Any] = {"base": str(base), "tree": str(tree),
                              "concurrency": load.concurrency, "requests": load.requests,
                              "streams": load.streams, "tokens": load.tokens,
                              "rounds": len(turns["base"])}
    for metric in ("us_per_request", "us_per_token"):
        values = {side: [getattr(t, metric) for t in turns[side]] for side in SIDES}
        ratios = [ratio(b, t) for b, t in zip(values["base"], values["tree"], strict=True)]
        medians = {side: statistics.median(values[side]) for side in SIDES}
        report[metric] = {
            **values, "median": medians, "ratio": ratio(medians["base"], medians["tree"]),
            "round_ratios": ratios, "median_round_ratio": statistics.median(ratios),
            "tree_dearer": sum(ratio > 1 for ratio in ratios),
        }
    return report


def ratio(base: float, tree: float) -> float:
    """tree / base; infinite when the base measured no CPU at all (a load too short for
    ``/proc``'s 10 ms ticks)."""
    return tree / base if base else math.inf


def render_round(number: int, turns: dict[str, list[Turn]]) -> str:
    base, tree = turns["base"][-1], turns["tree"][-1]
    first = "base" if number % 2 == 0 else "tree"
    return (f"round {number + 1:>2} ({first} first): µs/request {base.us_per_request:6.0f} -> "
            f"{tree.us_per_request:6.0f} ({ratio(base.us_per_request, tree.us_per_request):.2f}x), "
            f"µs/token {base.us_per_token:5.2f} -> {tree.us_per_token:5.2f} "
            f"({ratio(base.us_per_token, tree.us_per_token):.2f}x)")


def render(report: dict[str, Any]) -> str:
    lines = [f"base {report['base']}, tree {report['tree']}: {report['rounds']} rounds of "
             f"{report['requests']} one-token requests and {report['streams']} streams of "
             f"{report['tokens']} tokens at concurrency {report['concurrency']}",
             "| round | µs/request base | tree | ratio | µs/token base | tree | ratio |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    single, streamed = report["us_per_request"], report["us_per_token"]
    for number in range(report["rounds"]):
        lines.append(
            f"| {number + 1} | {single['base'][number]:.0f} | {single['tree'][number]:.0f} | "
            f"{single['round_ratios'][number]:.2f} | {streamed['base'][number]:.2f} | "
            f"{streamed['tree'][number]:.2f} | {streamed['round_ratios'][number]:.2f} |")
    for name, metric, digits in (("one-token request", single, 0), ("streamed token",
                                                                     streamed, 2)):
        median = metric["median"]
        lines.append(
            f"µs per {name}: median {median['base']:.{digits}f} -> {median['tree']:.{digits}f} "
            f"({metric['ratio']:.3f}x; median of the rounds' ratios "
            f"{metric['median_round_ratio']:.3f}x; tree dearer in {metric['tree_dearer']} of "
            f"{report['rounds']} rounds)")
    return "\n".join(lines)


def add_checkouts(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("base", type=Path, help="the checkout to compare against")
    parser.add_argument("tree", type=Path, help="the checkout measured")


def checkouts(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[Path, Path]:
    """The two checkouts named, resolved, or the parser's error for one that is not one."""
    for root in (args.base, args.tree):
        if not (root / "governor" / "__main__.py").is_file():
            parser.error(f"{root}: not a checkout of this project (no governor/__main__.py)")
    return args.base.resolve(), args.tree.resolve()


def main(argv: Sequence[str] | None = None) -> int:
    parser = EnvArgumentParser(prog="python -m lab.overhead.trees", description=__doc__)
    add_checkouts(parser)
    parser.add_argument("--rounds", type=positive_int, default=12)
    parser.add_argument("--concurrency", type=positive_int, default=256)
    parser.add_argument("--requests", type=positive_int, default=2000,
                        help="one-token requests per turn")
    parser.add_argument("--streams", type=positive_int, default=400, help="streams per turn")
    parser.add_argument("--tokens", type=positive_int, default=128, help="tokens per stream")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="also write the report as JSON")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    base, tree = checkouts(parser, args)
    report = measure(base, tree, args.rounds,
                     Load(args.concurrency, args.requests, args.streams, args.tokens))
    print(render(report))
    if args.json is not None:
        args.json.write_text(json.dumps(report) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
