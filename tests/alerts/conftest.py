"""Fixtures for the alerts tests: the ``--update-golden`` switch and the real tools."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def pytest_addoption(parser: pytest.Parser) -> None:
    # Another package's conftest may offer the same switch; one registration serves both.
    with contextlib.suppress(ValueError):
        parser.addoption(
            "--update-golden", action="store_true", default=False,
            help="rewrite golden files from the generators instead of comparing with them "
                 "(or set GOVERNOR_UPDATE_GOLDEN=1)",
        )


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    # pytest knows the option only when this conftest loads at start-up (`pytest tests/alerts
    # --update-golden`); from the repository root, GOVERNOR_UPDATE_GOLDEN=1 does the same.
    flag = bool(request.config.getoption("--update-golden", default=False))
    return flag or os.environ.get("GOVERNOR_UPDATE_GOLDEN", "") in {"1", "true", "yes"}


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
