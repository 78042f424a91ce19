"""Prometheus's HTTP query API, as every part of Governor asks it.

Where the endpoints are, how large an answer may be, and what a good answer looks like are here
once; :class:`PrometheusHTTP` is the blocking client of the commands (``governor status``,
``governor preview``) and the lab, and the controller's asynchronous client reads its answers
with :func:`result`::

    prometheus = PrometheusHTTP("http://127.0.0.1:9090", timeout_seconds=5)
    prometheus.instant("up")                          # [{"metric": {...}, "value": [t, "1"]}]
    prometheus.instant("up", at=end)                  # the same at the Unix time end
    prometheus.range("up", start, end, step=15)       # [{"metric": {...}, "values": [...]}]

    >>> result({"status": "success", "data": {"resultType": "vector", "result": []}}, "vector")
    []
"""

from __future__ import annotations

import urllib.parse
import urllib.request
from typing import Any, Final, Literal

from governor.common.answers import AnswerError, get_json

QUERY_PATH: Final = "/api/v1/query"
QUERY_RANGE_PATH: Final = "/api/v1/query_range"
# An answer larger than this is not what Governor's aggregations return: refuse it.
MAX_ANSWER_BYTES: Final = 8 * 2**20

ResultType = Literal["vector", "matrix"]


class PrometheusError(ValueError):
    """Prometheus answered, but not with a result: an error answer, or not the expected shape."""


def result(body: Any, kind: ResultType, expr: str | None = None) -> list[dict[str, Any]]:
    """The ``result`` list of a successful answer of ``kind``; :class:`PrometheusError` if not."""
    if not isinstance(body, dict) or body.get("status") != "success":
        error = body.get("error") if isinstance(body, dict) else None
        what = f" {expr!r}" if expr is not None else ""
        raise PrometheusError(f"Prometheus refused{what}: {str(error or body)[:200]}")
    data = body.get("data")
    if not isinstance(data, dict) or data.get("resultType") != kind:
        raise PrometheusError(f"the answer is not a {'range' if kind == 'matrix' else 'instant'} "
                              "vector")
    found = data.get("result") or []
    if not isinstance(found, list):
        raise PrometheusError("the answer's result is not a list")
    return found


class PrometheusHTTP:
    """Blocking queries against one Prometheus; network failures raise ``urllib``'s own errors
    (``URLError``, ``HTTPError``, ``TimeoutError``), bad answers :class:`PrometheusError`."""

    def __init__(self, base_url: str, *, timeout_seconds: float = 5.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_seconds = timeout_seconds

    def instant(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """``expr`` now, or at the Unix time ``at``."""
        query: dict[str, Any] = {"query": expr} if at is None else {"query": expr, "time": at}
        return result(self._get(QUERY_PATH, query), "vector", expr)

    def range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        query = {"query": expr, "start": start, "end": end, "step": step}
        return result(self._get(QUERY_RANGE_PATH, query), "matrix", expr)

    def _get(self, path: str, query: dict[str, Any]) -> Any:
        url = f"{self.base_url}{path}?{urllib.parse.urlencode(query)}"
        try:
            return get_json(url, limit=MAX_ANSWER_BYTES, timeout=self.timeout_seconds)
        except AnswerError as exc:
            raise PrometheusError(str(exc)) from None
