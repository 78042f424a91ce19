"""Fixtures the benchmark tests share with the component tests they measure."""

from __future__ import annotations

import pytest

from tests.exporters.conftest import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
