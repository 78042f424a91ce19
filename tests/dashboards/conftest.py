"""Fixtures for the dashboards tests: the ``--update-golden`` switch and promtool."""

from __future__ import annotations

import contextlib
import shutil

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    # tests/alerts/conftest.py declares the same switch; when both directories are collected
    # the second declaration is refused, and one switch serves both.
    with contextlib.suppress(ValueError):
        parser.addoption(
            "--update-golden", action="store_true", default=False,
            help="rewrite the golden files from the generators instead of comparing with them",
        )


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden", default=False))


@pytest.fixture(scope="session")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not installed (Debian: apt-get install prometheus, or "
                    "`make system-deps`)")
    return path
