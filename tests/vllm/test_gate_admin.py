"""``GET``/``PUT /admin/admission`` in front of stock vLLM (the controller's admission knob) and the
gate's cap on the body it reads: on a fake vLLM app, through both ways in, with hostile input."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from governor.common.secrets import Secret
from governor.contracts.endpoints import ADMIN_ADMISSION_PATH, CHAT_COMPLETIONS_PATH
from governor.vllm import AdminMiddleware
from governor.vllm.admin import MAX_BODY_BYTES, AdminSettings
from governor.vllm.admission import AdmissionMiddleware
from governor.vllm.asgi import Message
from governor.vllm.gate import MAX_BODY_ENV, SPEC_ENV, GateConfigError, GateSettings
from tests.vllm.test_gate import SPEC, Clock, FakeVllm, post, warm

TOKEN = "s3cret-admin"
AUTH = (b"authorization", f"Bearer {TOKEN}".encode())


def settings(**env: str) -> GateSettings:
    found = GateSettings.from_env({SPEC_ENV: SPEC, **env})
    assert found is not None
    return found


def gated(gate: GateSettings | None = None) -> tuple[AdmissionMiddleware, FakeVllm, Clock,
                                                     CollectorRegistry]:
    app, clock, registry = FakeVllm(), Clock(), CollectorRegistry()
    middleware = AdmissionMiddleware(app, gate or settings(), registry=registry, clock=clock,
                                     admin=AdminSettings(Secret(TOKEN)))
    return middleware, app, clock, registry


async def admin(middleware: Any, method: str, body: bytes = b"",
                headers: tuple[tuple[bytes, bytes], ...] = (AUTH,),
                app: Any = None) -> tuple[int, Any]:
    """One request to the admin route through ``middleware``; its status and JSON body
    (``app``: what the scope names as the application, where vLLM keeps its engine client)."""
    sent: list[Message] = []
    chunks = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> Message:
        return chunks.pop(0) if chunks else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    await middleware({"type": "http", "method": method, "path": ADMIN_ADMISSION_PATH,
                      "headers": list(headers), "app": app or SimpleNamespace()},
                     receive, send)
    start, answer = sent
    return start["status"], json.loads(answer["body"])


async def test_a_put_moves_the_slack_that_judges_the_next_arrival() -> None:
    middleware, app, clock, registry = gated()
    clock.now = warm(middleware.gate, 1000.0)
    # 500 prompt tokens ahead: half a second of prefill, within a chat's 1 s deadline.
    middleware.gate.admit("other", "chat", 500,
                          middleware.gate.judge("chat", 1, clock.now, waited=0.0), clock.now)
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    assert (await post(middleware, app, CHAT_COMPLETIONS_PATH, chat))[0]["status"] == 200
    status, report = await admin(middleware, "PUT", b'{"deadline_slack": 0.3}')
    assert status == 200
    assert (report["deadline_slack"], report["max_tokens_ahead"]) == (0.3, None)
    assert report["deadlines"]["chat"] == pytest.approx(0.3)
    assert report["prefill_tokens_per_second"] == pytest.approx(1000.0, rel=0.05)
    assert registry.get_sample_value("governor_admission_deadline_slack") == 0.3
    # The same arrival is now late: 0.5 s ahead of a 0.3 s deadline.
    refused = await post(middleware, app, CHAT_COMPLETIONS_PATH, chat)
    assert refused[0]["status"] == 429
    status, got = await admin(middleware, "GET")
    assert (status, got["deadline_slack"]) == (200, 0.3)


BAD_BODIES = [
    (b"not json", 400, None),
    (b"[1, 2]", 400, None),
    (b"{}", 400, None),
    (b'{"deadline_slack": 1, "evil": 2}', 400, "evil"),
    (b'{"deadline_slack": "0.5"}', 400, "deadline_slack"),
    (b'{"deadline_slack": true}', 400, "deadline_slack"),
    (b'{"deadline_slack": 0}', 422, "deadline_slack"),
    (b'{"deadline_slack": -1}', 422, "deadline_slack"),
    (b'{"deadline_slack": NaN}', 422, "deadline_slack"),
    (b'{"deadline_slack": 1e400}', 422, "deadline_slack"),
    (b'{"deadline_slack": 101}', 422, "deadline_slack"),
    (b'{"deadline_slack": 5e-324}', 422, "deadline_slack"),
    (b'{"deadline_slack": 0.5, "max_tokens_ahead": -5}', 422, "max_tokens_ahead"),
    (b'{"deadline_slack": 0.5, "max_tokens_ahead": 1.5}', 400, "max_tokens_ahead"),
    (b"[" * 100_000, 413, None),
]


@pytest.mark.parametrize(("body", "status", "param"), BAD_BODIES,
                         ids=[b[:24].decode() for b, _, _ in BAD_BODIES])
async def test_a_hostile_put_is_refused_clearly_and_changes_nothing(
        body: bytes, status: int, param: str | None) -> None:
    middleware, *_ = gated()
    got, answer = await admin(middleware, "PUT", body)
    assert got == status
    assert answer["error"]["type"] == "invalid_request_error" and answer["error"]["message"]
    assert answer["error"]["param"] == param
    assert middleware.gate.deadline.settings.slack == 1.0  # untouched, the half-valid one too
    assert middleware.gate.deadline.settings.max_tokens_ahead is None


@pytest.mark.parametrize("headers", [(), ((b"authorization", b"Bearer wrong"),),
                                     ((b"authorization", b"Basic " + TOKEN.encode()),)],
                         ids=["no token", "a wrong token", "not a bearer"])
async def test_without_the_admin_token_nothing_is_read_or_moved(
        headers: tuple[tuple[bytes, bytes], ...]) -> None:
    middleware, *_ = gated()
    for method, body in (("GET", b""), ("PUT", b'{"deadline_slack": 0.2}')):
        status, answer = await admin(middleware, method, body, headers)
        assert status == 401 and answer["error"]["type"] == "authentication_error"
    assert middleware.gate.deadline.settings.slack == 1.0


async def test_a_gate_built_without_a_token_is_closed_and_other_methods_are_405() -> None:
    app = FakeVllm()
    closed = AdmissionMiddleware(app, settings(), registry=CollectorRegistry())
    assert (await admin(closed, "PUT", b'{"deadline_slack": 0.2}'))[0] == 401
    assert closed.gate.deadline.settings.slack == 1.0
    middleware, *_ = gated()
    assert (await admin(middleware, "DELETE"))[0] == 405


async def test_the_middleware_way_in_carries_the_admin_token_to_the_route() -> None:
    app = FakeVllm()
    outer = AdminMiddleware(app, AdminSettings(Secret(TOKEN)), gate=settings(),
                            registry=CollectorRegistry())
    status, report = await admin(outer, "PUT", b'{"max_tokens_ahead": 4096}')
    assert (status, report["max_tokens_ahead"]) == (200, 4096)
    assert (await admin(outer, "GET", headers=()))[0] == 401


# ---- the cap on the body the gate reads ------------------------------------------------------

async def test_a_body_past_the_cap_is_answered_413_before_vllm_sees_it() -> None:
    middleware, app, _, registry = gated(settings(**{MAX_BODY_ENV: "200"}))
    small = {"messages": [{"role": "user", "content": "hi"}]}
    assert (await post(middleware, app, CHAT_COMPLETIONS_PATH, small))[0]["status"] == 200
    big = {"messages": [{"role": "user", "content": "x" * 400}]}
    start, body = await post(middleware, app, CHAT_COMPLETIONS_PATH, big)
    assert start["status"] == 413
    error = json.loads(body["body"])["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "body_too_large")
    assert "larger than 200 bytes" in error["message"] and MAX_BODY_ENV in error["message"]
    assert len(app.seen) == 1  # vLLM saw the small one only
    assert registry.get_sample_value("governor_admitted_requests_total",
                                     {"class": "chat"}) == 1.0


@pytest.mark.parametrize("value", ["abc", "0", "-5", "1" * 20],
                         ids=["not a number", "zero", "negative", "absurd"])
def test_a_bad_body_cap_is_one_clear_error_at_start(value: str) -> None:
    with pytest.raises(GateConfigError, match=MAX_BODY_ENV):
        GateSettings.from_env({SPEC_ENV: SPEC, MAX_BODY_ENV: value})


def test_the_body_cap_defaults_past_any_prompt_vllm_serves() -> None:
    assert settings().max_body_bytes >= 16 * 1024 * 1024 > MAX_BODY_BYTES
