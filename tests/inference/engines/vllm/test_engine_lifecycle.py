"""Creating the engine (every mistake one clear error, before anything starts) and the
life-cycle pieces that need no running engine."""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace
from pathlib import Path

import prometheus_client
import pytest
from prometheus_client import CollectorRegistry

from governor.inference.engines.base import EngineError, EngineErrorKind
from governor.inference.engines.settings import EngineSettings
from governor.inference.engines.vllm.args import EngineArgsError
from governor.inference.engines.vllm.engine import (
    create_vllm_engine,
    plain_chat,
    shut_down_when_built,
)


class FakeLLM:
    def __init__(self) -> None:
        self.shut_down = False

    def shutdown(self) -> None:
        self.shut_down = True


async def test_an_engine_built_after_its_start_was_cancelled_is_shut_down() -> None:
    loop = asyncio.get_running_loop()
    built: asyncio.Future[FakeLLM] = loop.create_future()
    llm = FakeLLM()
    built.set_result(llm)
    shut_down_when_built(built)
    assert llm.shut_down
    failed: asyncio.Future[FakeLLM] = loop.create_future()
    failed.set_exception(RuntimeError("engine core failed to start"))
    shut_down_when_built(failed)  # nothing to shut down, and no error raised
    failed.exception()


def test_a_model_without_a_chat_template_gets_a_plain_prompt() -> None:
    assert plain_chat([{"role": "system", "content": "be brief"},
                       {"role": "user", "content": "hi"}]) == (
        "system: be brief\nuser: hi\nassistant:"
    )


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (EngineSettings(kind="vllm"), "needs --model"),
        (EngineSettings(kind="vllm", model="/no/such/model"), "does not exist"),
    ],
    ids=["no model", "missing model directory"],
)
def test_a_missing_model_is_refused_before_vllm_is_imported(
    settings: EngineSettings, message: str
) -> None:
    with pytest.raises(EngineArgsError, match=message):
        create_vllm_engine(settings, CollectorRegistry())


@pytest.fixture
def tiny_settings(tiny_model: Path) -> EngineSettings:
    return EngineSettings(kind="vllm", model=str(tiny_model), max_model_len=256,
                          extra_args=("dtype=float32", "load_format=dummy",
                                      "generation_config=vllm"))


@pytest.mark.vllm
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("gpu_memory_utilization=2.0",), "gpu_memory_utilization"),
        (("dtype=float77",), "dtype"),
        (("dtyp=float32",), "did you mean dtype"),
        (("max_num_seqs=4",), "--max-num-seqs"),
    ],
    ids=["value vLLM refuses", "unknown dtype", "misspelt field", "owned setting"],
)
def test_engine_arguments_vllm_refuses_are_one_clear_error_at_creation(
    tiny_settings: EngineSettings, extra: tuple[str, ...], message: str
) -> None:
    settings = replace(tiny_settings, extra_args=(*tiny_settings.extra_args, *extra))
    with pytest.raises(EngineArgsError, match=message) as raised:
        create_vllm_engine(settings, CollectorRegistry())
    assert "\n" not in str(raised.value)  # one line for the command line


@pytest.mark.vllm
def test_a_context_longer_than_the_model_allows_is_refused(tiny_settings: EngineSettings) -> None:
    with pytest.raises(EngineArgsError, match="max_model_len"):
        create_vllm_engine(replace(tiny_settings, max_model_len=10**7), CollectorRegistry())


@pytest.mark.vllm
async def test_before_start_the_engine_is_not_ready_and_refuses_work(
    tiny_settings: EngineSettings,
) -> None:
    engine = create_vllm_engine(tiny_settings, CollectorRegistry(auto_describe=True))
    assert not engine.ready
    assert engine.retuning_problem == "the engine has not started"
    with pytest.raises(EngineError) as raised:
        engine.tokenize("hello")
    assert raised.value.kind is EngineErrorKind.DEAD
    await engine.close()
    await engine.close()  # idempotent


@pytest.mark.vllm
def test_the_bridge_is_not_registered_into_vllms_own_registry(
    tiny_settings: EngineSettings,
) -> None:
    # In the global registry the bridge would re-export itself forever (RecursionError).
    create_vllm_engine(tiny_settings, prometheus_client.REGISTRY)
    names = [family.name for family in prometheus_client.REGISTRY.collect()]
    assert len(names) == len(set(names))


@pytest.mark.vllm
@pytest.mark.integration
def test_a_model_without_weights_makes_serve_exit_with_the_root_cause(
    tiny_model: Path, tmp_path: Path,
) -> None:
    """vLLM's own server exits when its engine cannot start; so does ours, with status 3 and the
    cause in one line, so that compose and Kubernetes can restart it (not a 503 forever)."""
    import subprocess
    import sys

    from governor.common.process import free_port

    port = free_port()
    argv = [sys.executable, "-m", "governor", "serve", "--engine", "vllm",
            "--model", str(tiny_model), "--port", str(port), "--max-model-len", "256",
            "--engine-arg", "dtype=float32", "--engine-arg", "enforce_eager=true",
            "--engine-arg", "generation_config=vllm",
            "--engine-arg", f"kv_cache_memory_bytes={64 * 2**20}"]  # no dummy weights: none exist
    done = subprocess.run(argv, capture_output=True, text=True, timeout=240, check=False,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    assert done.returncode == 3, done.stderr[-3000:]
    failure = [line for line in done.stderr.splitlines()
               if "the engine failed to start:" in line]
    assert len(failure) == 1, done.stderr[-3000:]
