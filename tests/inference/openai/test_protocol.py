"""Request validation: every malformed field is a 400 naming its param, never a crash."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from governor.inference.http.errors import APIError
from governor.inference.openai.protocol import parse_chat_request, parse_completion_request

LIMIT = 4096


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}


def rejects(body: object, param: str | None, *, kind: str = "chat") -> APIError:
    parse = parse_chat_request if kind == "chat" else parse_completion_request
    with pytest.raises(APIError) as caught:
        parse(body, max_tokens_limit=LIMIT)
    assert caught.value.status == 400
    assert caught.value.param == param
    return caught.value


def test_a_minimal_chat_request_parses_with_defaults() -> None:
    params = parse_chat_request(chat(), max_tokens_limit=LIMIT)
    assert params.kind == "chat"
    assert params.messages[0].content == "hi"
    assert params.max_tokens is None
    assert not params.stream
    assert params.sampling.temperature == 1.0


def test_text_content_parts_are_joined() -> None:
    body = chat(messages=[{"role": "user", "content": [
        {"type": "text", "text": "Bonjour "}, {"type": "text", "text": "le monde"}]}])
    params = parse_chat_request(body, max_tokens_limit=LIMIT)
    assert params.messages[0].content == "Bonjour le monde"


def test_stream_options_include_usage_is_read() -> None:
    params = parse_chat_request(
        chat(stream=True, stream_options={"include_usage": True}), max_tokens_limit=LIMIT)
    assert params.stream and params.include_usage


def test_max_completion_tokens_supersedes_max_tokens() -> None:
    params = parse_chat_request(chat(max_tokens=5, max_completion_tokens=7), max_tokens_limit=LIMIT)
    assert params.max_tokens == 7


@pytest.mark.parametrize(
    ("body", "param"),
    [
        pytest.param([1, 2], None, id="a body that is a list, not an object"),
        pytest.param("text", None, id="a body that is a string"),
        pytest.param({"messages": [{"role": "user", "content": "x"}]}, "model", id="no model"),
        pytest.param(chat(model=5), "model", id="a model that is a number"),
        pytest.param(chat(model=""), "model", id="an empty model"),
        pytest.param({"model": "m"}, "messages", id="no messages"),
        pytest.param(chat(messages=[]), "messages", id="empty messages"),
        pytest.param(chat(messages="hi"), "messages", id="messages that are a string"),
        pytest.param(chat(messages=["hi"]), "messages[0]", id="a message that is a string"),
        pytest.param(chat(messages=[{"role": "wizard", "content": "x"}]), "messages[0].role",
                     id="an unknown role"),
        pytest.param(chat(messages=[{"content": "x"}]), "messages[0].role", id="no role"),
        pytest.param(chat(messages=[{"role": "user", "content": 3}]), "messages[0].content",
                     id="content that is a number"),
        pytest.param(chat(messages=[{"role": "user", "content": [{"type": "image_url"}]}]),
                     "messages[0].content", id="an image part"),
        pytest.param(chat(max_tokens=0), "max_tokens", id="zero max_tokens"),
        pytest.param(chat(max_tokens=-5), "max_tokens", id="negative max_tokens"),
        pytest.param(chat(max_tokens=LIMIT + 1), "max_tokens", id="oversized max_tokens"),
        pytest.param(chat(max_tokens="10"), "max_tokens", id="max_tokens as a string"),
        pytest.param(chat(max_tokens=1.5), "max_tokens", id="fractional max_tokens"),
        pytest.param(chat(max_tokens=True), "max_tokens", id="max_tokens as a boolean"),
        pytest.param(chat(temperature=3), "temperature", id="temperature above 2"),
        pytest.param(chat(temperature="hot"), "temperature", id="temperature as a string"),
        pytest.param(chat(temperature=float("nan")), "temperature", id="temperature NaN"),
        pytest.param(chat(temperature=10**400), "temperature",
                     id="temperature an integer too large for a float"),
        pytest.param(chat(min_p=-(10**400)), "min_p", id="min_p a hugely negative integer"),
        pytest.param(chat(top_p=0), "top_p", id="top_p zero"),
        pytest.param(chat(n=2), "n", id="n above 1"),
        pytest.param(chat(stream="yes"), "stream", id="stream as a string"),
        pytest.param(chat(stream_options={"include_usage": True}), "stream_options",
                     id="stream_options without stream"),
        pytest.param(chat(stream=True, stream_options=[]), "stream_options",
                     id="stream_options as a list"),
        pytest.param(chat(stop=[1]), "stop", id="stop that holds a number"),
        pytest.param(chat(stop=["x"] * 17), "stop", id="too many stop sequences"),
        pytest.param(chat(stop=["x" * 300]), "stop", id="a stop sequence too long"),
        pytest.param(chat(logprobs=True), "logprobs", id="logprobs"),
        pytest.param(chat(tools=[{"type": "function"}]), "tools", id="tools"),
        pytest.param(chat(seed="x"), "seed", id="seed as a string"),
        pytest.param(chat(presence_penalty=9), "presence_penalty", id="presence_penalty range"),
    ],
)
def test_malformed_chat_requests_are_400_naming_the_param(body: object, param: str | None) -> None:
    rejects(body, param)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        pytest.param({"model": "m"}, "prompt", id="no prompt"),
        pytest.param({"model": "m", "prompt": 42}, "prompt", id="a numeric prompt"),
        pytest.param({"model": "m", "prompt": ["a", "b"]}, "prompt", id="batched prompts"),
        pytest.param({"model": "m", "prompt": [1, 2, 3]}, "prompt", id="token id prompts"),
        pytest.param({"model": "m", "prompt": "x", "echo": True}, "echo", id="echo"),
        pytest.param({"model": "m", "prompt": "x", "suffix": "y"}, "suffix", id="suffix"),
        pytest.param({"model": "m", "prompt": "x", "best_of": 3}, "best_of", id="best_of"),
    ],
)
def test_malformed_completion_requests_are_400(body: object, param: str) -> None:
    rejects(body, param, kind="completion")


def test_a_single_prompt_in_a_list_is_accepted() -> None:
    params = parse_completion_request({"model": "m", "prompt": ["once"]}, max_tokens_limit=LIMIT)
    assert params.prompt == "once"


@settings(max_examples=300, deadline=None)
@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=30,
))
def test_arbitrary_json_never_escapes_as_anything_but_a_400(body: object) -> None:
    for parse in (parse_chat_request, parse_completion_request):
        try:
            parse(body, max_tokens_limit=LIMIT)
        except APIError as exc:
            assert exc.status == 400
