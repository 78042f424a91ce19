"""What the gate reads of a generation request's body before vLLM does: its prompt's size.

vLLM tokenizes a request after the gate has let it in, so the gate judges on an estimate (a
token list counts exactly, text as a token per four UTF-8 bytes, the usual English ratio), and
the deadline gate replaces it with vLLM's own count as the request enters the engine
(:meth:`governor.admission.deadline.DeadlineGate.start`)::

    >>> estimate("/v1/completions", b'{"prompt": "Hello there, world!", "max_tokens": 8}')
    Prompt(tokens=5, request_id=None)
    >>> chat = b'{"messages": [{"role": "user", "content": "Bonjour"}]}'
    >>> estimate("/v1/chat/completions", chat).tokens
    2
    >>> estimate("/v1/chat/completions", b'not json') is None
    True
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Final

from governor.contracts.endpoints import CHAT_COMPLETIONS_PATH

BYTES_PER_TOKEN: Final = 4


@dataclass(frozen=True, slots=True)
class Prompt:
    tokens: int  # estimated, until vLLM has tokenized it
    request_id: str | None  # the body's own ``request_id`` (vLLM's extension), if any


def estimate(path: str, body: bytes) -> Prompt | None:
    """The prompt of a chat or completion body; None when the body is not one (vLLM answers it
    400 itself, and the gate lets it through uncounted)."""
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(parsed, dict):
        return None
    found = parsed.get("messages") if path == CHAT_COMPLETIONS_PATH else parsed.get("prompt")
    tokens = _chat_tokens(found) if path == CHAT_COMPLETIONS_PATH else _prompt_tokens(found)
    if tokens is None:
        return None
    request_id = parsed.get("request_id")
    return Prompt(tokens, request_id if isinstance(request_id, str) and request_id else None)


def _text_tokens(text: str) -> int:
    return math.ceil(len(text.encode("utf-8", "surrogatepass")) / BYTES_PER_TOKEN)


def _prompt_tokens(prompt: object) -> int | None:
    """A completion's prompt: text, token ids, or a list of either."""
    if isinstance(prompt, str):
        return _text_tokens(prompt)
    if not isinstance(prompt, list):
        return None
    if all(isinstance(t, int) for t in prompt):
        return len(prompt)
    parts = [_prompt_tokens(p) for p in prompt if isinstance(p, str | list)]
    return sum(p for p in parts if p is not None)


def _chat_tokens(messages: object) -> int | None:
    """A chat's messages: their text content, plain or in parts."""
    if not isinstance(messages, list):
        return None
    total = 0
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            total += _text_tokens(content)
        elif isinstance(content, list):
            total += sum(_text_tokens(part["text"]) for part in content
                         if isinstance(part, dict) and isinstance(part.get("text"), str))
    return total
