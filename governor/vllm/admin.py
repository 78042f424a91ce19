"""``GET``/``PUT /admin/batching`` on stock ``vllm serve``: the contract, the errors and the report
``governor serve`` answers, from inside vLLM's own API server.

The route is framework-free: :class:`AdminRoute` turns a method, an ``Authorization`` header and a
body (read here, from the chunks it arrives in) into an :class:`Answer`, and the two ways into
vLLM (:mod:`governor.vllm.middleware` for any vLLM, :mod:`governor.vllm.endpoint` for vLLM's
endpoint plugins) only carry bytes in and out.
Settings come from the environment, because vLLM builds both with no arguments::

    GOVERNOR_ADMIN_TOKEN_FILE=/run/secrets/admin_token     # or GOVERNOR_ADMIN_TOKEN
    GOVERNOR_ADMIN_MIN_NUM_SEQS=1                          # the floor a PUT may go down to
    GOVERNOR_ADMIN_MIN_NUM_BATCHED_TOKENS=256

The limits live in the engine (every data-parallel rank has its own scheduler), never in an API
process, so several API servers (``--api-server-count``) answer alike, and a ``PUT`` that names
one limit leaves the other to the engine, which merges it between two steps.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from governor.common.secrets import Secret, TokenError, read_token
from governor.contracts.batching import (
    DEFAULT_FLOOR,
    DISABLED_MESSAGE,
    UNAUTHORIZED_CODE,
    UNAUTHORIZED_MESSAGE,
    BatchingLimits,
    BatchingReport,
    BodyError,
    Param,
    changes,
)
from governor.contracts.engine_core import EngineCoreReport, rank_report
from governor.contracts.errors import (
    AUTHENTICATION,
    INVALID_REQUEST,
    SERVER,
    UNAVAILABLE,
    error_body,
)
from governor.contracts.tokens import ADMIN_TOKEN_ENV, ADMIN_TOKEN_FILE_ENV
from governor.vllm.plugin import UTILITY_REPORT, UTILITY_SET
from governor.vllm.utility import Failure, UtilityError, call_every_engine

log = logging.getLogger("governor.vllm.admin")

TOKEN_FILE_ENV: Final = ADMIN_TOKEN_FILE_ENV  # the name serve and the controller read too
FLOOR_ENV: Final = {Param.MAX_NUM_SEQS: "GOVERNOR_ADMIN_MIN_NUM_SEQS",
                    Param.MAX_NUM_BATCHED_TOKENS: "GOVERNOR_ADMIN_MIN_NUM_BATCHED_TOKENS"}
MAX_BODY_BYTES: Final = 64 * 1024
# A body that has not arrived by then is abandoned (408): a client cannot hold the route.
BODY_SECONDS: Final = 10.0
RETRY_AFTER_SECONDS: Final = 5
_SERVER_ERRORS = {Failure.TIMEOUT: 503, Failure.DEAD: 503, Failure.NO_ENGINE: 503}


class AdminConfigError(ValueError):
    """Settings the route cannot run with: vLLM must not start with an admin API that is open,
    or closed, by accident."""


@dataclass(frozen=True)
class AdminSettings:
    token: Secret | None  # None: the admin API answers 401 to everyone
    floor: BatchingLimits = DEFAULT_FLOOR

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> AdminSettings:
        try:
            token = read_token(env.get(TOKEN_FILE_ENV) or None, ADMIN_TOKEN_ENV, env)
        except TokenError as exc:
            raise AdminConfigError(f"Governor's admin API: {exc}") from None
        floor = DEFAULT_FLOOR
        for param, variable in FLOOR_ENV.items():
            if (text := env.get(variable)) is not None:
                floor = floor.with_value(param, _positive(variable, text))
        return cls(token, floor)


def _positive(variable: str, text: str) -> int:
    text = text.strip()
    if len(text) > 9 or not text.isdigit() or int(text) < 1:
        raise AdminConfigError(f"Governor's admin API: {variable} must be a positive integer, "
                               f"got {text[:40]!r}")
    return int(text)


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any]
    retry_after_seconds: int | None = None

    def json(self) -> bytes:
        return json.dumps(self.body).encode()

    def headers(self) -> list[tuple[bytes, bytes]]:
        found = [(b"content-type", b"application/json")]
        if self.retry_after_seconds is not None:
            found.append((b"retry-after", str(self.retry_after_seconds).encode()))
        return found


def _error(status: int, message: str, type_: str, *, code: str | None = None,
           param: str | None = None, retry_after: int | None = None) -> Answer:
    return Answer(status, error_body(message, type_, param, code), retry_after)


def authorize(settings: AdminSettings, authorization: str | bytes | None) -> Answer | None:
    """The 401 every admin route answers without the bearer token (``None``: authorized)."""
    token = settings.token
    # Raw header bytes as the text they were read from (bytes that are not UTF-8 survive).
    header = (authorization.decode("utf-8", "surrogateescape")
              if isinstance(authorization, bytes) else authorization)
    if token is not None and token.matches_bearer(header):
        return None
    reason = DISABLED_MESSAGE if token is None else UNAUTHORIZED_MESSAGE
    return _error(401, reason, AUTHENTICATION, code=UNAUTHORIZED_CODE)


def error_answer(status: int, message: str, type_: str, *, code: str | None = None,
                 param: str | None = None) -> Answer:
    """An error in OpenAI's shape, as every route of Governor's in vLLM answers."""
    return _error(status, message, type_, code=code, param=param)


class BodyTooLarge(Exception):
    """A request body past :data:`MAX_BODY_BYTES`."""


async def read_body(chunks: AsyncIterable[bytes], limit: int = MAX_BODY_BYTES) -> bytes:
    """The request body from the chunks it arrives in, refused past ``limit`` bytes."""
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        parts.append(chunk)
    return b"".join(parts)


class AdminRoute:
    """The admin API of one vLLM API server; the engine client is passed in on each call (it
    exists only once vLLM's app state is initialised)."""

    def __init__(self, settings: AdminSettings) -> None:
        self.settings = settings

    async def answer_request(self, method: str, authorization: str | bytes | None,
                             chunks: AsyncIterable[bytes], engine_client: Any) -> Answer:
        """:meth:`answer`, the body read from ``chunks`` first: 413 past :data:`MAX_BODY_BYTES`,
        408 when it has not all arrived within :data:`BODY_SECONDS`."""
        try:
            body = await asyncio.wait_for(read_body(chunks), BODY_SECONDS)
        except BodyTooLarge:
            return _error(413, f"the body is larger than {MAX_BODY_BYTES} bytes", INVALID_REQUEST)
        except TimeoutError:
            return _error(408, "the body did not arrive in time", INVALID_REQUEST)
        return await self.answer(method, authorization, body, engine_client)

    async def answer(self, method: str, authorization: str | bytes | None, body: bytes,
                     engine_client: Any) -> Answer:
        refused = self._authorize(authorization)
        if refused is not None:
            return refused
        if method not in ("GET", "PUT"):
            return _error(405, f"{method[:16]} is not allowed: GET or PUT", INVALID_REQUEST)
        try:
            if method == "GET":
                return Answer(200, await self._report(engine_client))
            return await self._put(body, engine_client)
        except UtilityError as error:
            return self._engine_error(error)

    def _authorize(self, authorization: str | bytes | None) -> Answer | None:
        return authorize(self.settings, authorization)

    async def _report(self, engine_client: Any, answers: list[Any] | None = None
                      ) -> dict[str, Any]:
        ranks = answers if answers is not None else await call_every_engine(engine_client,
                                                                            UTILITY_REPORT)
        return self._shape(ranks).as_dict() | {"ranks": [rank_report(r) for r in ranks]}

    def _shape(self, ranks: list[Any]) -> BatchingReport:
        try:
            first = EngineCoreReport.from_dict(ranks[0] if ranks else None)
        except ValueError as exc:
            raise UtilityError(Failure.FAILED, f"the engine's report is malformed: {exc}") from exc
        if first.retuning is None:
            raise UtilityError(Failure.FAILED, "this vLLM cannot be retuned live: "
                                               f"{first.reason[:300]}")
        current, ceiling = first.retuning.current, first.retuning.ceiling
        if not self.settings.floor.within(BatchingLimits(1, 1), ceiling):
            raise UtilityError(Failure.FAILED,
                               f"the floor {self.settings.floor.as_dict()} is above the engine's "
                               f"start-up limits {ceiling.as_dict()}: lower "
                               f"{' or '.join(FLOOR_ENV.values())}")
        return BatchingReport(current, self.settings.floor, ceiling)

    async def _put(self, raw: bytes, engine_client: Any) -> Answer:
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            return _error(400, "the body is not valid JSON", INVALID_REQUEST)
        before = self._shape(await call_every_engine(engine_client, UTILITY_REPORT))
        try:
            named = changes(body, before.floor, before.ceiling)
        except BodyError as exc:
            return _error(exc.status, exc.message, INVALID_REQUEST, code=exc.code,
                          param=exc.param)
        answers = await call_every_engine(engine_client, UTILITY_SET,
                                          named.get(Param.MAX_NUM_SEQS),
                                          named.get(Param.MAX_NUM_BATCHED_TOKENS))
        report = await self._report(engine_client, answers)
        log.info("batching limits %s -> %s on %d engine(s)", before.current.as_dict(),
                 {p.value: report[p.value] for p in Param}, len(answers))
        return Answer(200, report)

    @staticmethod
    def _engine_error(error: UtilityError) -> Answer:
        status = _SERVER_ERRORS.get(error.failure, 501)
        if status == 501:
            return _error(501, error.message, SERVER, code="unsupported")
        return _error(status, error.message, UNAVAILABLE, code=error.failure.value,
                      retry_after=RETRY_AFTER_SECONDS)


