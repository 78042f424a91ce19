"""The inference service's admin API, as the controller uses it: read limits, put limits.

``PUT /admin/batching`` carries absolute values, so repeating it is harmless: the call retries
temporary failures (503 engine not ready, 429, 5xx, timeouts, a refused connection) with
exponential backoff, and reports permanent ones (401 bad token, 404 no admin API, 400, 501 the
engine cannot be retuned live) at once, so the reconciler can stop hammering that target.

>>> parse_limits({"max_num_seqs": 64, "max_num_batched_tokens": 2048,
...               "floor": {"max_num_seqs": 1, "max_num_batched_tokens": 256},
...               "ceiling": {"max_num_seqs": 256, "max_num_batched_tokens": 8192}}).current
BatchingLimits(max_num_seqs=64, max_num_batched_tokens=2048)
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

import aiohttp

from governor.common import answers
from governor.common.secrets import Secret
from governor.contracts.admission import (
    MAX_QUEUED_TOKENS,
    QUEUED_TOKENS,
    SLACK,
    queued_tokens_within,
    slack_range,
    slack_within,
)
from governor.contracts.batching import BatchingReport
from governor.contracts.endpoints import ADMIN_ADMISSION_PATH, ADMIN_BATCHING_PATH
from governor.controller.actuators import ActuatorEntry
from governor.controller.model import Limits, Target, TargetLimits

# A call waits for a retry at most this long (a longer Retry-After ends the call, and the
# reconciler leaves the target alone that long instead); no Retry-After counts past an hour.
MAX_WAIT_SECONDS = 2.0
MAX_RETRY_AFTER_SECONDS = 3600.0
# The most an admin answer may take: a report is a few hundred bytes, and stock vLLM's adds a
# few hundred per data-parallel rank (256 ranks: under 100 KiB).
MAX_ANSWER_BYTES = 1024 * 1024


class ErrorKind(enum.StrEnum):
    TEMPORARY = "temporary"  # try again later (with backoff)
    PERMANENT = "permanent"  # trying again will not help until someone changes something


class ActuationError(Exception):
    """``retry_after_seconds``: how long the target asked to be left alone (``Retry-After``)."""

    def __init__(self, kind: ErrorKind, message: str, *, status: int | None = None,
                 retry_after_seconds: float = 0.0) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status
        self.retry_after_seconds = retry_after_seconds


# Status → (kind, whether to retry within the same call). 422 means the floor or ceiling moved
# since the GET: the next reconcile re-reads them, retrying the same body now would not help.
_STATUS: dict[int, tuple[ErrorKind, bool]] = {
    400: (ErrorKind.PERMANENT, False),
    401: (ErrorKind.PERMANENT, False),
    403: (ErrorKind.PERMANENT, False),
    404: (ErrorKind.PERMANENT, False),
    405: (ErrorKind.PERMANENT, False),
    422: (ErrorKind.TEMPORARY, False),
    429: (ErrorKind.TEMPORARY, True),
    501: (ErrorKind.PERMANENT, False),
}


def classify(status: int) -> tuple[ErrorKind, bool]:
    """``(kind, retry now)`` for an HTTP error status."""
    if status in _STATUS:
        return _STATUS[status]
    if status >= 500:
        return ErrorKind.TEMPORARY, True
    return ErrorKind.PERMANENT, False


def parse_limits(body: Any) -> TargetLimits:
    """The admin API's answer → :class:`TargetLimits`; :class:`ActuationError` if malformed."""
    try:
        return BatchingReport.from_dict(body)
    except ValueError as exc:
        raise ActuationError(ErrorKind.PERMANENT,
                             f"malformed admin answer ({str(exc)[:300]}): {str(body)[:200]}"
                             ) from exc


def parse_slack(body: Any) -> float:
    """The deadline slack a ``/admin/admission`` answer reports; :class:`ActuationError` if
    malformed or outside the contract's range (``slack_within``).

    >>> parse_slack({"deadline_slack": 0.7, "max_tokens_ahead": None})
    0.7
    """
    slack = body.get(SLACK) if isinstance(body, dict) else None
    if isinstance(slack, bool) or not isinstance(slack, int | float) or not slack_within(slack):
        raise ActuationError(ErrorKind.PERMANENT,
                             f"malformed admission answer (a {SLACK} within "
                             f"{slack_range()} expected): {str(body)[:200]}")
    return float(slack)


def parse_queued_tokens(body: Any) -> int | None:
    """vLLM's ``max_num_queued_tokens`` a ``/admin/admission`` answer reports (``None``:
    unbounded); :class:`ActuationError` if malformed, outside the contract's bounds (an integer
    from 1 to :data:`MAX_QUEUED_TOKENS`), or absent (the target's vLLM has none).

    >>> parse_queued_tokens({"deadline_slack": 1.0, "max_num_queued_tokens": 8192})
    8192
    """
    if not isinstance(body, dict) or QUEUED_TOKENS not in body:
        raise ActuationError(ErrorKind.PERMANENT,
                             f"the admission answer has no {QUEUED_TOKENS}: {str(body)[:200]}")
    value = body[QUEUED_TOKENS]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not queued_tokens_within(value):
        raise ActuationError(ErrorKind.PERMANENT,
                             f"malformed admission answer ({QUEUED_TOKENS} must be null or an "
                             f"integer from 1 to {MAX_QUEUED_TOKENS}): {str(body)[:200]}")
    return value


T = TypeVar("T")


def _error_message(status: int, raw: bytes) -> str:
    try:
        message = answers.loads(raw)["error"]["message"]
    except (ValueError, KeyError, TypeError):  # AnswerError included
        message = raw[:200].decode("utf-8", "replace")
    return f"HTTP {status}: {str(message)[:300]}"


Sleep = Callable[[float], Awaitable[None]]


class BatchingClient:
    """Reads and moves one target's batching limits through its admin API."""

    def __init__(
        self, session: aiohttp.ClientSession, token: Secret | None, *,
        timeout_seconds: float = 5.0, attempts: int = 3, backoff_seconds: float = 0.25,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._session = session
        self._token = token
        self._timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self._attempts = attempts
        self._backoff = backoff_seconds
        self._sleep = sleep

    async def read(self, target: Target) -> TargetLimits:
        return await self._call("GET", target, None, ADMIN_BATCHING_PATH, parse_limits)

    async def apply(self, target: Target, limits: Limits) -> TargetLimits:
        """Put ``limits`` in force; returns what the target reports as in force afterwards."""
        return await self._call("PUT", target, limits.as_dict(), ADMIN_BATCHING_PATH,
                                parse_limits)

    async def set_slack(self, target: Target, slack: float) -> float:
        """Put the deadline slack of the target's gate in force (``PUT /admin/admission``);
        returns the slack it reports in force afterwards."""
        return await self._call("PUT", target, {SLACK: slack}, ADMIN_ADMISSION_PATH, parse_slack)

    async def set_queued_tokens(self, target: Target, bound: int | None) -> int | None:
        """Put vLLM's ``max_num_queued_tokens`` in force in every API process of the target
        (``PUT /admin/admission``; ``None``: unbounded); returns the bound it reports."""
        return await self._call("PUT", target, {QUEUED_TOKENS: bound}, ADMIN_ADMISSION_PATH,
                                parse_queued_tokens)

    async def _call(self, method: str, target: Target, body: dict[str, Any] | None, path: str,
                    parse: Callable[[Any], T]) -> T:
        delay = self._backoff
        for attempt in range(1, self._attempts + 1):
            try:
                return await self._once(method, target, body, path, parse)
            except _Retry as retry:
                if attempt == self._attempts or retry.after > MAX_WAIT_SECONDS:
                    # A longer Retry-After is the reconciler's to honour, by not coming back
                    # for that long: waiting here would hold the pass.
                    raise ActuationError(ErrorKind.TEMPORARY,
                                         f"{retry.message} (after {attempt} attempt"
                                         f"{'s' if attempt > 1 else ''})",
                                         status=retry.status,
                                         retry_after_seconds=retry.after) from None
                await self._sleep(min(max(delay, retry.after), MAX_WAIT_SECONDS))
                delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    async def _once(self, method: str, target: Target, body: dict[str, Any] | None, path: str,
                    parse: Callable[[Any], T]) -> T:
        headers = {"Accept": "application/json"}
        if self._token is not None:
            headers["Authorization"] = f"Bearer {self._token.reveal()}"
        try:
            async with self._session.request(method, target.url.rstrip("/") + path,
                                             json=body, headers=headers,
                                             timeout=self._timeout) as response:
                status = response.status
                retry_after = _retry_after(response.headers.get("Retry-After"))
                raw = await self._body(method, target, response)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _Retry(f"{method} {target.name}: {type(exc).__name__}: {exc}", None,
                         0.0) from None
        if status == 200:
            try:
                return parse(answers.loads(raw))
            except answers.AnswerError as exc:
                raise ActuationError(ErrorKind.PERMANENT, f"{method} {target.name}: refused: "
                                     f"{exc}", status=status) from None
        kind, retry_now = classify(status)
        message = f"{method} {target.name}: {_error_message(status, raw)}"
        if retry_now:
            raise _Retry(message, status, retry_after)
        raise ActuationError(kind, message, status=status)

    @staticmethod
    async def _body(method: str, target: Target, response: aiohttp.ClientResponse) -> bytes:
        """The answer whole; past its limit a refusal, or for an error status only its
        message (the status decides what happens)."""
        try:
            return await answers.read_whole(response, MAX_ANSWER_BYTES)
        except answers.AnswerError as exc:
            if response.status == 200:
                raise ActuationError(ErrorKind.PERMANENT, f"{method} {target.name}: refused: "
                                     f"{exc}", status=200) from None
            return str(exc).encode()


class _Retry(Exception):
    def __init__(self, message: str, status: int | None, after: float) -> None:
        super().__init__(message)
        self.message, self.status, self.after = message, status, after


def _retry_after(value: str | None) -> float:
    """``Retry-After`` in seconds (0 when absent or not a number of seconds), at most
    :data:`MAX_RETRY_AFTER_SECONDS`.

    >>> [_retry_after(v) for v in (None, "2", "1e308", "nan", "-5", "Wed, 21 Oct 2015")]
    [0.0, 2.0, 3600.0, 0.0, 0.0, 0.0]
    """
    try:
        seconds = float(value) if value is not None else 0.0
    except ValueError:
        return 0.0
    return min(seconds, MAX_RETRY_AFTER_SECONDS) if seconds > 0 else 0.0


def _admin_api(session: aiohttp.ClientSession, token: Secret | None) -> BatchingClient:
    return BatchingClient(session, token)


ACTUATOR: Final = ActuatorEntry(
    summary="GET/PUT /admin/batching and PUT /admin/admission, as governor serve and stock "
            "vllm serve with Governor's plugins answer them",
    create=_admin_api,
)
