"""OpenAI response bodies: streamed chunks (server-sent events) and whole responses.

Chunk encoding is on the per-token hot path, so each request precomputes the JSON around the
text once and a chunk costs one ``json.dumps`` of the new text::

    encoder = ChunkEncoder("chat", "chatcmpl-1", 1700000000, "m", include_usage=False)
    encoder.role()          # b'data: {"id":"chatcmpl-1",…"delta":{"role":"assistant",…}…'
    encoder.text("Hello")   # one delta
    encoder.finish("stop")  # the last chunk, with finish_reason
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

DONE = b"data: [DONE]\n\n"
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int

    def as_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }


def _object_name(kind: Literal["chat", "completion"], stream: bool) -> str:
    if kind == "chat":
        return "chat.completion.chunk" if stream else "chat.completion"
    return "text_completion"


class ChunkEncoder:
    """Encodes one streamed response's events."""

    __slots__ = ("_head", "_kind", "_text_prefix", "_text_suffix")

    def __init__(
        self,
        kind: Literal["chat", "completion"],
        response_id: str,
        created: int,
        model: str,
        *,
        include_usage: bool,
    ) -> None:
        head = {"id": response_id, "object": _object_name(kind, True), "created": created,
                "model": model}
        self._kind = kind
        # '{"id":…,"model":"m"' without the closing brace; choices and usage follow.
        self._head = _dumps(head)[:-1]
        usage = ',"usage":null' if include_usage else ""
        if kind == "chat":
            self._text_prefix = (
                f'data: {self._head},"choices":[{{"index":0,"delta":{{"content":'
            ).encode()
            self._text_suffix = (
                f'}},"logprobs":null,"finish_reason":null}}]{usage}}}\n\n'
            ).encode()
        else:
            self._text_prefix = f'data: {self._head},"choices":[{{"index":0,"text":'.encode()
            self._text_suffix = (
                f',"logprobs":null,"finish_reason":null}}]{usage}}}\n\n'
            ).encode()

    def role(self) -> bytes | None:
        """The chat stream's first event, announcing the assistant role (None for completions)."""
        if self._kind != "chat":
            return None
        return self._event({"index": 0, "delta": {"role": "assistant", "content": ""},
                            "logprobs": None, "finish_reason": None})

    def text(self, text: str) -> bytes:
        return self._text_prefix + _dumps(text).encode() + self._text_suffix

    def finish(self, finish_reason: str, text: str = "") -> bytes:
        if self._kind == "chat":
            delta: dict[str, Any] = {"content": text} if text else {}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        return self._event(choice)

    def usage(self, usage: Usage) -> bytes:
        """The extra chunk ``stream_options.include_usage`` asks for: no choices, the usage."""
        return f'data: {self._head},"choices":[],"usage":{_dumps(usage.as_dict())}}}\n\n'.encode()

    def _event(self, choice: dict[str, Any]) -> bytes:
        return f'data: {self._head},"choices":[{_dumps(choice)}]}}\n\n'.encode()


def error_event(body: dict[str, Any]) -> bytes:
    """An error after the stream has started (the status line is already sent)."""
    return b"data: " + _dumps(body).encode() + b"\n\n"


def full_response(
    kind: Literal["chat", "completion"],
    response_id: str,
    created: int,
    model: str,
    text: str,
    finish_reason: str,
    usage: Usage,
) -> bytes:
    choice: dict[str, Any]
    if kind == "chat":
        choice = {"index": 0, "message": {"role": "assistant", "content": text},
                  "logprobs": None, "finish_reason": finish_reason}
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
    return _dumps({
        "id": response_id, "object": _object_name(kind, False), "created": created,
        "model": model, "choices": [choice], "usage": usage.as_dict(),
    }).encode()
