"""``governor <command> …``: dispatches to the component that owns each command.

Components are imported only when their command runs, so ``governor exporter`` never pays for
the inference service's imports and ``governor serve --engine sim`` never imports vLLM.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import NamedTuple

from governor.contracts.endpoints import CONTROLLER, EXPORTER, INFERENCE, PROBE


class Command(NamedTuple):
    module: str
    summary: str


COMMANDS: dict[str, Command] = {
    "serve": Command("governor.inference.cli",
                     f"OpenAI-compatible inference service (port {INFERENCE.port})"),
    "exporter": Command("governor.exporters.cli",
                        f"GPU exporter on NVML/GPM (port {EXPORTER.port})"),
    "controller": Command("governor.controller.cli", f"SLO controller (port {CONTROLLER.port})"),
    "probe": Command("governor.probe.cli", "synthetic probe: a small streaming request to each "
                                           f"target on an interval (port {PROBE.port})"),
    "generate": Command("governor.generate", "rules, Alertmanager, Prometheus and Grafana files "
                                             "from slo.yaml"),
    "up": Command("governor.up", "the whole stack natively: Prometheus, Alertmanager, services"),
    "status": Command("governor.status", "SLOs, firing alerts, limits and decisions on one screen"),
    "why": Command("governor.why", "why a latency SLO burns: causes ranked, their evidence, "
                                   "the action"),
    "preview": Command("governor.preview", "render every dashboard panel from Prometheus to PNG"),
    "bench": Command("governor.bench", "benchmarks with ratios against a baseline"),
    "recommend": Command("governor.bench.recommend", "the best static limits for a recorded "
                                                    "request log, as the simulator predicts "
                                                    "them"),
    "drill": Command("governor.drills.cli", "inject a cause of an SLO burn into the embedded "
                                            "stack and score the verdict"),
}


def _usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = [f"  {name:<{width}}  {cmd.summary}" for name, cmd in COMMANDS.items()]
    return (
        "usage: governor <command> [options]\n\n"
        "Observability stack and SLO control plane for LLM inference.\n\ncommands:\n"
        + "\n".join(lines)
        + "\n\n'governor <command> --help' describes each command's options."
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help", "help"}:
        print(_usage())
        return 0
    if args[0] in {"-V", "--version"}:
        from governor import __version__

        print(f"governor {__version__}")
        return 0
    command = COMMANDS.get(args[0])
    if command is None:
        print(f"governor: unknown command {args[0]!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    entry: Callable[[list[str]], int] = importlib.import_module(command.module).main
    try:
        return entry(args[1:])
    except BrokenPipeError:
        # The reader went away (`governor status --json | head`): not an error worth a trace.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
