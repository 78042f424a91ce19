"""The admission gate as pure ASGI, in front of vLLM's generation routes.

A ``POST`` to ``/v1/chat/completions`` or ``/v1/completions`` is read whole, judged by the
deadline gate (:mod:`.gate`), and either refused here (429 with ``Retry-After`` and OpenAI's
error body, as ``governor serve`` answers) or handed to vLLM with its body replayed as it came.
The gate acts before the request enters vLLM; the response's ``send`` is never wrapped, so a
stream vLLM writes never passes through it. Every other request goes straight through.

Each request the gate lets in carries an id vLLM will use (the client's ``X-Request-Id`` or the
body's ``request_id``, else one the gate adds as ``X-Request-Id``), by which the gate finds it in
vLLM's own states (:mod:`.backlog`). It reads them at every arrival and every
:data:`SYNC_SECONDS` in a background task of vLLM's event loop::

    app.add_middleware(AdmissionMiddleware, settings=GateSettings.from_env(os.environ))
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any, Final

from prometheus_client import REGISTRY, CollectorRegistry

from governor.admission.deadline import Judgement, WaitSample
from governor.admission.refusal import refusal_message
from governor.contracts.endpoints import ADMIN_ADMISSION_PATH, GENERATION_PATHS
from governor.contracts.errors import INVALID_REQUEST, RATE_LIMIT, error_body
from governor.vllm import admission_admin
from governor.vllm.admin import AdminSettings, Answer, BodyTooLarge, read_body
from governor.vllm.asgi import (
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    body_chunks,
    header,
    send_answer,
)
from governor.vllm.backlog import EngineRequest, read_states
from governor.vllm.gate import GateSettings, GenerationGate
from governor.vllm.gate_metrics import GateMetrics
from governor.vllm.prompts import Prompt, estimate
from governor.vllm.shared_bound import SharedBound

log = logging.getLogger("governor.vllm.admission")

REQUEST_ID_HEADER: Final = b"x-request-id"
# How often the gate reads vLLM's states between arrivals: a first token is seen this late at
# most, which the prefill rate's 30 s average hardly notices.
SYNC_SECONDS: Final = 0.1


class AdmissionMiddleware:
    """Refuses, before vLLM sees them, the generation requests that would miss their deadline."""

    def __init__(self, app: ASGIApp, settings: GateSettings, *,
                 registry: CollectorRegistry = REGISTRY,
                 clock: Callable[[], float] = time.monotonic,
                 admin: AdminSettings | None = None,
                 shared: SharedBound | None = None) -> None:
        self.app = app
        self.settings = settings
        # ``/admin/admission``'s token (None: the route answers 401 to everyone).
        self.admin = admin or AdminSettings(None)
        self.gate = GenerationGate(settings.deadlines, settings.deadline)
        # The bound a PUT moves, shared with the server's other API processes.
        self.knobs = admission_admin.AdmissionKnobs(self.gate.deadline, shared)
        self.metrics = GateMetrics(registry, settings.classes.names)
        self.metrics.read(self.gate.deadline)
        self._clock = clock
        self._engine_client: Any = None
        self._follower: asyncio.Task[None] | None = None
        self._unreadable = False
        self._synced_at = -float("inf")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("path") == ADMIN_ADMISSION_PATH:
            self._engine_client = _engine_client(scope) or self._engine_client
            await send_answer(send, await admission_admin.answer_request(
                self.admin, self.knobs, self._engine_client, scope["method"],
                header(scope, b"authorization"), body_chunks(receive)))
            self.metrics.read(self.gate.deadline)
            self.metrics.vllm_bound(self.knobs.bound(self._engine_client))
            return
        if (scope["type"] != "http" or scope.get("method") != "POST"
                or scope.get("path") not in GENERATION_PATHS):
            await self.app(scope, receive, send)
            return
        arrived = self._clock()
        limit = self.settings.max_body_bytes
        try:
            body = await read_body(body_chunks(receive), limit)
        except BodyTooLarge:
            await send_answer(send, Answer(413, error_body(
                f"the request body is larger than {limit} bytes, the most Governor's admission "
                f"gate reads (GOVERNOR_ADMISSION_MAX_BODY_BYTES)", INVALID_REQUEST,
                code="body_too_large")))
            return
        prompt = estimate(scope["path"], body)
        replay = _replay(body, receive)
        if prompt is None:  # not a body vLLM will serve: its own 400, uncounted
            await self.app(scope, replay, send)
            return
        self._engine_client = getattr(getattr(scope.get("app"), "state", None),
                                      "engine_client", None)
        self._follow()
        await self._gate(scope, replay, send, prompt, arrived)

    async def _gate(self, scope: Scope, receive: Receive, send: Send, prompt: Prompt,
                    arrived: float) -> None:
        headers = _headers(scope)
        name = self.settings.classes.classify(scope["path"], headers, prompt.tokens).name
        now = self._clock()
        # vLLM's states are walked at most once per SYNC_SECONDS (the follower reads them that
        # often anyway), not at every arrival: a walk is O(requests in flight), and a burst of
        # arrivals, the gate's busiest moment, would pay it once each.
        if now - self._synced_at >= SYNC_SECONDS:
            self.sync(now)
        judgement = self.gate.judge(name, prompt.tokens, now, waited=now - arrived)
        if not judgement.admit:
            self.metrics.refused(judgement.reason, name)
            await send_answer(send, refusal(name, judgement))
            return
        self.metrics.admitted(name)
        key = headers.get(REQUEST_ID_HEADER.decode()) or prompt.request_id
        if key is None:
            key = f"governor-{uuid.uuid4().hex}"
            # In place, as ASGI middleware does: the scope stays the one every layer shares.
            scope["headers"] = [*scope.get("headers", ()), (REQUEST_ID_HEADER, key.encode())]
        if key in self.gate:  # an id already in flight: let it in, but it cannot be followed
            await self.app(scope, receive, send)
            return
        self.gate.admit(key, name, prompt.tokens, judgement, now)
        try:
            await self.app(scope, self._watched(key, receive), send)
        finally:
            self._observe(self.gate.finish(key, self._states(), self._clock()))

    def sync(self, now: float) -> None:
        """Bring the gate in line with vLLM's states of this API server's requests."""
        self._synced_at = now
        self.knobs.follow(self._engine_client)
        self.metrics.vllm_bound(self.knobs.bound(self._engine_client))
        self._observe(self.gate.sync(self._states(), now))

    def _states(self) -> list[EngineRequest]:
        states = read_states(self._engine_client)
        if states is None:
            if not self._unreadable and self._engine_client is not None:
                self._unreadable = True
                log.warning("Governor's admission gate cannot read this vLLM's request states "
                            "(engine_client.output_processor.request_states): it measures no "
                            "prefill rate and refuses nothing by deadline")
            return []
        return states

    def _observe(self, samples: list[WaitSample]) -> None:
        for sample in samples:
            self.metrics.waited(sample)
        self.metrics.read(self.gate.deadline)

    def _watched(self, key: str, receive: Receive) -> Receive:
        """``receive`` that tells the gate of the client's going away before vLLM learns of it
        (and aborts the request)."""

        async def watched() -> Message:
            message = await receive()
            if message["type"] == "http.disconnect":
                self._observe(self.gate.disconnected(key, self._states(), self._clock()))
            return message

        return watched

    def _follow(self) -> None:
        """Start following vLLM's states in the background, once per event loop."""
        if self._follower is None or self._follower.done():
            self._follower = asyncio.get_running_loop().create_task(self._following())

    async def _following(self) -> None:
        while True:
            await asyncio.sleep(SYNC_SECONDS)
            try:
                self.sync(self._clock())
            except Exception:  # a vLLM whose states changed shape: say so, keep serving
                log.exception("Governor's admission gate could not read vLLM's request states")
                await asyncio.sleep(60)


def refusal(request_class: str, judgement: Judgement) -> Answer:
    """``governor serve``'s answer to a request the deadline gate refused."""
    return Answer(429, error_body(refusal_message(request_class, judgement), RATE_LIMIT,
                                  code=judgement.reason),
                  judgement.retry_after_seconds)


def _engine_client(scope: Scope) -> Any:
    return getattr(getattr(scope.get("app"), "state", None), "engine_client", None)


def _headers(scope: Scope) -> dict[str, str]:
    """Header names in lower case, values as sent (the first of a repeated header)."""
    found: dict[str, str] = {}
    for key, value in scope.get("headers", ()):
        found.setdefault(bytes(key).decode("latin-1").lower(), bytes(value).decode("latin-1"))
    return found


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` for vLLM: the body already read, then the client's own messages (its
    disconnect, which vLLM watches while it streams)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
