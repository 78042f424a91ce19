"""Project-wide test switches: ``--update-golden`` (or ``GOVERNOR_UPDATE_GOLDEN=1``); and how
``make test`` spreads the suite over processes (:mod:`tests.support.parallel`)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.support import parallel


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


def pytest_configure(config: pytest.Config) -> None:
    parallel.share_ports(config)


# Every test of the session passes here, lab/tests' too.
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    parallel.on_worker(config, items)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:  # pytest-xdist's, which has no types
    parallel.configure_node(node)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    return parallel.make_scheduler(config, log)


def pytest_unconfigure(config: pytest.Config) -> None:
    parallel.unconfigure(config)
