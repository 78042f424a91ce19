"""Actuators by name, discovered through entry points as engines are.

An actuator reads and moves one target's batching limits. Each is an entry point of the group
``governor.actuators`` naming an :class:`ActuatorEntry`; ``governor controller --actuator NAME``
uses the one of that name for every target. The project declares its own::

    [project.entry-points."governor.actuators"]
    admin-api = "governor.controller.actuator:ACTUATOR"

(``GET``/``PUT /admin/batching``, which ``governor serve`` and stock ``vllm serve`` with
Governor's plugins both answer), so another way of moving the limits is its module and one line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Final, Protocol

import aiohttp

from governor.common.secrets import Secret
from governor.controller.model import Limits, Target, TargetLimits

GROUP: Final = "governor.actuators"
DEFAULT: Final = "admin-api"


class Actuator(Protocol):
    async def read(self, target: Target) -> TargetLimits: ...

    async def apply(self, target: Target, limits: Limits) -> TargetLimits: ...


@dataclass(frozen=True)
class ActuatorEntry:
    """One actuator: what ``--help`` says of it, and how it is built on the controller's HTTP
    session with the admin token (``None`` when none is configured)."""

    summary: str
    create: Callable[[aiohttp.ClientSession, Secret | None], Actuator]


def actuator_names() -> tuple[str, ...]:
    return tuple(sorted({point.name for point in metadata.entry_points(group=GROUP)}))


def load_actuator(name: str) -> ActuatorEntry:
    points = [point for point in metadata.entry_points(group=GROUP) if point.name == name]
    if not points:
        known = ", ".join(repr(n) for n in actuator_names()) or "none is installed"
        raise ValueError(f"unknown actuator {name!r}: expected {known}")
    entry = points[0].load()
    if not isinstance(entry, ActuatorEntry):
        raise TypeError(f"the entry point {points[0].value!r} ({GROUP}) must name an "
                        f"ActuatorEntry, not {type(entry).__name__}")
    return entry
