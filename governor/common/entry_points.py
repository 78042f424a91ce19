"""Parts found by name through entry points, as vLLM finds its plugins.

An installed distribution declares a part under a group (``governor.engines``,
``governor.actuators``) in its metadata; listing the names imports nothing, and loading imports
only the module of the one asked for::

    entry = load_entry_point("governor.engines", "sim", EngineEntry, noun="engine")
"""

from __future__ import annotations

from importlib import metadata
from typing import TypeVar

T = TypeVar("T")


class UnknownEntryPoint(ValueError):
    """No installed distribution declares that name in that group."""


def entry_point_names(group: str) -> tuple[str, ...]:
    """The names the installed distributions declare in ``group``, sorted."""
    return tuple(sorted({point.name for point in metadata.entry_points(group=group)}))


def load_entry_point(group: str, name: str, kind: type[T], *, noun: str) -> T:
    """The object ``name`` names in ``group``: :class:`UnknownEntryPoint` listing the installed
    names if none, :class:`TypeError` if it is not a ``kind``."""
    points = [point for point in metadata.entry_points(group=group) if point.name == name]
    if not points:
        known = ", ".join(repr(n) for n in entry_point_names(group)) or "none is installed"
        raise UnknownEntryPoint(f"unknown {noun} {name!r}: expected {known}")
    entry = points[0].load()
    if not isinstance(entry, kind):
        raise TypeError(f"the entry point {points[0].value!r} ({group}) must name an "
                        f"{kind.__name__}, not {type(entry).__name__}")
    return entry
