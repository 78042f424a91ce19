"""OpenAI's error body, and the one exception the handlers raise to produce it.

Every client mistake becomes ``{"error": {"message", "type", "param", "code"}}`` with a 4xx;
the ``openai`` package maps the status to its exception classes (400 → ``BadRequestError``,
401 → ``AuthenticationError``, 404 → ``NotFoundError``, 422 → ``UnprocessableEntityError``,
429 → ``RateLimitError``).
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from governor.contracts.errors import (  # the contract's, re-exported for the handlers
    AUTHENTICATION as AUTHENTICATION,
)
from governor.contracts.errors import INVALID_REQUEST as INVALID_REQUEST
from governor.contracts.errors import NOT_FOUND as NOT_FOUND
from governor.contracts.errors import RATE_LIMIT as RATE_LIMIT
from governor.contracts.errors import SERVER as SERVER
from governor.contracts.errors import UNAVAILABLE as UNAVAILABLE
from governor.contracts.errors import error_body as error_body

# How a request ended, where its status line could not say (it went out before the end): the
# code it is counted under in governor_requests_total. Neither is a server error.
CLIENT_GONE = "499"  # the client closed the connection (nginx's code)
CLIENT_TOO_SLOW = "408"  # the client did not send or read in time, and the service hung up



class APIError(Exception):
    """Raised anywhere in a handler; the error middleware renders it."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type_: str = INVALID_REQUEST,
        param: str | None = None,
        code: str | None = None,
        retry_after_seconds: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.param = param
        self.code = code
        self.retry_after_seconds = retry_after_seconds

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)

    def response(self) -> web.Response:
        headers = {}
        if self.retry_after_seconds is not None:
            headers["Retry-After"] = str(self.retry_after_seconds)
        return web.Response(
            status=self.status,
            body=json.dumps(self.body()).encode(),
            content_type="application/json",
            headers=headers,
        )


def bad_request(message: str, *, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)
