"""Parse and validate OpenAI request bodies into plain dataclasses (pure; no I/O).

Unknown fields are ignored, as OpenAI and vLLM do; known fields are type- and range-checked and
the first problem becomes a 400 naming the offending ``param``::

    params = parse_chat_request({"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                                max_tokens_limit=4096)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from governor.inference.engines.base import SamplingOptions
from governor.inference.http.errors import APIError, bad_request

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
MAX_STOP_SEQUENCES = 16
MAX_STOP_LENGTH = 256


@dataclass(frozen=True, slots=True)
class Message:
    role: str
    content: str

    def as_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True, slots=True)
class GenerationParams:
    kind: Literal["chat", "completion"]
    model: str
    # ``prompt`` for completions; chat requests carry ``messages`` and are rendered by the engine.
    prompt: str | None
    messages: tuple[Message, ...]
    max_tokens: int | None
    stream: bool
    include_usage: bool
    sampling: SamplingOptions


def _require_object(body: object) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise bad_request("the request body must be a JSON object")
    return body


def _model(body: Mapping[str, Any]) -> str:
    model = body.get("model")
    if model is None:
        raise bad_request("you must provide a model parameter", param="model")
    if not isinstance(model, str) or not model:
        raise bad_request("'model' must be a non-empty string", param="model")
    return model


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(body: Mapping[str, Any], name: str, default: float, low: float, high: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise bad_request(f"'{name}' must be a number", param=name)
    # Only a float can be infinite or NaN; an integer of any size compares exactly with the
    # bounds, where math.isfinite() would overflow converting it.
    if isinstance(value, float) and not math.isfinite(value):
        raise bad_request(f"'{name}' must be a finite number", param=name)
    if not low <= value <= high:
        raise bad_request(f"'{name}' must be between {low} and {high}, got {value}", param=name)
    return float(value)


def _integer(
    body: Mapping[str, Any], name: str, low: int, high: int | None = None
) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not _is_int(value):
        raise bad_request(f"'{name}' must be an integer", param=name)
    if value < low or (high is not None and value > high):
        bound = f"at least {low}" if high is None else f"between {low} and {high}"
        raise bad_request(f"'{name}' must be {bound}, got {value}", param=name)
    return int(value)


def _boolean(body: Mapping[str, Any], name: str, default: bool = False) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad_request(f"'{name}' must be a boolean", param=name)
    return value


def _stop(body: Mapping[str, Any]) -> tuple[str, ...]:
    value = body.get("stop")
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise bad_request("'stop' must be a string or a list of strings", param="stop")
    if len(items) > MAX_STOP_SEQUENCES:
        raise bad_request(f"'stop' allows at most {MAX_STOP_SEQUENCES} sequences", param="stop")
    if any(not s or len(s) > MAX_STOP_LENGTH for s in items):
        raise bad_request(
            f"each 'stop' sequence must be 1..{MAX_STOP_LENGTH} characters", param="stop"
        )
    return tuple(items)


def _max_tokens(body: Mapping[str, Any], limit: int) -> int | None:
    # ``max_completion_tokens`` supersedes ``max_tokens`` in the chat API.
    name = "max_tokens"
    if body.get("max_completion_tokens") is not None:
        name = "max_completion_tokens"
    value = body.get(name)
    if value is None:
        return None
    if not _is_int(value):
        raise bad_request(f"'{name}' must be an integer", param=name)
    if value < 1:
        raise bad_request(f"'{name}' must be at least 1, got {value}", param=name)
    if value > limit:
        raise bad_request(f"'{name}' must be at most {limit}, got {value}", param=name)
    return int(value)


def _unsupported(body: Mapping[str, Any]) -> None:
    n = _integer(body, "n", 1)
    if n is not None and n != 1:
        raise bad_request("only n=1 is supported", param="n")
    best_of = _integer(body, "best_of", 1)
    if best_of is not None and best_of != 1:
        raise bad_request("only best_of=1 is supported", param="best_of")
    for name in ("logprobs", "echo"):
        value = body.get(name)
        if value not in (None, False, 0):
            raise bad_request(f"'{name}' is not supported by this service", param=name)
    if body.get("suffix") not in (None, ""):
        raise bad_request("'suffix' is not supported by this service", param="suffix")
    tools = body.get("tools")
    if tools not in (None, []):
        raise bad_request("tool calling is not supported by this service", param="tools")


def _sampling(body: Mapping[str, Any]) -> SamplingOptions:
    top_k = _integer(body, "top_k", -1)
    return SamplingOptions(
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_top_p(body),
        top_k=None if top_k in (None, -1, 0) else top_k,
        min_p=_number(body, "min_p", 0.0, 0.0, 1.0),
        seed=_integer(body, "seed", -(2**63), 2**63 - 1),
        stop=_stop(body),
        presence_penalty=_number(body, "presence_penalty", 0.0, -2.0, 2.0),
        frequency_penalty=_number(body, "frequency_penalty", 0.0, -2.0, 2.0),
        repetition_penalty=_number(body, "repetition_penalty", 1.0, 0.01, 2.0),
        ignore_eos=_boolean(body, "ignore_eos"),
        min_tokens=_integer(body, "min_tokens", 0) or 0,
    )


def _top_p(body: Mapping[str, Any]) -> float:
    top_p = _number(body, "top_p", 1.0, 0.0, 1.0)
    if top_p == 0.0:
        raise bad_request("'top_p' must be greater than 0", param="top_p")
    return top_p


def _stream_options(body: Mapping[str, Any], stream: bool) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, Mapping):
        raise bad_request("'stream_options' must be an object", param="stream_options")
    if not stream:
        raise bad_request(
            "'stream_options' is only allowed when 'stream' is true", param="stream_options"
        )
    include = options.get("include_usage", False)
    if not isinstance(include, bool):
        raise bad_request(
            "'stream_options.include_usage' must be a boolean", param="stream_options"
        )
    return include


def _content(value: object, index: int) -> str:
    """A message's content: a string, or a list of ``{"type": "text", "text": …}`` parts."""
    where = f"messages[{index}].content"
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = []
        for part in value:
            if not isinstance(part, Mapping) or part.get("type") != "text":
                raise bad_request(f"{where}: only text content parts are supported", param=where)
            text = part.get("text")
            if not isinstance(text, str):
                raise bad_request(f"{where}: a text part needs a string 'text'", param=where)
            texts.append(text)
        return "".join(texts)
    raise bad_request(f"{where} must be a string or a list of text parts", param=where)


def _messages(body: Mapping[str, Any]) -> tuple[Message, ...]:
    raw = body.get("messages")
    if raw is None:
        raise bad_request("you must provide a 'messages' parameter", param="messages")
    if not isinstance(raw, list):
        raise bad_request("'messages' must be a list", param="messages")
    if not raw:
        raise bad_request("'messages' must contain at least one message", param="messages")
    messages = []
    for index, item in enumerate(raw):
        if not isinstance(item, Mapping):
            raise bad_request(f"messages[{index}] must be an object", param=f"messages[{index}]")
        role = item.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise bad_request(
                f"messages[{index}].role must be one of {sorted(ROLES)}, got {role!r}",
                param=f"messages[{index}].role",
            )
        content = item.get("content")
        if content is None and role == "assistant":
            content = ""
        messages.append(Message(role, _content(content, index)))
    return tuple(messages)


def _prompt(body: Mapping[str, Any]) -> str:
    raw = body.get("prompt")
    if raw is None:
        raise bad_request("you must provide a 'prompt' parameter", param="prompt")
    if isinstance(raw, list):
        if len(raw) != 1 or not isinstance(raw[0], str):
            raise bad_request(
                "'prompt' must be a string (or a list of exactly one string)", param="prompt"
            )
        raw = raw[0]
    if not isinstance(raw, str):
        raise bad_request("'prompt' must be a string", param="prompt")
    return raw


def parse_chat_request(body: object, *, max_tokens_limit: int) -> GenerationParams:
    data = _require_object(body)
    model = _model(data)
    messages = _messages(data)
    return _params(data, "chat", model, None, messages, max_tokens_limit)


def parse_completion_request(body: object, *, max_tokens_limit: int) -> GenerationParams:
    data = _require_object(body)
    model = _model(data)
    prompt = _prompt(data)
    return _params(data, "completion", model, prompt, (), max_tokens_limit)


def _params(
    data: Mapping[str, Any],
    kind: Literal["chat", "completion"],
    model: str,
    prompt: str | None,
    messages: tuple[Message, ...],
    max_tokens_limit: int,
) -> GenerationParams:
    _unsupported(data)
    stream = _boolean(data, "stream")
    return GenerationParams(
        kind=kind,
        model=model,
        prompt=prompt,
        messages=messages,
        max_tokens=_max_tokens(data, max_tokens_limit),
        stream=stream,
        include_usage=_stream_options(data, stream),
        sampling=_sampling(data),
    )


def context_too_long(
    max_model_len: int, prompt_tokens: int, max_tokens: int, param: str
) -> APIError:
    """The error OpenAI and vLLM give when prompt plus completion exceed the context."""
    return bad_request(
        f"This model's maximum context length is {max_model_len} tokens. However, you requested "
        f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the prompt, {max_tokens} for the "
        "completion). Please reduce the prompt or the completion length.",
        param=param,
        code="context_length_exceeded",
    )


def prompt_too_many_bytes(
    max_model_len: int, max_token_bytes: int, prompt_bytes: int, param: str
) -> APIError:
    """A prompt refused for its length in bytes, before it was tokenized: no token of this
    model covers more than ``max_token_bytes`` bytes, so it cannot fit the context."""
    return bad_request(
        f"This model's maximum context length is {max_model_len} tokens, and one of its tokens "
        f"covers at most {max_token_bytes} bytes of text, so a prompt may have at most "
        f"{max_model_len * max_token_bytes} bytes. However, your prompt has {prompt_bytes} "
        "bytes or more. Please reduce the prompt.",
        param=param,
        code="context_length_exceeded",
    )
