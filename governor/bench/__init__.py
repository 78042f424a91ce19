"""``governor bench <name> …``: the benchmarks a user runs on their own deployment, each printing
ratios against a baseline.

Each benchmark is a module with ``main(argv: list[str]) -> int``, imported only when it runs.
The project's calibration research, GPU proof scripts and live-loop harness are not part of the
package: they live in the repository's ``lab/`` folder.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Sequence

from governor.contracts.package import install_hint

# What every benchmark needs beyond the package's own dependencies (the ``bench`` extra).
NEEDS = ("numpy",)

# name → (module, one-line summary)
BENCHES: dict[str, tuple[str, str]] = {
    "service": ("governor.bench.service", "the service's own overhead vs a bare aiohttp server"),
    "exporter": ("governor.bench.exporter",
                 "exporter scrape latency vs prometheus_client's own server"),
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
    missing = [name for name in NEEDS if importlib.util.find_spec(name) is None]
    if missing:
        print(f"governor bench: the benchmarks need {', '.join(missing)} "
              f"({install_hint('bench')})", file=sys.stderr)
        return 2
    run: Callable[[list[str]], int] = importlib.import_module(entry[0]).main
    return run(args[1:])
