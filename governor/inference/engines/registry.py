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
from typing import Final

from prometheus_client import CollectorRegistry

from governor.common.entry_points import entry_point_names, load_entry_point
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


def engine_names() -> tuple[str, ...]:
    """The installed engines' names, sorted (without importing any of them)."""
    return entry_point_names(GROUP)


def load_engine(name: str) -> EngineEntry:
    """The engine ``name`` names; :class:`~governor.common.entry_points.UnknownEntryPoint`
    listing the installed ones if none."""
    return load_entry_point(GROUP, name, EngineEntry, noun="engine")


def create_engine(settings: EngineSettings, registry: CollectorRegistry) -> Engine:
    """The engine ``settings.kind`` names, registering its ``vllm:*`` series into ``registry``."""
    return load_engine(settings.kind).create(settings, registry)
