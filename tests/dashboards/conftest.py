"""Fixtures for the dashboards tests: promtool."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture(scope="session")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not installed (Debian: apt-get install prometheus, or "
                    "`make system-deps`)")
    return path
