"""The usage examples in the exporter's docstrings run (the suite does not collect doctests)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["governor.exporters.config", "governor.exporters.exposition",
           "governor.exporters.gpu.calls", "governor.exporters.gpu.errors",
           "governor.exporters.gpu.fake", "governor.exporters.gpu.miglayout",
           "governor.exporters.gpu.processes",
           "governor.exporters.gpu.sampler"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
