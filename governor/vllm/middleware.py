"""``vllm serve --middleware governor.vllm.AdminMiddleware``: the admin API on any vLLM.

vLLM adds a class named by ``--middleware`` with ``app.add_middleware(cls)``, no arguments, so
the settings come from the environment (:class:`governor.vllm.admin.AdminSettings`). It is a
pure ASGI middleware: a request for ``/admin/batching`` is answered here, and every other one is
handed to vLLM's app untouched, without wrapping its ``receive`` or ``send``, so it never sits on
the streaming path (Starlette's ``BaseHTTPMiddleware`` would wrap every stream).

User middleware runs outermost, before vLLM's ``--api-key`` check (which guards only ``/v1``
and a few other prefixes): the route's own bearer token guards it. The engine is the app's
``state.engine_client``, there once vLLM has initialised its state.

With ``GOVERNOR_ADMISSION_SLO_FILE`` set, the generation routes pass the admission gate first
(:mod:`governor.vllm.admission`): a request that would miss its first-token deadline is refused
429 before vLLM sees it; the others go on with their body as it came.
"""

from __future__ import annotations

import os

from prometheus_client import REGISTRY, CollectorRegistry

from governor.contracts.endpoints import ADMIN_BATCHING_PATH
from governor.vllm.admin import AdminRoute, AdminSettings, Answer
from governor.vllm.admission import AdmissionMiddleware
from governor.vllm.asgi import ASGIApp, Receive, Scope, Send, body_chunks, header, send_answer
from governor.vllm.gate import GateSettings
from governor.vllm.runtime_info import export_runtime_info
from governor.vllm.shared_bound import SharedBound

__all__ = ["AdminMiddleware", "body_chunks", "header", "send_answer"]


class AdminMiddleware:
    """Answers ``GET``/``PUT /admin/batching``; passes everything else straight through (past
    the admission gate on the generation routes, when it is on)."""

    def __init__(self, app: ASGIApp, settings: AdminSettings | None = None,
                 gate: GateSettings | None = None,
                 registry: CollectorRegistry = REGISTRY) -> None:
        self.route = AdminRoute(settings or AdminSettings.from_env(os.environ))
        # The admission gate, when the environment turns it on (vLLM builds this with no
        # arguments), stands between this route and vLLM's app; its series go where vLLM's
        # /metrics reads them.
        gate = gate or GateSettings.from_env(os.environ)
        self.app = app if gate is None else AdmissionMiddleware(
            app, gate, registry=registry, admin=self.route.settings,
            shared=SharedBound.from_env(os.environ))
        export_runtime_info(registry)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") != ADMIN_BATCHING_PATH:
            await self.app(scope, receive, send)
            return
        answer = await self._answer(scope, receive)
        await send_answer(send, answer)

    async def _answer(self, scope: Scope, receive: Receive) -> Answer:
        app = scope.get("app")
        engine_client = getattr(getattr(app, "state", None), "engine_client", None)
        return await self.route.answer_request(scope["method"], header(scope, b"authorization"),
                                               body_chunks(receive), engine_client)
