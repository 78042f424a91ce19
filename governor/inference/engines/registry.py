"""Build an engine by kind. Each engine is imported only when chosen (vLLM is heavy)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from governor.inference.engines.base import Engine
from governor.inference.engines.settings import EngineSettings


def create_engine(settings: EngineSettings, registry: CollectorRegistry) -> Engine:
    """The engine ``settings.kind`` names, registering its ``vllm:*`` series into ``registry``."""
    if settings.kind == "sim":
        from governor.inference.engines.sim.engine import create_sim_engine

        return create_sim_engine(settings, registry)
    if settings.kind == "vllm":
        from governor.inference.engines.vllm.engine import create_vllm_engine

        return create_vllm_engine(settings, registry)
    raise ValueError(f"unknown engine {settings.kind!r}: expected 'sim' or 'vllm'")
