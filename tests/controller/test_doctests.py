"""The usage examples in the controller's and the benchmark's docstrings run and stay true."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

MODULES = [
    "governor.controller.actuator", "governor.controller.intake",
    "governor.controller.observe", "governor.controller.queries", "governor.controller.ranks",
    "governor.controller.slo",
    "governor.controller.law.spike", "governor.controller.state", "governor.controller.law.goodput",
    "governor.controller.law.timestamps",
    "governor.bench.controller.pipeline", "governor.bench.controller.monitoring",
    "governor.bench.controller.scoring", "governor.bench.controller.workload",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parents[2])  # the pipeline example reads deploy/
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0
    assert result.failed == 0
