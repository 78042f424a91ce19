"""The distribution the project installs as, and its version.

The import namespace and the command are ``governor``; the distribution on the package index is
``governor-slo`` (the name ``governor`` there belongs to an unrelated project), so install hints
say ``pip install 'governor-slo[gpu]'``.
"""

from __future__ import annotations

from importlib import metadata
from typing import Final

DISTRIBUTION: Final = "governor-slo"


def version() -> str:
    """The installed version, or ``dev`` when running from a source tree that is not installed."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "dev"


def install_hint(extra: str) -> str:
    """``pip install 'governor-slo[gpu]'``: what to run for an optional dependency."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"
