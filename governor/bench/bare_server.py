"""The baseline of ``governor bench service``: the least an aiohttp OpenAI streaming server does.

It parses the JSON body and streams ``max_tokens`` chat chunks with ``json.dumps`` — no engine,
no validation, no metrics, no tracing, no admission queue. Governor's overhead is reported as a
ratio to this floor.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid

from aiohttp import web


async def _chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    max_tokens = int(body.get("max_tokens", 16))
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": body.get("model", "bare")}
    for index in range(max_tokens):
        finish = "length" if index == max_tokens - 1 else None
        chunk = {**head, "choices": [{"index": 0, "delta": {"content": " word"},
                                      "finish_reason": finish}]}
        await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    usage = {"prompt_tokens": 8, "completion_tokens": max_tokens,
             "total_tokens": 8 + max_tokens}
    await response.write(b"data: " + json.dumps({**head, "choices": [], "usage": usage}).encode()
                         + b"\n\n")
    await response.write(b"data: [DONE]\n\n")
    return response


async def _health(_: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", _chat)
    app.router.add_get("/health", _health)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
