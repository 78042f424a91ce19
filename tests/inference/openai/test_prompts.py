"""Preparing prompts: in the service's own text threads, and bounded before tokenizing."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from governor.inference import keys
from governor.inference.engines.base import BatchingLimits
from governor.inference.engines.sim.engine import SimEngine
from governor.inference.engines.sim.presets import get_preset
from governor.inference.openai.prompts import bytes_over
from governor.inference.textwork import TEXT_THREAD_PREFIX
from tests.inference.conftest import ServiceFactory


class SpyEngine(SimEngine):
    """The tiny sim engine, noting which thread renders and tokenizes, and what."""

    def __init__(self) -> None:
        super().__init__(get_preset("tiny"), model_name="tiny",
                         registry=CollectorRegistry(), floor=BatchingLimits(1, 64))
        self.threads: list[str] = []
        self.tokenized: list[int] = []  # lengths of the texts tokenized

    def render_chat(self, messages: Sequence[Mapping[str, str]]) -> str:
        self.threads.append(threading.current_thread().name)
        return super().render_chat(messages)

    def tokenize(self, text: str) -> Sequence[int]:
        self.threads.append(threading.current_thread().name)
        self.tokenized.append(len(text))
        return super().tokenize(text)


async def post(url: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as response:
        return response.status, json.loads(await response.read())


async def test_rendering_and_tokenizing_run_in_the_text_threads_not_on_the_loop(
    make_service: ServiceFactory,
) -> None:
    engine = SpyEngine()
    service = await make_service(engine=engine)
    chat = {"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    assert (await post(f"{service.url}/v1/chat/completions", chat))[0] == 200
    completion = {"model": "tiny", "max_tokens": 2, "prompt": "hi"}
    assert (await post(f"{service.url}/v1/completions", completion))[0] == 200
    assert len(engine.threads) == 3  # render and tokenize the chat, tokenize the completion
    # Their own bounded pool, apart from the loop's default executor (which renders /metrics).
    assert all(name.startswith(TEXT_THREAD_PREFIX) for name in engine.threads), engine.threads
    assert len(set(engine.threads)) <= service.app[keys.CONFIG].tokenizer_threads


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/completions"])
async def test_a_prompt_too_long_in_bytes_is_refused_without_tokenizing_it(
    make_service: ServiceFactory, route: str
) -> None:
    engine = SpyEngine()
    service = await make_service(engine=engine, max_body_bytes=8 * 1024 * 1024)
    limit = engine.max_model_len * engine.max_token_bytes
    text = "x" * (limit + 1)
    body: dict[str, object] = {"model": "tiny", "max_tokens": 1}
    if route == "/v1/completions":
        body["prompt"] = text
    else:
        body["messages"] = [{"role": "user", "content": text}]
    code, payload = await post(service.url + route, body)
    assert code == 400
    error = payload["error"]
    assert isinstance(error, dict)
    assert error["code"] == "context_length_exceeded"
    assert f"at most {limit} bytes" in error["message"]
    assert engine.tokenized == []


async def test_a_prompt_within_the_byte_bound_is_still_measured_in_tokens(
    make_service: ServiceFactory,
) -> None:
    """The bound only refuses what cannot fit; the exact check is on the tokens."""
    engine = SpyEngine()
    service = await make_service(engine=engine)
    text = "word " * engine.max_model_len  # within the byte bound, over the context in tokens
    code, payload = await post(f"{service.url}/v1/completions",
                               {"model": "tiny", "prompt": text})
    assert code == 400
    assert "in the prompt" in payload["error"]["message"]  # type: ignore[index]
    assert engine.tokenized == [len(text)]


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        pytest.param("abc", 3, None, id="ASCII at the limit"),
        pytest.param("abcd", 3, 4, id="ASCII over the limit"),
        pytest.param("éé", 4, None, id="two bytes a character, at the limit"),
        pytest.param("ééé", 5, 6, id="two bytes a character, over the limit"),
        pytest.param("💥", 4, None, id="four bytes, at the limit"),
        pytest.param("💥💥", 7, 8, id="four bytes a character, over the limit"),
        pytest.param("é" * 10, 5, 10, id="more characters than the limit has bytes"),
        pytest.param("é" * 10, 40, None, id="four bytes a character would still fit"),
    ],
)
def test_bytes_over_measures_only_what_it_must(
    text: str, limit: int, expected: int | None
) -> None:
    assert bytes_over(text, limit) == expected
