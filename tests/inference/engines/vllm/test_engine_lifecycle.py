"""Engine life-cycle pieces that need no running vLLM."""

from __future__ import annotations

import asyncio

import prometheus_client
import pytest
from prometheus_client import CollectorRegistry

from inference.engines.base import EngineError, EngineErrorKind
from inference.engines.settings import EngineSettings
from inference.engines.vllm.args import EngineArgsError
from inference.engines.vllm.engine import (
    _shut_down_when_built,
    create_vllm_engine,
    plain_chat,
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
    _shut_down_when_built(built)
    assert llm.shut_down
    failed: asyncio.Future[FakeLLM] = loop.create_future()
    failed.set_exception(RuntimeError("engine core failed to start"))
    _shut_down_when_built(failed)  # nothing to shut down, and no error raised
    failed.exception()


def test_the_vllm_engine_needs_a_model() -> None:
    with pytest.raises(EngineArgsError, match="--model"):
        create_vllm_engine(EngineSettings(kind="vllm"), CollectorRegistry())


async def test_before_start_the_engine_is_not_ready_and_refuses_work() -> None:
    registry = CollectorRegistry(auto_describe=True)
    engine = create_vllm_engine(EngineSettings(kind="vllm", model="/nowhere"), registry)
    assert not engine.ready
    with pytest.raises(EngineError) as raised:
        await engine.tokenize("hello")
    assert raised.value.kind is EngineErrorKind.DEAD
    await engine.close()
    await engine.close()  # idempotent


def test_the_bridge_is_not_registered_into_vllms_own_registry() -> None:
    # In the global registry the bridge would re-export itself forever (RecursionError).
    create_vllm_engine(EngineSettings(kind="vllm", model="/m"), prometheus_client.REGISTRY)
    names = [family.name for family in prometheus_client.REGISTRY.collect()]
    assert len(names) == len(set(names))


def test_a_model_without_a_chat_template_gets_a_plain_prompt() -> None:
    assert plain_chat([{"role": "system", "content": "be brief"},
                       {"role": "user", "content": "hi"}]) == (
        "system: be brief\nuser: hi\nassistant:"
    )
