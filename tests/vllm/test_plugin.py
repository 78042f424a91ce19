"""The ``vllm.general_plugins`` entry point: declared, importable, idempotent, and honest about
schedulers it cannot retune."""

from __future__ import annotations

import tomllib
from importlib import import_module
from pathlib import Path
from types import SimpleNamespace

import pytest

from governor.vllm import plugin
from tests.inference.engines.vllm.conftest import (
    ENTRY_POINT_GROUP,
    ENTRY_POINT_NAME,
    ENTRY_POINT_VALUE,
)
from tests.vllm.test_knobs import ActiveScheduler

ROOT = Path(__file__).resolve().parents[2]


def test_pyproject_declares_the_entry_point_vllm_loads() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    declared = project["project"]["entry-points"][ENTRY_POINT_GROUP]
    assert declared[ENTRY_POINT_NAME] == ENTRY_POINT_VALUE
    module, _, attribute = ENTRY_POINT_VALUE.partition(":")
    assert getattr(import_module(module), attribute) is plugin.register


def test_the_utilities_report_and_set_on_a_retunable_scheduler() -> None:
    core = SimpleNamespace(scheduler=ActiveScheduler())
    assert plugin._report(core)["supported"] is True
    report = plugin._set(core, 3, 1024)
    assert (report["max_num_seqs"], report["max_num_batched_tokens"]) == (3, 1024)


def test_a_scheduler_without_the_hooks_is_reported_unsupported_not_crashed() -> None:
    core = SimpleNamespace(scheduler=SimpleNamespace(max_num_scheduled_tokens=512))
    report = plugin._report(core)
    assert report["supported"] is False
    assert "max_num_running_reqs" in report["reason"]


@pytest.mark.vllm
def test_register_adds_the_utility_methods_to_vllms_engine_core_once() -> None:
    core_module = pytest.importorskip("vllm.v1.engine.core")
    plugin.register()
    plugin.register()  # vLLM may call it more than once per process
    engine_core = core_module.EngineCore
    assert getattr(engine_core, plugin.UTILITY_REPORT) is plugin._report
    assert getattr(engine_core, plugin.UTILITY_SET) is plugin._set


def test_pyproject_declares_the_endpoint_plugin_vllm_loads() -> None:
    from governor.vllm.endpoint import AdminEndpoints

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    declared = project["project"]["entry-points"]["vllm.endpoint_plugins"]
    module, _, attribute = declared[AdminEndpoints.name].partition(":")
    assert getattr(import_module(module), attribute) is AdminEndpoints
