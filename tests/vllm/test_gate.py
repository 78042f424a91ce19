"""The admission gate in front of stock vLLM, without vLLM: its settings from the environment,
what it reads of a body and of vLLM's request states, and the middleware's answers on a fake
vLLM app (a fake clock, vLLM's states as plain objects)."""

from __future__ import annotations

import doctest
import importlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from governor.admission.deadline import DEFAULT_CALIBRATION_QUANTILE, ClassDeadline
from governor.common.secrets import Secret
from governor.contracts.endpoints import CHAT_COMPLETIONS_PATH, COMPLETIONS_PATH
from governor.vllm import MIDDLEWARE, AdminMiddleware
from governor.vllm.admin import AdminSettings
from governor.vllm.admission import AdmissionMiddleware
from governor.vllm.asgi import Message, Scope
from governor.vllm.backlog import EngineRequest, gate_key, read_states
from governor.vllm.endpoint import AdminEndpoints
from governor.vllm.gate import (
    CALIBRATION_ENV,
    SLACK_ENV,
    SPEC_ENV,
    TOKENS_AHEAD_ENV,
    GateConfigError,
    GateSettings,
    GenerationGate,
)
from governor.vllm.prompts import estimate

ROOT = Path(__file__).resolve().parents[2]
SPEC = str(ROOT / "slo.yaml")  # doc (priority 10, 20 s) and chat (1 s)
ADMIN = AdminSettings(Secret("t"))


# ---- settings --------------------------------------------------------------------------------

def test_the_gate_is_off_unless_a_spec_is_named() -> None:
    assert GateSettings.from_env({}) is None
    assert GateSettings.from_env({SPEC_ENV: "  "}) is None


def test_the_spec_gives_each_class_its_deadline_at_one_rank() -> None:
    settings = GateSettings.from_env({SPEC_ENV: SPEC, SLACK_ENV: "1.5", TOKENS_AHEAD_ENV: "4096"})
    assert settings is not None
    by_name = {d.name: d for d in settings.deadlines}
    assert (by_name["chat"].ttft_seconds, by_name["doc"].ttft_seconds) == (1.0, 20.0)
    # The gate does not hand vLLM a priority: every class's prompts are ahead of every other's.
    assert {d.priority for d in settings.deadlines} == {0}
    assert (settings.deadline.slack, settings.deadline.max_tokens_ahead) == (1.5, 4096)


def test_every_bad_setting_is_told_at_once(tmp_path: Path) -> None:
    with pytest.raises(GateConfigError) as raised:
        GateSettings.from_env({SPEC_ENV: str(tmp_path / "missing.yaml"), SLACK_ENV: "-1",
                               TOKENS_AHEAD_ENV: "lots", CALIBRATION_ENV: "often"})
    message = str(raised.value)
    assert SLACK_ENV in message and TOKENS_AHEAD_ENV in message and "missing.yaml" in message
    assert CALIBRATION_ENV in message


def test_the_calibration_is_on_unless_turned_off_and_a_quantile_when_set() -> None:
    settings = GateSettings.from_env({SPEC_ENV: SPEC})
    assert settings is not None
    assert settings.deadline.calibration_quantile == DEFAULT_CALIBRATION_QUANTILE == 0.9
    settings = GateSettings.from_env({SPEC_ENV: SPEC, CALIBRATION_ENV: " OFF "})
    assert settings is not None and settings.deadline.calibration_quantile is None
    settings = GateSettings.from_env({SPEC_ENV: SPEC, CALIBRATION_ENV: "0.99"})
    assert settings is not None and settings.deadline.calibration_quantile == 0.99
    with pytest.raises(GateConfigError, match="calibration_quantile must be in"):
        GateSettings.from_env({SPEC_ENV: SPEC, CALIBRATION_ENV: "2"})


@pytest.mark.parametrize("slack", ["0.001", "1000"])
def test_a_slack_the_admin_api_would_refuse_is_refused_at_start(slack: str) -> None:
    """One range wherever a slack enters: a gate started at 1000 reported a slack its own
    ``PUT`` and the controller refuse."""
    with pytest.raises(GateConfigError, match=r"slack must be within \[0.01, 100\]"):
        GateSettings.from_env({SPEC_ENV: SPEC, SLACK_ENV: slack})


# ---- what it reads -----------------------------------------------------------------------------

@pytest.mark.parametrize(("path", "body", "tokens"), [
    (COMPLETIONS_PATH, {"prompt": "a" * 400}, 100),
    (COMPLETIONS_PATH, {"prompt": [1, 2, 3]}, 3),
    (COMPLETIONS_PATH, {"prompt": [[1, 2], [3]]}, 3),
    (COMPLETIONS_PATH, {"prompt": ["abcd", "abcdefgh"]}, 3),
    (CHAT_COMPLETIONS_PATH, {"messages": [{"role": "user", "content": "é" * 8},
                                          {"role": "user",
                                           "content": [{"type": "text", "text": "abcd"}]}]}, 5),
], ids=["text", "token ids", "lists of token ids", "texts", "chat, plain and in parts"])
def test_a_prompt_is_estimated_from_its_text_or_counted_from_its_ids(
        path: str, body: dict[str, Any], tokens: int) -> None:
    prompt = estimate(path, json.dumps(body).encode())
    assert prompt is not None and prompt.tokens == tokens


def test_a_body_vllm_will_refuse_is_not_estimated() -> None:
    assert estimate(COMPLETIONS_PATH, b"[1, 2]") is None
    assert estimate(COMPLETIONS_PATH, b'{"messages": []}') is None
    assert estimate(CHAT_COMPLETIONS_PATH, b'{"messages": "hi"}') is None


def test_vllm_request_ids_lead_back_to_the_gate_s_key() -> None:
    assert gate_key("chatcmpl-abc-1") == "abc-1"
    assert gate_key("cmpl-abc-1-12") == "abc-1"
    assert gate_key("cmpl-abc") is None and gate_key("tokenize-x") is None


def test_vllm_s_states_are_read_where_it_has_them() -> None:
    states = {"i1": SimpleNamespace(external_req_id="chatcmpl-k", prompt_len=40,
                                    is_prefilling=True),
              "i2": SimpleNamespace(external_req_id="embd-3", prompt_len=9, is_prefilling=True)}
    client = SimpleNamespace(output_processor=SimpleNamespace(request_states=states))
    assert read_states(client) == [EngineRequest("k", 40, True)]
    assert read_states(SimpleNamespace()) is None
    assert read_states(None) is None


# ---- following vLLM's states -------------------------------------------------------------------

CHAT = ClassDeadline("chat", 0, 1.0)


def test_a_request_counts_ahead_from_admission_and_as_vllm_counted_it_once_in() -> None:
    gate = GenerationGate((CHAT,))
    gate.admit("a", "chat", 100, gate.judge("chat", 100, 0.0, waited=0.0), 0.0)
    assert gate.deadline.tokens_ahead("chat") == 100  # vLLM is still tokenizing it
    gate.sync([], 0.05)
    assert gate.deadline.tokens_ahead("chat") == 100
    gate.sync([EngineRequest("a", 180, True)], 0.1)
    assert gate.deadline.pending_tokens == 180
    samples = gate.sync([EngineRequest("a", 180, False)], 1.0)
    assert [(s.name, s.actual_seconds) for s in samples] == [("chat", 1.0)]
    assert gate.deadline.pending_tokens == 0 and gate.deadline.rate == pytest.approx(180, rel=0.05)
    assert gate.sync([EngineRequest("a", 180, False)], 1.2) == []  # counted once
    assert gate.finish("a", [], 2.0) == [] and "a" not in gate


def test_a_request_with_several_prompts_has_its_first_token_when_all_have() -> None:
    gate = GenerationGate((CHAT,))
    gate.admit("a", "chat", 10, gate.judge("chat", 10, 0.0, waited=0.0), 0.0)
    gate.sync([EngineRequest("a", 30, False), EngineRequest("a", 30, True)], 0.5)
    assert gate.deadline.pending_tokens == 60
    assert len(gate.sync([EngineRequest("a", 30, False), EngineRequest("a", 30, False)],
                         1.0)) == 1


def test_a_request_that_left_vllm_between_two_reads_was_prefilled() -> None:
    gate = GenerationGate((CHAT,))
    gate.admit("a", "chat", 10, gate.judge("chat", 10, 0.0, waited=0.0), 0.0)
    gate.sync([EngineRequest("a", 500, True)], 0.2)
    assert len(gate.finish("a", [], 1.0)) == 1  # done before the next read: it was served
    assert gate.deadline.pending_tokens == 0 and gate.deadline.rate == pytest.approx(500, rel=0.05)


def test_a_client_gone_before_its_first_token_leaves_the_backlog_unmeasured() -> None:
    gate = GenerationGate((CHAT,))
    gate.admit("a", "chat", 10, gate.judge("chat", 10, 0.0, waited=0.0), 0.0)
    gate.sync([EngineRequest("a", 50, True)], 0.5)
    gate.disconnected("a", [EngineRequest("a", 50, True)], 1.0)  # vLLM will abort it
    assert gate.finish("a", [], 1.1) == []  # gone from vLLM: aborted, not served
    assert gate.deadline.pending_tokens == 0 and gate.deadline.rate is None


def test_a_client_gone_after_its_first_token_was_served() -> None:
    gate = GenerationGate((CHAT,))
    gate.admit("a", "chat", 10, gate.judge("chat", 10, 0.0, waited=0.0), 0.0)
    gate.sync([EngineRequest("a", 50, True)], 0.5)
    assert len(gate.disconnected("a", [EngineRequest("a", 50, False)], 1.0)) == 1


def test_a_request_vllm_never_showed_leaves_the_backlog_unmeasured() -> None:
    gate = GenerationGate((CHAT,))
    gate.admit("a", "chat", 10, gate.judge("chat", 10, 0.0, waited=0.0), 0.0)
    assert gate.finish("a", [], 1.0) == []  # vLLM's own 400, or in and out unseen
    assert gate.deadline.pending_tokens == 0 and gate.deadline.rate is None


# ---- the middleware ----------------------------------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeVllm:
    """vLLM's app as the gate sees it: it reads the body, and keeps a state per request."""

    def __init__(self) -> None:
        self.states: dict[str, SimpleNamespace] = {}
        self.engine_client = SimpleNamespace(
            output_processor=SimpleNamespace(request_states=self.states))
        self.state = SimpleNamespace(engine_client=self.engine_client)
        self.seen: list[tuple[bytes, dict[bytes, bytes], Any]] = []

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        body = (await receive())["body"]
        headers = dict(scope["headers"])
        self.seen.append((body, headers, send))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def warm(gate: GenerationGate, tokens_per_second: float) -> float:
    """Ten seconds of steady prefill through the gate's own path; returns the time after."""
    for i in range(10):
        key = f"warm{i}"
        gate.admit(key, "chat", 1, gate.judge("chat", 1, float(i), waited=0.0), float(i))
        gate.sync([EngineRequest(key, int(tokens_per_second), True)], float(i))
        gate.finish(key, [EngineRequest(key, int(tokens_per_second), False)], float(i + 1))
    return 10.0


async def post(middleware: AdmissionMiddleware, app: FakeVllm, path: str, body: dict[str, Any],
               headers: tuple[tuple[bytes, bytes], ...] = ()) -> list[Message]:
    sent: list[Message] = []
    chunks = [{"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}]

    async def receive() -> Message:
        return chunks.pop(0) if chunks else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path, "headers": list(headers),
             "app": app}
    await middleware(scope, receive, send)
    return sent


@pytest.fixture
def gated() -> tuple[AdmissionMiddleware, FakeVllm, Clock, CollectorRegistry]:
    settings = GateSettings.from_env({SPEC_ENV: SPEC})
    assert settings is not None
    app, clock, registry = FakeVllm(), Clock(), CollectorRegistry()
    return AdmissionMiddleware(app, settings, registry=registry, clock=clock), app, clock, registry


async def test_a_request_past_its_deadline_is_refused_as_governor_serve_refuses_it(
        gated: tuple[AdmissionMiddleware, FakeVllm, Clock, CollectorRegistry]) -> None:
    middleware, app, clock, registry = gated
    clock.now = warm(middleware.gate, 1000.0)
    # 3000 prompt tokens in vLLM without a first token: 3 s of prefill ahead of a 1 s chat.
    app.states["i"] = SimpleNamespace(external_req_id="chatcmpl-other", prompt_len=3000,
                                      is_prefilling=True)
    middleware.gate.admit("other", "chat", 3000,
                          middleware.gate.judge("chat", 1, clock.now, waited=0.0), clock.now)
    sent = await post(middleware, app, CHAT_COMPLETIONS_PATH,
                      {"messages": [{"role": "user", "content": "hi"}]})
    start, body = sent
    headers = dict(start["headers"])
    assert start["status"] == 429 and int(headers[b"retry-after"]) >= 2
    error = json.loads(body["body"])["error"]
    assert (error["type"], error["code"]) == ("rate_limit_error", "deadline")
    assert "3000 prompt tokens ahead of this chat request" in error["message"]
    assert app.seen == []  # vLLM never saw it
    assert registry.get_sample_value("governor_admission_rejections_total",
                                     {"reason": "deadline", "class": "chat"}) == 1.0
    assert registry.get_sample_value("governor_admission_backlog_prompt_tokens") == 3000.0
    # A document's 20 s deadline leaves room for the same backlog.
    sent = await post(middleware, app, COMPLETIONS_PATH, {"prompt": "x"},
                      headers=((b"x-governor-class", b"doc"),))
    assert sent[0]["status"] == 200
    assert registry.get_sample_value("governor_admitted_requests_total", {"class": "doc"}) == 1.0


async def test_an_admitted_request_reaches_vllm_as_it_came_with_an_id_to_follow_it(
        gated: tuple[AdmissionMiddleware, FakeVllm, Clock, CollectorRegistry]) -> None:
    middleware, app, _, registry = gated
    body = {"prompt": "hello", "max_tokens": 4}
    await post(middleware, app, COMPLETIONS_PATH, body)
    await post(middleware, app, COMPLETIONS_PATH, body, headers=((b"x-request-id", b"mine"),))
    (first, headers, _), (second, own, _) = app.seen
    assert json.loads(first) == body and json.loads(second) == body
    assert headers[b"x-request-id"].startswith(b"governor-")
    assert own[b"x-request-id"] == b"mine"  # the client's id is kept
    assert registry.get_sample_value("governor_admitted_requests_total",
                                     {"class": "chat"}) == 2.0
    assert not middleware.gate.deadline.queued_tokens  # both over: nothing left ahead


async def test_the_stream_is_vllm_s_own_send() -> None:
    settings = GateSettings.from_env({SPEC_ENV: SPEC})
    assert settings is not None
    app = FakeVllm()
    middleware = AdmissionMiddleware(app, settings, registry=CollectorRegistry())
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    async def receive() -> Message:
        return {"type": "http.request", "body": b'{"prompt": "hi"}', "more_body": False}

    scope = {"type": "http", "method": "POST", "path": COMPLETIONS_PATH, "headers": [],
             "app": app}
    await middleware(scope, receive, send)
    assert app.seen[0][2] is send  # not wrapped: every chunk goes straight to the client
    other = {**scope, "path": "/v1/models", "method": "GET"}
    await middleware(other, receive, send)
    assert len(app.seen) == 2 and app.seen[1][0] == b'{"prompt": "hi"}'  # untouched


async def test_a_request_id_already_in_flight_is_let_in_unfollowed(
        gated: tuple[AdmissionMiddleware, FakeVllm, Clock, CollectorRegistry]) -> None:
    middleware, app, _, _ = gated
    middleware.gate.admit("dup", "chat", 5, middleware.gate.judge("chat", 5, 0.0, waited=0.0),
                          0.0)
    await post(middleware, app, COMPLETIONS_PATH, {"prompt": "x"},
               headers=((b"x-request-id", b"dup"),))
    assert len(app.seen) == 1 and "dup" in middleware.gate  # the first one is still followed


class RecordingApp:
    """What vLLM's FastAPI app offers an endpoint plugin: its args, and add_middleware."""

    def __init__(self, middleware: list[str]) -> None:
        self.state = SimpleNamespace(args=SimpleNamespace(middleware=middleware))
        self.added: list[Any] = []
        self.routes: list[str] = []

    def add_middleware(self, cls: Any, **options: Any) -> None:
        self.added.append(cls)

    def add_route(self, path: str, *_: Any, **__: Any) -> None:
        self.routes.append(path)


@pytest.mark.parametrize(("middleware", "gates"), [
    ([], [AdmissionMiddleware]),
    ([MIDDLEWARE], []),  # the middleware carries the gate: one gate, not two
    (["governor.vllm.middleware.AdminMiddleware"], []),
    (["my.own.Middleware"], [AdmissionMiddleware]),
], ids=["plugin alone", "with Governor's middleware", "by its module's path", "beside another"])
def test_one_gate_whichever_way_in(middleware: list[str], gates: list[Any]) -> None:
    settings = GateSettings.from_env({SPEC_ENV: SPEC})
    app = RecordingApp(middleware)
    AdminEndpoints(ADMIN, gate=settings).attach_router(app)
    assert app.added == gates and app.routes == ["/admin/batching"]
    AdminEndpoints(ADMIN, gate=None).attach_router(app)  # off: nothing added
    assert app.added == gates
    wrapped = AdminMiddleware(FakeVllm(), ADMIN, gate=settings, registry=CollectorRegistry())
    assert isinstance(wrapped.app, AdmissionMiddleware)


class AbortedVllm(FakeVllm):
    """vLLM with a request in prefill when its client goes away: it learns of it from receive."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock
        self.read: Any = None  # the gate's read of vLLM's states, as its background task does

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        await receive()
        key = dict(scope["headers"])[b"x-request-id"].decode()
        self.states["i"] = SimpleNamespace(external_req_id=f"cmpl-{key}-0", prompt_len=300,
                                           is_prefilling=True)
        self.read(self.clock())  # the gate sees it in prefill
        self.clock.now = 2.0
        assert (await receive())["type"] == "http.disconnect"
        del self.states["i"]  # vLLM aborts it


async def test_a_request_whose_client_left_in_prefill_is_not_counted_as_prefilled() -> None:
    settings = GateSettings.from_env({SPEC_ENV: SPEC})
    assert settings is not None
    clock = Clock()
    app = AbortedVllm(clock)
    middleware = AdmissionMiddleware(app, settings, registry=CollectorRegistry(), clock=clock)
    app.read = middleware.sync
    await post(middleware, app, COMPLETIONS_PATH, {"prompt": "x" * 40})
    deadline = middleware.gate.deadline
    # Counted as prefilled, it would read 150 tokens/s: 300 in 2 s.
    assert (deadline.pending_tokens, deadline.queued_tokens, deadline.rate) == (0, 0, None)


@pytest.mark.parametrize("name", ["governor.vllm.prompts", "governor.vllm.backlog"])
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0
