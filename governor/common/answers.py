"""An HTTP answer as Governor's clients read it (the controller, the probe): whole, bounded, and
JSON they can hold.

``response.content.read(n)`` returns what has arrived so far, not ``n`` bytes: an answer that
reaches the client in more than one network read would be cut at the first. So an answer is
read until its end, and refused once it passes a byte limit; its JSON is refused when nested
deeper than any answer the client asks for (Python's parser raises ``RecursionError`` near a
thousand levels, and a shallower tree can still exhaust the stack when an error message prints
it)::

    raw = await read_whole(response, limit=1 << 20)   # AnswerError past 1 MiB
    body = loads(raw)                                 # AnswerError: not JSON, or too deep

The command-line tools (``governor status``, ``governor up``'s story, the drills) ask their
sources one blocking GET at a time, with the same bounds: ``get_json(url, limit=..., timeout=...)``.

    >>> loads(b'{"a": [1, 2]}')
    {'a': [1, 2]}
    >>> loads(b"[" * 100_000 + b"]" * 100_000)
    Traceback (most recent call last):
    ...
    governor.common.answers.AnswerError: the answer is JSON nested too deeply (over 32 levels)
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any, Final

import aiohttp

# Prometheus's answers and the admin API's are a few levels deep (a vector's sample, its metric,
# its labels; a report, its floor); no answer a client reads comes near this.
MAX_DEPTH: Final = 32


class AnswerError(ValueError):
    """An answer a client refuses: larger than its limit, not JSON, or nested too deep."""


async def read_whole(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """The whole body, however many reads it arrives in; :class:`AnswerError` past ``limit``
    bytes (before reading them, where the answer declares its length)."""
    declared = response.content_length
    if declared is not None and declared > limit:
        raise AnswerError(f"the answer is larger than {limit} bytes ({declared} declared)")
    body = bytearray()
    async for piece in response.content.iter_any():
        body += piece
        if len(body) > limit:
            raise AnswerError(f"the answer is larger than {limit} bytes")
    return bytes(body)


def get_json(url: str, *, limit: int, timeout: float) -> Any:
    """``GET url`` and its JSON, blocking: :class:`AnswerError` past ``limit`` bytes (one byte
    over is read to tell, never more), when not JSON, or when nested too deep. ``url`` is an
    ``http`` URL the caller was given (an operator's source, or one of ``governor up``'s)."""
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310
        raw = response.read(limit + 1)
    if len(raw) > limit:
        raise AnswerError(f"the answer is larger than {limit} bytes")
    return loads(raw)


def loads(raw: bytes) -> Any:
    """The JSON of an answer; :class:`AnswerError` when it is not JSON or is nested deeper than
    :data:`MAX_DEPTH`."""
    try:
        body = json.loads(raw)
    except RecursionError:
        raise AnswerError(f"the answer is JSON nested too deeply (over {MAX_DEPTH} levels)"
                          ) from None
    except ValueError as exc:  # UnicodeDecodeError included
        raise AnswerError(f"the answer is not JSON: {str(exc)[:200]}") from None
    if depth_over(body, MAX_DEPTH):
        raise AnswerError(f"the answer is JSON nested too deeply (over {MAX_DEPTH} levels)")
    return body


def depth_over(value: Any, most: int) -> bool:
    """Whether ``value`` nests lists and objects deeper than ``most``, a level at a time (a
    deep value cannot exhaust the stack here; an 8 MiB answer takes about half its parse).

    >>> depth_over([[1]], 2), depth_over([[[1]]], 2)
    (False, True)
    """
    level = [value] if isinstance(value, dict | list) else []
    depth = 0
    while level:
        depth += 1
        if depth > most:
            return True
        below: list[Any] = []
        for item in level:
            below.extend(child for child in (item.values() if isinstance(item, dict) else item)
                         if isinstance(child, dict | list))
        level = below
    return False
