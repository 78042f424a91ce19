"""The endpoint plugin ``governor_admin`` (vLLM ≥ 0.26): the admin API as a route of vLLM's app.

vLLM loads endpoint plugins only when ``VLLM_PLUGINS`` names them, and that variable filters
every plugin group, so Governor's engine plugin must be named with it::

    VLLM_PLUGINS=governor_batching,governor_admin vllm serve MODEL …

Named alone, ``governor_admin`` answers 501 and says so (:data:`governor.vllm.utility.
MISSING_METHODS`). The factory is the entry point (``vllm.endpoint_plugins``); vLLM calls
:meth:`AdminEndpoints.attach_router` while it builds the app and :meth:`AdminEndpoints.init_state`
once the engine client exists.

With ``GOVERNOR_ADMISSION_SLO_FILE`` set, the plugin also puts the admission gate
(:mod:`governor.vllm.admission`) in front of vLLM's generation routes, unless ``--middleware``
names Governor's middleware, which then carries it.
"""

from __future__ import annotations

import os
from argparse import Namespace
from typing import Any, ClassVar

from governor.contracts.endpoints import ADMIN_BATCHING_PATH
from governor.vllm.admin import AdminRoute, AdminSettings, Answer
from governor.vllm.admission import AdmissionMiddleware
from governor.vllm.gate import GateSettings
from governor.vllm.middleware import AdminMiddleware
from governor.vllm.shared_bound import SharedBound


class AdminEndpoints:
    """What ``vllm.endpoint_plugins`` asks of a plugin: a name, the tasks it needs, its routes
    and its state."""

    name: ClassVar[str] = "governor_admin"
    # It needs an engine to retune: not the CPU-only render server.
    required_tasks: ClassVar[tuple[str, ...] | None] = ("generate",)

    def __init__(self, settings: AdminSettings | None = None,
                 gate: GateSettings | None = None) -> None:
        self.route = AdminRoute(settings or AdminSettings.from_env(os.environ))
        self.gate = gate or GateSettings.from_env(os.environ)
        self.engine_client: Any = None

    def attach_router(self, app: Any) -> None:
        """Register ``GET``/``PUT /admin/batching`` on vLLM's FastAPI app, and the admission
        gate in front of its generation routes when it is on."""
        if self.gate is not None and not _has_governors_middleware(app):
            # Added before vLLM adds its own middleware, so it runs inside them: after CORS
            # and vLLM's --api-key check, right in front of the routes.
            app.add_middleware(AdmissionMiddleware, settings=self.gate,
                               admin=self.route.settings,
                               shared=SharedBound.from_env(os.environ))
        from starlette.responses import Response

        async def batching(request: Any) -> Response:
            answer = await self._answer(request)
            return Response(answer.json(), status_code=answer.status,
                            headers={k.decode(): v.decode() for k, v in answer.headers()})

        app.add_route(ADMIN_BATCHING_PATH, batching, methods=["GET", "PUT"],
                      include_in_schema=False)

    async def init_state(self, engine_client: Any, state: Any, args: Namespace) -> None:
        self.engine_client = engine_client

    async def _answer(self, request: Any) -> Answer:
        return await self.route.answer_request(request.method,
                                               request.headers.get("authorization"),
                                               request.stream(), self.engine_client)


def _has_governors_middleware(app: Any) -> bool:
    """Whether ``--middleware`` names Governor's, which carries the gate itself (two gates would
    count every request twice)."""
    named = getattr(getattr(getattr(app, "state", None), "args", None), "middleware", None) or ()
    return any(isinstance(path, str) and path.rsplit(".", 1)[-1] == AdminMiddleware.__name__
               and path.startswith("governor.vllm") for path in named)
