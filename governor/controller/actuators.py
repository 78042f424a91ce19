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
from typing import Final, Protocol

import aiohttp

from governor.common.entry_points import entry_point_names, load_entry_point
from governor.common.secrets import Secret
from governor.controller.model import Limits, Target, TargetLimits

GROUP: Final = "governor.actuators"
DEFAULT: Final = "admin-api"


class Actuator(Protocol):
    async def read(self, target: Target) -> TargetLimits: ...

    async def apply(self, target: Target, limits: Limits) -> TargetLimits: ...

    async def set_slack(self, target: Target, slack: float) -> float:
        """The law's admission knob: the deadline slack of the target's gate."""
        ...

    async def set_queued_tokens(self, target: Target, bound: int | None) -> int | None:
        """vLLM's own admission bound, ``max_num_queued_tokens`` (``None``: unbounded)."""
        ...


@dataclass(frozen=True)
class ActuatorEntry:
    """One actuator: what ``--help`` says of it, and how it is built on the controller's HTTP
    session with the admin token (``None`` when none is configured)."""

    summary: str
    create: Callable[[aiohttp.ClientSession, Secret | None], Actuator]


def actuator_names() -> tuple[str, ...]:
    return entry_point_names(GROUP)


def load_actuator(name: str) -> ActuatorEntry:
    return load_entry_point(GROUP, name, ActuatorEntry, noun="actuator")
