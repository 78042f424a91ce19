"""The usage examples in the contracts' docstrings run (the suite does not collect doctests)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["governor.contracts", "governor.contracts.declaration",
           "governor.contracts.instruments", "governor.contracts.families",
           "governor.contracts.endpoints", "governor.contracts.promql",
           "governor.contracts.metrics.slo", "governor.contracts.metrics.dcgm",
           "governor.dashboards.variables",
           "governor.common.cli", "governor.contracts.batching", "governor.common.quantiles",
           "governor.common.commands", "governor.common.prometheus_api", "governor.common.answers",
           "governor.contracts.alerting", "governor.contracts.causes",
           "governor.contracts.simdevice", "governor.contracts.metrics.verdict",
           "governor.contracts.engine_core", "governor.contracts.metrics.probe"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
