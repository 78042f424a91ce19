"""SSE chunks and whole responses have OpenAI's shape and escape any text."""

from __future__ import annotations

import json

from governor.inference.openai.sse import DONE, ChunkEncoder, Usage, error_event, full_response


def event(raw: bytes) -> dict[str, object]:
    assert raw.startswith(b"data: ") and raw.endswith(b"\n\n")
    decoded: dict[str, object] = json.loads(raw[6:-2])
    return decoded


def test_chat_chunks_carry_role_then_content_then_finish() -> None:
    enc = ChunkEncoder("chat", "chatcmpl-1", 7, "m", include_usage=False)
    role = enc.role()
    assert role is not None
    assert event(role)["choices"] == [
        {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
         "finish_reason": None}]
    text = event(enc.text('quote " and \\ and \n and é'))
    assert text["object"] == "chat.completion.chunk"
    assert text["choices"] == [{"index": 0, "delta": {"content": 'quote " and \\ and \n and é'},
                                "logprobs": None, "finish_reason": None}]
    assert event(enc.finish("length"))["choices"] == [
        {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "length"}]


def test_completion_chunks_carry_text() -> None:
    enc = ChunkEncoder("completion", "cmpl-1", 7, "m", include_usage=True)
    assert enc.role() is None
    chunk = event(enc.text("abc"))
    assert chunk["object"] == "text_completion"
    assert chunk["usage"] is None
    assert chunk["choices"] == [{"index": 0, "text": "abc", "logprobs": None,
                                 "finish_reason": None}]
    usage = event(enc.usage(Usage(3, 4)))
    assert usage["choices"] == []
    assert usage["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}


def test_whole_responses_and_errors() -> None:
    body = json.loads(full_response("chat", "c", 1, "m", "hi", "stop", Usage(1, 1)))
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "hi"}
    assert body["usage"]["total_tokens"] == 2
    assert event(error_event({"error": {"message": "x"}})) == {"error": {"message": "x"}}
    assert DONE == b"data: [DONE]\n\n"
