"""OpenAI's error body, as every HTTP surface of Governor answers it.

``{"error": {"message", "type", "param", "code"}}``, with these ``type`` values; the ``openai``
package maps the status to its exception classes (400 → ``BadRequestError``, 401 →
``AuthenticationError``, 404 → ``NotFoundError``, 422 → ``UnprocessableEntityError``, 429 →
``RateLimitError``)::

    >>> error_body("a valid bearer token is required", AUTHENTICATION, code="invalid_api_key")
    {'error': {'message': 'a valid bearer token is required', 'type': 'authentication_error', \
'param': None, 'code': 'invalid_api_key'}}
"""

from __future__ import annotations

from typing import Any, Final

INVALID_REQUEST: Final = "invalid_request_error"
AUTHENTICATION: Final = "authentication_error"
NOT_FOUND: Final = "not_found_error"
RATE_LIMIT: Final = "rate_limit_error"
UNAVAILABLE: Final = "service_unavailable_error"
SERVER: Final = "server_error"


def error_body(
    message: str, type_: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}
