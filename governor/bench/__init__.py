"""``governor bench <name> …``: the project's benchmarks, each printing ratios against a baseline.

Each benchmark is a module with ``main(argv: list[str]) -> int``, imported only when it runs.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence

# name → (module, one-line summary)
BENCHES: dict[str, tuple[str, str]] = {
    "service": ("governor.bench.service", "the service's own overhead vs a bare aiohttp server"),
    "exporter": ("governor.bench.exporter",
                 "exporter scrape latency vs prometheus_client's own server"),
    "sim-fidelity": ("governor.bench.sim_fidelity",
                     "the sim's llama-3-8b@h200 preset vs the measured H200 tables"),
    "controller": ("governor.bench.controller",
                   "SLO controller vs default and best static limits (virtual time, H200 preset)"),
    "vllm": ("governor.bench.vllm_compare", "the service over vLLM vs vLLM's own OpenAI server"),
    "hostile": ("governor.bench.hostile",
                "a stream's ITL alone vs beside 20 clients sending 4 MiB prompts"),
}


def _usage() -> str:
    if not BENCHES:
        return "usage: governor bench <name> [options]\n\nno benchmarks are installed"
    width = max(len(name) for name in BENCHES)
    rows = "\n".join(f"  {name:<{width}}  {summary}" for name, (_, summary) in BENCHES.items())
    return f"usage: governor bench <name> [options]\n\nbenchmarks:\n{rows}"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help"}:
        print(_usage())
        return 0
    entry = BENCHES.get(args[0])
    if entry is None:
        print(f"governor bench: unknown benchmark {args[0]!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    run: Callable[[list[str]], int] = importlib.import_module(entry[0]).main
    return run(args[1:])
