"""The request log: one JSON line per request the service answered, and nothing of its text.

``governor serve --request-log FILE`` writes it (:mod:`governor.inference.telemetry.request_log`);
``governor bench controller --workload FILE`` reads it back as a workload
(:mod:`governor.bench.controller.request_logs`), so that a deployment's own traffic can be
replayed against the controller and the static limits. A record holds when the request arrived,
where it went, how long it was and how it was served; never a prompt, a completion, a header or
an address. A new field is one line in :class:`RequestRecord` (a reader of an older version
finds it absent), as ``stages`` was::

    >>> record = RequestRecord(at=1700000000.25, route="/v1/chat/completions", request_class="chat",
    ...                        prompt_tokens=812, output_tokens=301, ttft_seconds=0.182,
    ...                        itl_p99_seconds=0.031, status="200")
    >>> line = record.to_json()
    >>> line[:60]
    '{"v":"governor/request-log/v1","at":1700000000.25,"route":"/'
    >>> RequestRecord.from_mapping(json.loads(line)) == record
    True
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Final

VERSION: Final = "governor/request-log/v1"
# The key that carries the version on every line: a reader tells the log by it.
VERSION_KEY: Final = "v"
# The most stages a record may name (the service names a dozen).
MAX_STAGES: Final = 32


class RecordError(ValueError):
    """A line that is not a request-log record (what is wrong, by field)."""


_BAD: Final = object()


def _number(raw: object) -> object:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        return _BAD
    return float(raw) if math.isfinite(raw) and raw >= 0 else _BAD


def _optional_number(raw: object) -> object:
    return None if raw is None else _number(raw)


def _count(raw: object) -> object:
    return raw if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0 else _BAD


def _text(raw: object) -> object:
    return raw if isinstance(raw, str) and 0 < len(raw) <= 200 else _BAD


def _label(raw: object) -> object:
    return raw if isinstance(raw, str) and len(raw) <= 200 else _BAD


def _stages(raw: object) -> object:
    # Absent (an older log, or a request the service never timed): None.
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or len(raw) > MAX_STAGES:
        return _BAD
    parsed = {key: _number(value) for key, value in raw.items()
              if isinstance(key, str) and 0 < len(key) <= 40}
    if len(parsed) != len(raw) or _BAD in parsed.values():
        return _BAD
    return parsed


def _field(parse: Callable[[object], object], **default: Any) -> Any:
    return field(metadata={"parse": parse}, **default)


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request, as the service answered it; times in seconds. Each field names the function
    that reads it back."""

    at: float = _field(_number)  # when the request arrived (Unix time)
    route: str = _field(_text)  # the API path: /v1/chat/completions or /v1/completions
    # Its class under the spec (``default`` without classes; empty: refused before it was read).
    request_class: str = _field(_label)
    prompt_tokens: int = _field(_count)
    output_tokens: int = _field(_count)  # generated (0: it never reached the engine)
    ttft_seconds: float | None = _field(_optional_number)  # to the first token (None: none)
    # Its own inter-token P99 (None: fewer than two tokens).
    itl_p99_seconds: float | None = _field(_optional_number)
    status: str = _field(_text)  # the status it was counted under ("200", "429", "499", …)
    # Seconds in each stage of the request, by the stage label's values (governor.contracts.
    # stages), which add up to its duration; None where the service did not time it.
    stages: Mapping[str, float] | None = _field(_stages, default=None)

    def to_json(self) -> str:
        data = {VERSION_KEY: VERSION, **{key: _rounded(value)
                                         for key, value in asdict(self).items()}}
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> RequestRecord:
        """A record from one parsed line; :class:`RecordError` says which fields are wrong."""
        errors = []
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = data.get(f.name)
            values[f.name] = value = f.metadata["parse"](raw)
            if value is _BAD:
                errors.append(f"{f.name}: {raw!r}"[:80])
        if errors:
            raise RecordError("bad or missing " + ", ".join(errors))
        return cls(**values)


def _rounded(value: object) -> object:
    # Microseconds are all any reader can use; shorter lines keep a bounded log longer.
    if isinstance(value, Mapping):
        return {key: _rounded(item) for key, item in value.items()}
    return round(value, 6) if isinstance(value, float) else value
