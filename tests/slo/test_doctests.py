"""The usage examples in the spec's docstrings run (the suite does not collect doctests)."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["governor.slo.roles", "governor.slo.probe",
                                  "governor.slo.probe_fields", "governor.slo.autoscaling"])
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
