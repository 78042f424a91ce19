"""Property: no request body, however wrong, gets a 5xx, and the service serves on afterwards.

Hypothesis writes bodies for both generation routes, streamed and not: arbitrary JSON, valid
bodies with fields replaced by values of the wrong type or range, text with lone surrogates and
control characters, huge and negative numbers, bytes that are not JSON at all. Each answer must
be below 500 and well formed (an OpenAI error body, a whole response, or a stream that ends
with ``[DONE]``); at the end not one request has been counted as a 5xx, and a normal request is
served. The examples are derandomized, so CI runs the same ones every time.

The service runs on its own event loop in a thread, so that Hypothesis drives it with a plain
blocking client, one connection per example.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from governor.inference import keys
from governor.inference.app import create_app
from governor.inference.config import ServiceConfig
from governor.inference.engines.settings import EngineSettings

CHAT_PATH, COMPLETIONS_PATH = "/v1/chat/completions", "/v1/completions"
MODEL = "tiny"
# Steps cost nothing, so even a 2,000-token answer takes milliseconds.
ENGINE = EngineSettings(kind="sim", preset="tiny", seed=3, time_scale=0.0)
FUZZ = settings(max_examples=120, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
DONE = b"data: [DONE]\n\n"


class ThreadedService:
    """The real app on a real port, its event loop in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.app = create_app(ServiceConfig(engine=ENGINE), env={})
        self.runner = web.AppRunner(self.app)
        self.port = self._call(self._start())

    def _call(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=60)

    async def _start(self) -> int:
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        for _ in range(500):
            if self.app[keys.ENGINE].ready:
                break
            await asyncio.sleep(0.01)
        return int(self.runner.addresses[0][1])

    def close(self) -> None:
        self._call(self.runner.cleanup())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()

    @property
    def registry(self) -> CollectorRegistry:
        return self.app[keys.REGISTRY]

    def post(self, path: str, body: bytes) -> tuple[int, str, bytes]:
        """Status, content type and the whole body; a cut stream raises ``IncompleteRead``."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request("POST", path, body=body,
                               headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            return response.status, response.getheader("Content-Type") or "", response.read()
        finally:
            connection.close()


@pytest.fixture(scope="module")
def threaded() -> Iterator[ThreadedService]:
    service = ThreadedService()
    yield service
    service.close()


# ---- what a hostile client sends ------------------------------------------------------------

# Pieces that have broken servers: lone surrogates, NUL, bidi overrides, BOMs, the sim's own
# chat markers, SSE framing; mixed into otherwise arbitrary text, a character at a time.
ODD_PIECES = st.sampled_from([
    "\ud800", "\udfff", "\udc80", "\x00", "\u202e", "\ufeff", "\U0010ffff", "💥", "\r\n",
    "<|user|>\n", "<|assistant|>\n", "data: [DONE]\n\n", "\\u0000", " " * 300, "é" * 200,
])
TEXT = st.lists(st.characters(exclude_categories=()) | ODD_PIECES, max_size=8).map("".join)
NUMBERS = st.one_of(
    st.integers(min_value=-5, max_value=5000),
    st.sampled_from([0, -1, 2**31, 2**63, -(2**63) - 1, 10**30, 10**300]),
    st.floats(allow_nan=True, allow_infinity=True),
)
# Numerals json.dumps cannot write: longer than Python converts, or beyond a double's range.
RAW_NUMERALS = st.one_of(
    st.integers(min_value=4000, max_value=6000).map(lambda digits: "9" * digits),
    st.sampled_from(["1e999", "-1e999", "1E-400", "-0", "0.0000000000000000000001"]),
)
LEAVES = st.one_of(st.none(), st.booleans(), NUMBERS, TEXT)
JSON_VALUES = st.recursive(
    LEAVES, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)
ROLES = st.sampled_from(["system", "developer", "user", "assistant", "tool", "", "root", "USER"])
CONTENT = st.one_of(
    TEXT, st.none(), NUMBERS,
    st.lists(st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url", ""]),
                                    "text": TEXT | NUMBERS}), max_size=3),
)
MESSAGES = st.lists(
    st.fixed_dictionaries({"role": ROLES, "content": CONTENT}) | JSON_VALUES, max_size=4,
)
FIELDS = {
    "model": st.just(MODEL) | TEXT | NUMBERS,
    "messages": MESSAGES | JSON_VALUES,
    "prompt": TEXT | st.lists(TEXT, max_size=3) | NUMBERS,
    "max_tokens": NUMBERS, "max_completion_tokens": NUMBERS, "min_tokens": NUMBERS,
    "temperature": NUMBERS, "top_p": NUMBERS, "top_k": NUMBERS, "min_p": NUMBERS,
    "seed": NUMBERS, "presence_penalty": NUMBERS, "frequency_penalty": NUMBERS,
    "repetition_penalty": NUMBERS, "n": NUMBERS, "best_of": NUMBERS,
    "stop": TEXT | st.lists(TEXT, max_size=20) | NUMBERS,
    "ignore_eos": st.booleans() | NUMBERS, "echo": LEAVES, "logprobs": LEAVES,
    "suffix": LEAVES, "tools": JSON_VALUES, "user": TEXT,
    "stream_options": st.fixed_dictionaries({"include_usage": LEAVES}) | JSON_VALUES,
}
# The fields a model reads text from: where a bad character reaches the response.
TEXT_FIELDS = {
    CHAT_PATH: ("messages", "stop", "model"), COMPLETIONS_PATH: ("prompt", "stop", "model"),
}
REMOVE = object()


def base_body(path: str, stream: bool) -> dict[str, object]:
    body: dict[str, object] = {"model": MODEL, "max_tokens": 8, "stream": stream}
    if path == CHAT_PATH:
        body["messages"] = [{"role": "user", "content": "translate this"}]
    else:
        body["prompt"] = "translate this"
    return body


@st.composite
def mutated(draw: st.DrawFn, path: str, stream: bool) -> bytes:
    """A valid body with one of its text fields and up to three others replaced by anything,
    or removed; or with a numeral no JSON encoder writes in place of a numeric field."""
    body = base_body(path, stream)
    names = [draw(st.sampled_from(TEXT_FIELDS[path]))]
    names += draw(st.lists(st.sampled_from(sorted(FIELDS)), max_size=3))
    for name in names:
        value = draw(FIELDS[name] | st.just(REMOVE))
        if value is REMOVE:
            body.pop(name, None)
        else:
            body[name] = value
    text = json.dumps(body)
    if draw(st.booleans()):
        numeral = draw(RAW_NUMERALS)
        field = draw(st.sampled_from(["max_tokens", "temperature", "seed", "top_k"]))
        text = text[:-1] + f', "{field}": {numeral}}}'
    return text.encode()


@st.composite
def odd_text(draw: st.DrawFn, path: str, stream: bool) -> bytes:
    """A valid body whose text (messages or prompt, stop strings) is arbitrary Unicode."""
    body = base_body(path, stream)
    if path == CHAT_PATH:
        role = st.sampled_from(["system", "user", "assistant"])
        content = TEXT | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": TEXT}),
                                  min_size=1, max_size=3)
        body["messages"] = draw(st.lists(st.fixed_dictionaries({"role": role, "content": content}),
                                         min_size=1, max_size=3))
    else:
        body["prompt"] = draw(TEXT | st.lists(TEXT, min_size=1, max_size=1))
    if draw(st.booleans()):
        body["stop"] = draw(st.lists(TEXT.filter(lambda text: 0 < len(text) <= 256), max_size=3))
    return json.dumps(body).encode()


def anything(stream: bool) -> st.SearchStrategy[bytes]:
    """Arbitrary JSON (often with ``stream`` set), or bytes that are not JSON at all."""
    as_json = JSON_VALUES.map(lambda value: json.dumps(
        {**value, "stream": stream} if isinstance(value, dict) else value).encode())
    return st.one_of(as_json, st.binary(max_size=64),
                     st.builds(lambda b: b'{"model": "tiny", "prompt": "' + b,
                               st.binary(max_size=32)))


# ---- what every answer must look like -------------------------------------------------------

def check(status: int, content_type: str, payload: bytes, stream: bool) -> None:
    assert status < 500, payload[:500]
    if status != 200:
        assert content_type.startswith("application/json"), (status, content_type)
        error = json.loads(payload)["error"]
        assert set(error) == {"message", "type", "param", "code"}
    elif stream:
        assert payload.endswith(DONE), payload[-200:]
    else:
        assert json.loads(payload)["choices"], payload[:500]


def served_after(service: ThreadedService, path: str) -> None:
    status, _, payload = service.post(path, json.dumps(base_body(path, False)).encode())
    assert status == 200, payload


def server_errors(service: ThreadedService) -> float:
    """Requests the service counted as 5xx: the availability SLI."""
    return sum(sample.value for family in service.registry.collect()
               for sample in family.samples
               if sample.name == "governor_requests_total" and sample.labels["code"][0] == "5")


ROUTES = pytest.mark.parametrize(
    ("path", "stream"),
    [(CHAT_PATH, False), (CHAT_PATH, True), (COMPLETIONS_PATH, False), (COMPLETIONS_PATH, True)],
    ids=["chat", "chat-streamed", "completion", "completion-streamed"],
)


def fuzz(threaded: ThreadedService, path: str, stream: bool,
         bodies: st.SearchStrategy[bytes]) -> None:
    """Every body drawn gets a well-formed answer that is not a 5xx, nothing is counted as a
    5xx, and the route serves a good request afterwards."""

    @FUZZ
    @given(body=bodies)
    def one(body: bytes) -> None:
        check(*threaded.post(path, body), stream)

    one()
    served_after(threaded, path)
    assert server_errors(threaded) == 0


@ROUTES
def test_mutated_valid_bodies_never_get_a_5xx(
    threaded: ThreadedService, path: str, stream: bool
) -> None:
    fuzz(threaded, path, stream, mutated(path, stream))


@ROUTES
def test_arbitrary_unicode_in_valid_bodies_never_gets_a_5xx(
    threaded: ThreadedService, path: str, stream: bool
) -> None:
    fuzz(threaded, path, stream, odd_text(path, stream))


@ROUTES
def test_arbitrary_bodies_never_get_a_5xx(
    threaded: ThreadedService, path: str, stream: bool
) -> None:
    fuzz(threaded, path, stream, anything(stream))
