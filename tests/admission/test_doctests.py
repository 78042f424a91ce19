"""The usage examples in the admission policies' docstrings, and their admin body's, run (the
suite does not collect doctests)."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["governor.admission.policy", "governor.admission.deadline",
                                  "governor.admission.refusal",
                                  "governor.contracts.admission"])
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
