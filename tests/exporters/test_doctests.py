"""The usage examples in the exporter's docstrings run (the suite does not collect doctests)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["exporters.config", "exporters.exposition", "exporters.gpu.calls",
           "exporters.gpu.errors", "exporters.gpu.fake", "exporters.gpu.processes",
           "exporters.gpu.sampler"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
