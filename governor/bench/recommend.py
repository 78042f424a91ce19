"""``governor recommend``: the command's entry, which checks the ``bench`` extra is installed
before the search (:mod:`governor.bench.controller.recommend`) imports the simulated engine."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Sequence

from governor.bench import NEEDS
from governor.contracts.package import install_hint


def main(argv: Sequence[str] | None = None) -> int:
    missing = [name for name in NEEDS if importlib.util.find_spec(name) is None]
    if missing:
        print(f"governor recommend: error: the search needs {', '.join(missing)} "
              f"({install_hint('bench')})", file=sys.stderr)
        return 2
    run: Callable[[Sequence[str] | None], int] = \
        importlib.import_module("governor.bench.controller.recommend").main
    return run(argv)
