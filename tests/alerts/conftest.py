"""Fixtures for the alerts tests: the ``--update-golden`` switch and the real tools."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden", action="store_true", default=False,
        help="rewrite tests/alerts/golden/ from the generator instead of comparing with it",
    )


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    # The option exists only when this conftest was loaded at start-up; default to comparing.
    return bool(request.config.getoption("--update-golden", default=False))


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
