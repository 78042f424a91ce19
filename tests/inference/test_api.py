"""The real ``openai`` client, unchanged, against the service on the simulated engine."""

from __future__ import annotations

from typing import cast

import aiohttp
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.inference.conftest import Service

PLAIN: list[dict[str, str]] = [
    {"role": "system", "content": "Translate to French."},
    {"role": "user", "content": "The cat sleeps on the warm mat tonight."},
]
MESSAGES = cast("list[ChatCompletionMessageParam]", PLAIN)


async def model_name(service: Service) -> str:
    models = await service.openai().models.list()
    return models.data[0].id


async def test_models_lists_the_served_model(service: Service) -> None:
    models = await service.openai().models.list()
    assert [m.id for m in models.data] == [service.engine.model_name]


async def test_chat_completion_returns_text_and_exact_usage(service: Service) -> None:
    model = await model_name(service)
    response = await service.openai().chat.completions.create(
        model=model, messages=MESSAGES, max_tokens=64)
    choice = response.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content
    assert choice.finish_reason in {"stop", "length"}
    assert response.usage is not None
    prompt = service.engine.render_chat(PLAIN)
    assert response.usage.prompt_tokens == len(service.engine.tokenize(prompt))
    assert response.usage.completion_tokens == len(
        service.engine.tokenize(choice.message.content))
    assert response.usage.total_tokens == (
        response.usage.prompt_tokens + response.usage.completion_tokens)


async def test_max_tokens_bounds_the_completion(service: Service) -> None:
    model = await model_name(service)
    response = await service.openai().chat.completions.create(
        model=model, messages=MESSAGES, max_tokens=3)
    assert response.choices[0].finish_reason == "length"
    assert response.usage is not None
    assert response.usage.completion_tokens == 3


async def test_streamed_chat_ends_with_usage_when_asked(service: Service) -> None:
    model = await model_name(service)
    stream = await service.openai().chat.completions.create(
        model=model, messages=MESSAGES, max_tokens=12, stream=True,
        stream_options={"include_usage": True})
    chunks = [chunk async for chunk in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] in {"stop", "length"}
    assert all(f is None for f in finishes[:-1])
    usage = chunks[-1].usage
    assert chunks[-1].choices == []
    assert usage is not None
    assert usage.completion_tokens == len(service.engine.tokenize(text))


async def test_streamed_completion_and_the_done_marker(service: Service) -> None:
    model = await model_name(service)
    stream = await service.openai().completions.create(
        model=model, prompt="Once upon a time there was", max_tokens=5, stream=True)
    pieces = [chunk.choices[0].text async for chunk in stream if chunk.choices]
    assert "".join(pieces)
    async with aiohttp.ClientSession() as session, session.post(
        f"{service.url}/v1/completions",
        json={"model": model, "prompt": "hello there", "max_tokens": 3, "stream": True},
    ) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        raw = (await response.read()).decode()
    assert raw.rstrip().endswith("data: [DONE]")


async def test_completion_without_max_tokens_defaults_to_sixteen(service: Service) -> None:
    model = await model_name(service)
    response = await service.openai().completions.create(
        model=model, prompt="word " * 40)
    assert response.usage is not None
    assert response.usage.completion_tokens <= 16


async def test_the_openai_client_raises_its_own_error_classes(service: Service) -> None:
    client = service.openai()
    model = await model_name(service)
    with pytest.raises(openai.NotFoundError) as not_found:
        await client.chat.completions.create(model="no-such-model", messages=MESSAGES)
    assert "no-such-model" in not_found.value.message
    with pytest.raises(openai.BadRequestError) as bad:
        await client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=-1)
    assert bad.value.body is not None
    with pytest.raises(openai.BadRequestError) as too_long:
        await client.completions.create(
            model=model, prompt="word " * (service.engine.max_model_len + 10), max_tokens=1)
    assert too_long.value.code == "context_length_exceeded"


async def test_health_says_ok(service: Service) -> None:
    async with aiohttp.ClientSession() as session, session.get(f"{service.url}/health") as r:
        assert r.status == 200
        assert (await r.json()) == {"status": "ok"}
