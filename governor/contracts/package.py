"""The distribution the project installs as, and its version.

The import namespace and the command are ``governor``; the distribution is ``governor-slo`` (the
name ``governor`` on the package index belongs to an unrelated project). It is installed from a
wheel built from the checkout (``make wheel``) until it is published, so an install hint names
what an extra would bring, read from the installed metadata, rather than ``governor-slo[gpu]``,
which only a package index can resolve.
"""

from __future__ import annotations

import re
from importlib import metadata
from typing import Final

DISTRIBUTION: Final = "governor-slo"


def version() -> str:
    """The installed version, or ``dev`` when running from a source tree that is not installed."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "dev"


def extra_requirements(extra: str) -> list[str]:
    """What ``governor-slo[extra]`` adds, as the installed metadata declares it (empty when the
    project is not installed)::

        extra_requirements("gpu")  # ['nvidia-ml-py>=12.535']
    """
    try:
        requires = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return []
    marker = re.compile(rf"""extra\s*==\s*["']{re.escape(extra)}["']""")
    return [r.split(";")[0].strip() for r in requires if ";" in r and marker.search(r)]


def install_hint(extra: str) -> str:
    """``pip install 'nvidia-ml-py>=12.535'``: what to run for an optional dependency."""
    wanted = extra_requirements(extra)
    if not wanted:
        return f"pip install '{DISTRIBUTION}[{extra}]'"
    return "pip install " + " ".join(f"'{r}'" for r in wanted)
