"""Run pytest as on the virtualenv ``make venv-test`` builds: whatever vLLM alone brought into
this one (fastapi, torch, vllm itself …) cannot be imported.

The distributions that virtualenv holds are those Governor's install line in the Makefile asks
for (``-e '.[test,bench,dashboards]'``), with everything they require, transitively; a module
whose distributions are all outside that set is refused with ``ModuleNotFoundError``, as on that
virtualenv. ``make unit`` and ``make test-compose`` collect the whole suite there::

    python -m tests.support.venv_test --collect-only -q -p no:cacheprovider
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import re
import sys
from collections.abc import Iterable, Sequence
from importlib import metadata
from pathlib import Path
from types import ModuleType

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
# What a virtualenv holds before anything is installed into it.
SEED = ("pip", "setuptools", "wheel")


def install_extras(makefile: Path = ROOT / "Makefile") -> tuple[str, ...]:
    """The extras the ``.stamp-test`` recipe installs Governor with."""
    recipe = makefile.read_text(encoding="utf-8").split("/.stamp-test:", 1)[1].split("\n\n")[0]
    found = re.search(r"install -q -e '\.\[([a-z,-]+)\]'", recipe)
    if found is None:
        raise ValueError(f"{makefile}: no `pip install -e '.[…]'` in the .stamp-test recipe")
    return tuple(found.group(1).split(","))


def needed(roots: Iterable[str], path: Sequence[str] | None = None) -> set[str]:
    """Canonical names of the installed distributions ``roots`` bring, transitively (those of
    this environment, or of the folders ``path`` names)."""
    queue = [Requirement(r) for r in roots]
    seen: set[tuple[str, frozenset[str]]] = set()
    names: set[str] = set()
    while queue:
        requirement = queue.pop()
        name = canonicalize_name(requirement.name)
        key = (name, frozenset(requirement.extras))
        if key in seen:
            continue
        seen.add(key)
        found = next(iter(metadata.distributions(name=name) if path is None
                          else metadata.distributions(name=name, path=list(path))), None)
        if found is None:
            continue
        requires = found.requires or []
        names.add(name)
        extras = set(requirement.extras) or {""}
        for text in requires:
            sub = Requirement(text)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in extras):
                queue.append(sub)
    return names


def refused(allowed: set[str]) -> frozenset[str]:
    """Top-level modules that only distributions outside ``allowed`` provide."""
    return frozenset(module for module, dists in metadata.packages_distributions().items()
                     if not {canonicalize_name(d) for d in dists} & allowed)


class _Refuse(importlib.abc.MetaPathFinder):
    def __init__(self, modules: frozenset[str]) -> None:
        self.modules = modules

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.partition(".")[0] in self.modules:
            raise ModuleNotFoundError(f"No module named {fullname!r} (not on make venv-test's "
                                      "virtualenv)", name=fullname)
        return None


def main(argv: Sequence[str]) -> int:
    import pytest

    roots = [f"governor-slo[{','.join(install_extras())}]", *SEED]
    sys.meta_path.insert(0, _Refuse(refused(needed(roots))))
    return int(pytest.main(list(argv)))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
