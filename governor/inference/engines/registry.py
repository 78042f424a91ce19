"""Engines by name, discovered as vLLM discovers its plugins: through entry points.

Each engine is an entry point of the group ``governor.engines`` that names an
:class:`EngineEntry`; ``governor serve --engine NAME`` runs the one of that name, and only that
one's module is imported (vLLM is heavy). The project declares its own two the same way::

    [project.entry-points."governor.engines"]
    sim = "governor.inference.engines.sim.engine:ENGINE"
    vllm = "governor.inference.engines.vllm.engine:ENGINE"

so a third engine, in this project or in a package of its own, is its module (the engine and its
``ENGINE``) and one such line; nothing else lists it (docs/contributing.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Final

from prometheus_client import CollectorRegistry

from governor.inference.engines.base import Engine
from governor.inference.engines.settings import EngineSettings

GROUP: Final = "governor.engines"

EngineFactory = Callable[[EngineSettings, CollectorRegistry], Engine]


def _accept(settings: EngineSettings) -> None:
    return None


@dataclass(frozen=True)
class EngineEntry:
    """One engine: what ``--help`` says of it, how it is built, and what it refuses at once.

    ``check`` runs where the options enter (``governor serve``'s command line) and raises
    :class:`ValueError` for settings the engine can never run, so the user hears it before
    anything starts; ``create`` builds the engine (it starts in the background later).
    """

    summary: str
    create: EngineFactory
    check: Callable[[EngineSettings], None] = _accept


class UnknownEngine(ValueError):
    pass


def engine_names() -> tuple[str, ...]:
    """The installed engines' names, sorted (without importing any of them)."""
    return tuple(sorted({point.name for point in metadata.entry_points(group=GROUP)}))


def load_engine(name: str) -> EngineEntry:
    """The engine ``name`` names; :class:`UnknownEngine` listing the installed ones if none."""
    points = [point for point in metadata.entry_points(group=GROUP) if point.name == name]
    if not points:
        known = ", ".join(repr(n) for n in engine_names()) or "none is installed"
        raise UnknownEngine(f"unknown engine {name!r}: expected {known}")
    entry = points[0].load()
    if not isinstance(entry, EngineEntry):
        raise TypeError(f"the entry point {points[0].value!r} ({GROUP}) must name an "
                        f"EngineEntry, not {type(entry).__name__}")
    return entry


def create_engine(settings: EngineSettings, registry: CollectorRegistry) -> Engine:
    """The engine ``settings.kind`` names, registering its ``vllm:*`` series into ``registry``."""
    return load_engine(settings.kind).create(settings, registry)
