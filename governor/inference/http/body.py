"""Request bodies: read at a pace and by the request's deadline, decoded as JSON that is valid
Unicode.

JSON can spell a lone UTF-16 surrogate (``"\\ud800"``), and Python decodes it into a string that
no encoder writes back: echoed into a response (the simulated model repeats the prompt), it
would fail the request with a 500, or cut a stream after its status line, and a client's typo
would burn the availability budget. Such text is refused here, where input enters, with a 400
that names the field, so nothing downstream has to guard against it::

    decode_json(b'{"prompt": "hi"}')        # {'prompt': 'hi'}
    decode_json(b'{"prompt": "\\\\ud800"}')    # APIError 400, param 'prompt'

Every body must arrive at a pace: within the body timeout (``--body-timeout``) plus a second per
MiB of it (:func:`body_allowance_seconds`; 4 MiB within 5 s by default), counted from when it is
read (for a large body, from when it gets its turn), so that a client that stalls its body loses
its connection within seconds, not at the request's deadline. Clients on slow links send
bodies through a proxy that buffers them (nginx's default).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

from aiohttp import web

from governor.inference.http.errors import APIError, bad_request

# Longest piece of a client's key quoted back in an error's ``param``.
_PARAM_PIECE_CHARS = 64
# How fast a body must arrive, after the body timeout: 4 MiB within 5 s by default.
MIN_BODY_BYTES_PER_SECOND = 1024 * 1024


def body_allowance_seconds(body_bytes: int | None, max_body_bytes: int,
                           timeout_seconds: float) -> float:
    """How long a body of ``body_bytes`` (its ``Content-Length``; ``None``: as large as the
    service accepts) may take to arrive: ``timeout_seconds`` (``--body-timeout``), plus a
    second per MiB."""
    size = max_body_bytes if body_bytes is None else min(body_bytes, max_body_bytes)
    return timeout_seconds + size / MIN_BODY_BYTES_PER_SECOND


async def read_body(request: web.Request, by: float | None = None) -> bytes:
    """The whole body, which must arrive by ``by`` (loop time): else a 408, the client's
    fault. The size limit is the app's (413)."""
    try:
        async with asyncio.timeout_at(by):
            raw = await request.read()
    except TimeoutError:
        raise body_too_late() from None
    if not raw:
        raise bad_request("the request body is empty; expected a JSON object")
    return raw


def check_declared_size(declared: int | None, limit: int) -> None:
    """A 413 for a body whose ``Content-Length`` is over ``limit``: refused before a byte of it
    is read, and before it waits for a turn it would only hold to be refused."""
    if declared is not None and declared > limit:
        raise body_too_large(f"{declared} bytes declared (Content-Length), {limit} allowed "
                             "(--max-body-bytes)")


def body_too_large(detail: str) -> APIError:
    return APIError(413, f"the request body exceeds the limit: {detail}",
                    code="request_too_large")


def body_too_late() -> APIError:
    rate = MIN_BODY_BYTES_PER_SECOND / 1024 / 1024
    return APIError(408, "the request body did not arrive in time (within --body-timeout, then "
                         f"at {rate:g} MiB/s or faster, and by the request deadline)",
                    code="request_timeout")


def decode_json(raw: bytes) -> object:
    """The body as JSON in which every string is valid Unicode; a 400 for anything else."""
    try:
        # What json.loads(raw) does, in two steps: each holds the GIL, and a thread decoding a
        # large body lets the event loop in between.
        value = json.loads(raw.decode(json.detect_encoding(raw), "surrogatepass"))
    except RecursionError:
        raise bad_request("the request body is nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:
        # ValueError covers JSONDecodeError and integers longer than Python converts (4300
        # digits), which are a client's mistake too.
        raise bad_request(f"the request body is not valid JSON: {exc}") from None
    if not _all_text_valid(value):
        where = next(_invalid_text_paths(value), "")
        raise bad_request(
            f"{where or 'the request body'} is not valid Unicode text: it holds a lone UTF-16 "
            "surrogate (U+D800..U+DFFF), which no response could encode",
            param=where or None,
        )
    return value


async def read_json(request: web.Request) -> object:
    """:func:`read_body` then :func:`decode_json`, on the event loop (for small bodies)."""
    return decode_json(await read_body(request))


def _valid_text(text: str) -> bool:
    # isascii() is O(1) on CPython's compact strings; only other text is encoded to find out.
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _all_text_valid(value: object) -> bool:
    """Every key and string of a decoded JSON value encodes as UTF-8 (no recursion: a body may
    nest as deep as the decoder allows)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if not _valid_text(item):
                return False
        elif isinstance(item, dict):
            if not all(_valid_text(key) for key in item):
                return False
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return True


def _invalid_text_paths(value: object) -> Iterator[str]:
    """Where invalid strings are, as ``messages[0].content`` (slower: only on the error path)."""
    pending: list[tuple[object, str]] = [(value, "")]
    while pending:
        item, path = pending.pop()
        if isinstance(item, str) and not _valid_text(item):
            yield path
        elif isinstance(item, dict):
            for key, child in item.items():
                where = f"{path}.{_quoted(key)}" if path else _quoted(key)
                if not _valid_text(key):
                    yield where
                pending.append((child, where))
        elif isinstance(item, list):
            pending.extend((child, f"{path}[{index}]") for index, child in enumerate(item))


def _quoted(key: str) -> str:
    """A key as it may be quoted back: escaped where it does not encode, and short."""
    return key[:_PARAM_PIECE_CHARS].encode("utf-8", "backslashreplace").decode("utf-8")
