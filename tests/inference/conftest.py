"""Fixtures: the real service app (``create_app``) on a real port, over the sim engine."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import openai
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from prometheus_client import CollectorRegistry

from governor.common.process import wait_http_ok
from governor.common.secrets import Secret
from governor.inference import keys
from governor.inference.app import create_app
from governor.inference.config import ServiceConfig
from governor.inference.engines.base import Engine
from governor.inference.engines.settings import EngineSettings
from governor.inference.warmup import WarmupSettings
from tests.support.scripted import Script, ScriptedEngine

ADMIN_TOKEN = "admin-test-token-7f3a"
SIM = EngineSettings(kind="sim", preset="tiny", seed=7)


class Service:
    """A running service: its URL, its app (engine, registry), and clients for it."""

    def __init__(self, server: TestServer) -> None:
        self.server = server
        self.app: web.Application = server.app
        self.url = str(server.make_url("")).rstrip("/")

    @property
    def engine(self) -> Engine:
        return self.app[keys.ENGINE]

    @property
    def registry(self) -> CollectorRegistry:
        return self.app[keys.REGISTRY]

    def openai(self, **kwargs: Any) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key="unused", max_retries=0,
                                  **kwargs)

    def sample(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        return self.registry.get_sample_value(name, labels or {})


ServiceFactory = Callable[..., Awaitable[Service]]


@pytest.fixture
async def make_service(
    aiohttp_server: Callable[..., Awaitable[TestServer]],
) -> ServiceFactory:
    async def make(
        config: ServiceConfig | None = None, *, engine: Engine | None = None,
        env: dict[str, str] | None = None, wait: bool = True, **overrides: Any,
    ) -> Service:
        # No warm-up unless a test asks for one (test_warmup.py): a scripted engine fails on
        # purpose, and /health's 503s while it ran would count as server errors.
        base = config or ServiceConfig(engine=SIM, admin_token=Secret(ADMIN_TOKEN),
                                       warmup=WarmupSettings(0))
        config = replace(base, **overrides)
        if engine is None:
            app = create_app(config, env=env or {})
        else:
            chosen = engine
            app = create_app(config, engine_factory=lambda _c, _r: chosen, env=env or {})
        service = Service(await aiohttp_server(app))
        if wait:  # /health answers 503 until the engine has started; sim starts at once
            await wait_http_ok(f"{service.url}/health", limit_seconds=30, poll_seconds=0.05)
        return service

    return make


@pytest.fixture
async def service(make_service: ServiceFactory) -> Service:
    return await make_service()


@pytest.fixture
async def scripted(make_service: ServiceFactory) -> Callable[..., Awaitable[Service]]:
    async def make(script: Script | None = None, **overrides: Any) -> Service:
        return await make_service(engine=ScriptedEngine(script), wait=False, **overrides)

    return make
