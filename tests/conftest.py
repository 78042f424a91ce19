"""Project-wide test switches: ``--update-golden`` (or ``GOVERNOR_UPDATE_GOLDEN=1``)."""

from __future__ import annotations

import os

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden", action="store_true", default=False,
        help="rewrite golden files from the generators instead of comparing with them "
             "(or set GOVERNOR_UPDATE_GOLDEN=1)",
    )


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    flag = bool(request.config.getoption("--update-golden"))
    return flag or os.environ.get("GOVERNOR_UPDATE_GOLDEN", "") in {"1", "true", "yes"}
