"""The documented make targets work on the virtualenv they build: ``make unit`` and
``make test-compose`` run pytest on ``make venv-test``'s, which has no vLLM and nothing vLLM
alone brings (:mod:`tests.support.venv_test` refuses those modules here)."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest

from tests.support.venv_test import ROOT, install_extras, needed, refused

pytestmark = pytest.mark.slow  # collects the whole suite: ~20 s


def test_the_stand_in_refuses_what_only_vllm_brings_and_keeps_what_the_extras_do() -> None:
    assert set(install_extras()) >= {"test", "bench"}
    allowed = needed([f"governor-slo[{','.join(install_extras())}]"])
    assert {"pytest", "aiohttp", "numpy", "openai"} <= allowed
    modules = refused(allowed)
    if "fastapi" in metadata.packages_distributions():  # vLLM's, where vLLM is installed
        assert "fastapi" in modules
    assert not {"pytest", "aiohttp", "numpy", "yaml", "governor"} & modules


def test_the_whole_suite_collects_on_make_venv_tests_virtualenv() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.venv_test", "--collect-only", "-q",
         "-p", "no:cacheprovider"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
