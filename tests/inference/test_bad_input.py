"""Malformed, hostile and oversized input: a 4xx with OpenAI's body, and the server serves on."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aiohttp
import pytest

from tests.inference.conftest import Service, ServiceFactory

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"


async def good_request_works(service: Service) -> None:
    body = {"model": service.engine.model_name,
            "messages": [{"role": "user", "content": "still there?"}], "max_tokens": 2}
    async with aiohttp.ClientSession() as session, session.post(
        service.url + CHAT_PATH, json=body
    ) as response:
        assert response.status == 200, await response.text()


async def send(service: Service, method: str, path: str, data: bytes,
               headers: dict[str, str] | None = None) -> tuple[int, dict[str, object]]:
    async with aiohttp.ClientSession() as session, session.request(
        method, service.url + path, data=data,
        headers={"Content-Type": "application/json", **(headers or {})},
    ) as response:
        payload = await response.read()
        assert response.headers["Content-Type"].startswith("application/json")
        return response.status, json.loads(payload)


@pytest.mark.parametrize(
    ("data", "status"),
    [
        pytest.param(b"", 400, id="an empty body"),
        pytest.param(b"{not json", 400, id="malformed JSON"),
        pytest.param(b"\xff\xfe\x00garbage", 400, id="binary garbage"),
        pytest.param(b"[" * 100_000 + b"]" * 100_000, 400, id="JSON nested 100k deep"),
        pytest.param(b"null", 400, id="a JSON null"),
        pytest.param(b'{"model": null, "messages": null}', 400, id="nulls"),
        pytest.param(b'{"model":"m","messages":[{"role":"user","content":"x"}],'
                     b'"max_tokens":1e400}', 400, id="an infinite max_tokens"),
        pytest.param(b'{"max_tokens": 1' + b"0" * 5000 + b"}", 400,
                     id="an integer longer than Python converts"),
    ],
)
async def test_malformed_bodies_are_400(service: Service, data: bytes, status: int) -> None:
    code, body = await send(service, "POST", CHAT_PATH, data)
    assert code == status
    error = body["error"]
    assert isinstance(error, dict)
    assert set(error) == {"message", "type", "param", "code"}
    await good_request_works(service)


async def test_unknown_model_is_404(service: Service) -> None:
    code, body = await send(service, "POST", CHAT_PATH, json.dumps(
        {"model": "gpt-17", "messages": [{"role": "user", "content": "x"}]}).encode())
    assert code == 404
    assert body["error"]["code"] == "model_not_found"  # type: ignore[index]


async def test_a_prompt_longer_than_the_context_is_400(service: Service) -> None:
    prompt = "word " * (service.engine.max_model_len * 2)
    code, body = await send(service, "POST", "/v1/completions", json.dumps(
        {"model": service.engine.model_name, "prompt": prompt}).encode())
    assert code == 400
    assert body["error"]["code"] == "context_length_exceeded"  # type: ignore[index]
    await good_request_works(service)


async def test_an_oversized_body_is_413_and_costs_nothing(make_service: ServiceFactory) -> None:
    service = await make_service(max_body_bytes=64 * 1024)
    big = json.dumps({"model": service.engine.model_name,
                      "messages": [{"role": "user", "content": "x" * 200_000}]}).encode()
    code, body = await send(service, "POST", CHAT_PATH, big)
    assert code == 413
    assert body["error"]["code"] == "request_too_large"  # type: ignore[index]
    await good_request_works(service)

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: found out while read
        for start in range(0, len(big), 16 * 1024):
            yield big[start:start + 16 * 1024]

    async with aiohttp.ClientSession() as session, session.post(
        service.url + CHAT_PATH, data=chunks()
    ) as response:
        assert response.status == 413
        assert (await response.json())["error"]["code"] == "request_too_large"
    await good_request_works(service)


async def test_unknown_routes_and_methods_get_json_errors(service: Service) -> None:
    code, _ = await send(service, "GET", "/v1/nope", b"")
    assert code == 404
    code, _ = await send(service, "GET", CHAT_PATH, b"")
    assert code == 405
    code, _ = await send(service, "GET", "/../../etc/passwd", b"")
    assert code == 404


async def test_hostile_strings_are_served_as_text(service: Service) -> None:
    body = {"model": service.engine.model_name, "max_tokens": 8, "messages": [
        {"role": "user", "content": "\u0000\u202e<script>alert(1)</script>\ud7ff 💥 " * 50}]}
    code, payload = await send(service, "POST", CHAT_PATH, json.dumps(body).encode())
    assert code == 200
    assert payload["object"] == "chat.completion"


async def test_a_burst_of_bad_requests_leaves_no_trace_in_flight(service: Service) -> None:
    for _ in range(50):
        await send(service, "POST", CHAT_PATH, b'{"model": 1}')
    assert service.sample("governor_requests_in_flight") == 0.0
    # Refused before its prompt was read, a request has no class (the empty label).
    assert service.sample("governor_requests_total",
                          {"route": CHAT_PATH, "code": "400", "class": ""}) == 50.0
    await good_request_works(service)


LONE_SURROGATE = "\ud800"


def surrogate_bodies(model: str) -> list[tuple[str, str, dict[str, object]]]:
    """(route, the param the error names, body) with a lone surrogate in each text field."""
    user = {"role": "user", "content": "hello"}
    return [
        (CHAT_PATH, "messages[0].content",
         {"model": model, "messages": [{"role": "user", "content": f"a {LONE_SURROGATE} b"}]}),
        (CHAT_PATH, "messages[0].content[0].text",
         {"model": model, "messages": [
             {"role": "user", "content": [{"type": "text", "text": LONE_SURROGATE}]}]}),
        (CHAT_PATH, "stop", {"model": model, "messages": [user], "stop": LONE_SURROGATE}),
        (CHAT_PATH, "user", {"model": model, "messages": [user], "user": LONE_SURROGATE}),
        (COMPLETIONS_PATH, "prompt", {"model": model, "prompt": "\udfff"}),
        (COMPLETIONS_PATH, "prompt[0]", {"model": model, "prompt": [f"x{LONE_SURROGATE}"]}),
        (COMPLETIONS_PATH, "stop[1]", {"model": model, "prompt": "hi", "stop": ["a", "\udc80"]}),
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_lone_surrogate_anywhere_is_a_400_never_a_500(
    service: Service, stream: bool
) -> None:
    """JSON may spell "\\ud800"; the sim echoes it, and no response could encode it."""
    for route, param, body in surrogate_bodies(service.engine.model_name):
        code, payload = await send(service, "POST", route,
                                   json.dumps({**body, "stream": stream}).encode())
        assert code == 400, (route, param, payload)
        error = payload["error"]
        assert isinstance(error, dict)
        assert (error["type"], error["param"]) == ("invalid_request_error", param)
    await good_request_works(service)
    assert no_5xx(service)


async def test_surrogates_in_raw_utf8_bytes_are_refused_too(service: Service) -> None:
    """Python's JSON decoder lets UTF-8-encoded surrogates (ED A0 80) through as well."""
    data = b'{"model": "%s", "prompt": "a \xed\xa0\x80 b"}' % service.engine.model_name.encode()
    code, payload = await send(service, "POST", COMPLETIONS_PATH, data)
    assert code == 400
    assert payload["error"]["param"] == "prompt"  # type: ignore[index]
    assert no_5xx(service)


async def test_a_surrogate_pair_is_one_character_and_served(service: Service) -> None:
    body = {"model": service.engine.model_name, "prompt": "\ud83d\ude00 smile", "max_tokens": 4}
    # Python keeps the two halves apart; JSON's escapes join them into U+1F600.
    code, payload = await send(service, "POST", COMPLETIONS_PATH, json.dumps(body).encode())
    assert code == 200, payload


def no_5xx(service: Service) -> bool:
    """Not one request has been counted as a server error (the availability SLI)."""
    for family in service.registry.collect():
        for sample in family.samples:
            if sample.name == "governor_requests_total" and sample.labels["code"][0] == "5":
                return False
    return True
