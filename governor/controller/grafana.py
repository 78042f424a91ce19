"""Mark each change on Grafana's dashboards through its HTTP annotations API.

Best effort: Grafana being down or slow never delays or fails a decision; the failure is logged.
"""

from __future__ import annotations

import logging

import aiohttp

from governor.common.secrets import Secret
from governor.contracts.metrics.controller import ANNOTATION_TAG
from governor.controller.model import Decision

log = logging.getLogger(__name__)

TAG = ANNOTATION_TAG


def annotation(target: str, decision: Decision, at: float) -> dict[str, object]:
    """The body of ``POST /api/annotations`` for one decision (pure)."""
    return {
        "time": int(at * 1000),
        "tags": [TAG, target, decision.action.value, decision.reason.value],
        "text": f"{target}: {decision.explanation}",
    }


class GrafanaAnnotator:
    def __init__(self, session: aiohttp.ClientSession, url: str, token: Secret | None, *,
                 timeout_seconds: float = 2.0) -> None:
        self._session = session
        self._url = url.rstrip("/") + "/api/annotations"
        self._token = token
        self._timeout = aiohttp.ClientTimeout(total=timeout_seconds)

    async def annotate(self, target: str, decision: Decision, at: float) -> bool:
        headers = {}
        if self._token is not None:
            headers["Authorization"] = f"Bearer {self._token.reveal()}"
        try:
            async with self._session.post(self._url, json=annotation(target, decision, at),
                                          headers=headers, timeout=self._timeout) as response:
                if response.status >= 300:
                    log.warning("grafana annotation rejected: HTTP %d", response.status)
                    return False
                return True
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("grafana annotation failed: %s: %s", type(exc).__name__, exc)
            return False
