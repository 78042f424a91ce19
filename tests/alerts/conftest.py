"""Fixtures for the alerts tests: the real tools."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed (Debian: apt-get install prometheus "
                    "prometheus-alertmanager, or `make system-deps`)")
    return path


@pytest.fixture(scope="session")
def promtool() -> str:
    return _tool("promtool")


@pytest.fixture(scope="session")
def amtool() -> str:
    return _tool("amtool")
