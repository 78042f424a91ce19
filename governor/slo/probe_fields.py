"""Validating ``slo.yaml``'s ``probe`` section (:mod:`governor.slo.probe`), every problem with
its place::

    probe:
      interval: 15s         # each replica once per interval (1s to 1h)
      timeout: 10s          # below the interval
      jitter: 0.1           # 0 to 0.5 of the interval
      max_tokens: 8         # 1 to 64
      targets:
        - name: inference
          urls: [http://inference:8000]
          api_key_file: /run/secrets/inference_api_key   # optional
"""

from __future__ import annotations

import math
import re
from urllib.parse import urlsplit

from governor.slo.fields import Problems, parse_mapping, parse_seconds, parse_text, type_name
from governor.slo.probe import (
    MAX_INTERVAL_SECONDS,
    MAX_JITTER,
    MAX_REPLICAS,
    MAX_REQUESTS_PER_SECOND,
    MAX_TARGETS,
    MAX_TOKENS_LIMIT,
    MIN_INTERVAL_SECONDS,
    ProbeSettings,
    ProbeTarget,
)
from governor.slo.yamlio import Path_

_KEYS = ("interval", "timeout", "jitter", "max_tokens", "prompt", "targets")
_TARGET_KEYS = ("name", "urls", "model", "api_key_file")
TARGET_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
MAX_URL = 512


def check_url(url: str) -> str | None:
    """Why ``url`` cannot be a probe target's base URL, or ``None``::

        >>> check_url("http://inference:8000"), check_url("http://u:p@host:8000")
        (None, 'must not carry credentials (use api_key_file)')
    """
    if len(url) > MAX_URL:
        return f"longer than {MAX_URL} characters"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"not a URL: {exc}"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http:// or https:// URL with a host"
    if parts.username is not None or parts.password is not None:
        return "must not carry credentials (use api_key_file)"
    if parts.query or parts.fragment:
        return "must be a base URL, without a query or fragment"
    if any(c.isspace() or not c.isprintable() for c in url):
        return "must not contain spaces or control characters"
    return None if port is None or port > 0 else "port must be between 1 and 65535"


def _duration(value: object, path: Path_, problems: Problems, low: float,
              high: float) -> float | None:
    seconds = parse_seconds(value, path, problems, "a duration")
    if seconds is None:
        return None
    if not low <= seconds <= high:
        problems.add(path, f"must be between {low:g}s and {high:g}s: got {value!r}")
        return None
    return float(seconds)


def _jitter(value: object, path: Path_, problems: Problems) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or not 0 <= value <= MAX_JITTER:
        problems.add(path, f"must be a share of the interval between 0 and {MAX_JITTER}: "
                           f"got {value!r}")
        return None
    return float(value)


def _max_tokens(value: object, path: Path_, problems: Problems) -> int | None:
    """Two tokens at least: one token has no inter-token latency."""
    if isinstance(value, bool) or not isinstance(value, int) \
            or not 2 <= value <= MAX_TOKENS_LIMIT:
        problems.add(path, f"must be a whole number of tokens from 2 (one token has no "
                           f"inter-token latency) to {MAX_TOKENS_LIMIT}: got {value!r}"[:200])
        return None
    return value


def _urls(value: object, path: Path_, problems: Problems) -> tuple[str, ...] | None:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        problems.add(path, f"must be a URL or a non-empty list of them: got {type_name(value)}")
        return None
    urls: list[str] = []
    for index, item in enumerate(items[:MAX_REPLICAS + 1]):
        text = parse_text(item, (*path, index), problems, what="a URL")
        why = None if text is None else check_url(text)
        if why is not None:
            problems.add((*path, index), f"{str(text)[:80]!r}: {why}")
        elif text is not None:
            urls.append(text.rstrip("/"))
    if len(urls) != len(set(urls)):
        problems.add(path, "a URL is listed twice")
        return None
    return tuple(urls) if len(urls) == len(items) else None


def _target(value: object, path: Path_, problems: Problems) -> ProbeTarget | None:
    fields = parse_mapping(value, path, problems, _TARGET_KEYS, ("name", "urls"))
    if fields is None:
        return None
    name = parse_text(fields.get("name"), (*path, "name"), problems, what="a name") \
        if "name" in fields else None
    if name is not None and not TARGET_NAME.fullmatch(name):
        problems.add((*path, "name"), f"{name[:80]!r}: lower-case letters, digits and dashes")
        name = None
    urls = _urls(fields["urls"], (*path, "urls"), problems) if "urls" in fields else None
    before = len(problems.items)
    model = _optional_text(fields, "model", (*path, "model"), problems, "a model name")
    key_file = _optional_text(fields, "api_key_file", (*path, "api_key_file"), problems,
                              "a path")
    if name is None or urls is None or len(problems.items) > before:
        return None
    return ProbeTarget(name, urls, model, key_file)


def _optional_text(fields: dict[str, object], key: str, path: Path_, problems: Problems,
                   what: str) -> str | None:
    """The key's text; ``None`` when absent or after recording why it is unusable."""
    if key not in fields:
        return None
    text = parse_text(fields[key], path, problems, what=what)
    if text is not None and not text.strip():
        problems.add(path, "must not be empty (leave the key out for none)")
        return None
    return text


def _targets(value: object, path: Path_, problems: Problems) -> tuple[ProbeTarget, ...] | None:
    if not isinstance(value, list) or not value:
        problems.add(path, f"must be a non-empty list of targets: got {type_name(value)}")
        return None
    if len(value) > MAX_TARGETS:
        problems.add(path, f"more than {MAX_TARGETS} targets")
        return None
    targets = [_target(item, (*path, i), problems) for i, item in enumerate(value)]
    names = [t.name for t in targets if t is not None]
    for twice in sorted({n for n in names if names.count(n) > 1}):
        problems.add(path, f"target {twice!r} is named twice")
    if None in targets or len(names) != len(set(names)):
        return None
    return tuple(t for t in targets if t is not None)


def probe(value: object, path: Path_, problems: Problems) -> ProbeSettings | None:
    """The ``probe`` section, or ``None`` after recording every problem."""
    fields = parse_mapping(value, path, problems, _KEYS)
    if fields is None:
        return None
    default = ProbeSettings()
    before = len(problems.items)
    interval = _duration(fields["interval"], (*path, "interval"), problems,
                         MIN_INTERVAL_SECONDS, MAX_INTERVAL_SECONDS) \
        if "interval" in fields else default.interval_seconds
    timeout = _duration(fields["timeout"], (*path, "timeout"), problems, 0.001,
                        MAX_INTERVAL_SECONDS) if "timeout" in fields else None
    jitter = _jitter(fields["jitter"], (*path, "jitter"), problems) \
        if "jitter" in fields else default.jitter
    tokens = _max_tokens(fields["max_tokens"], (*path, "max_tokens"), problems) \
        if "max_tokens" in fields else default.max_tokens
    prompt = parse_text(fields["prompt"], (*path, "prompt"), problems, what="a prompt") \
        if "prompt" in fields else default.prompt
    if prompt is not None and not prompt.strip():
        problems.add((*path, "prompt"), "must not be empty")
    targets = _targets(fields["targets"], (*path, "targets"), problems) \
        if "targets" in fields else default.targets
    if len(problems.items) > before or interval is None or jitter is None or tokens is None \
            or prompt is None or targets is None:
        return None
    if timeout is None:
        timeout = min(default.timeout_seconds, interval / 2)
    if timeout >= interval * (1 - jitter):
        problems.add((*path, "timeout"), f"must be shorter than the interval less its jitter "
                                         f"({interval * (1 - jitter):g}s), so that a replica "
                                         f"never has two probes in flight: got {timeout:g}s")
        return None
    settings = ProbeSettings(interval, timeout, jitter, tokens, prompt, targets)
    if settings.replicas > MAX_REPLICAS:
        problems.add((*path, "targets"), f"{settings.replicas} URLs: at most {MAX_REPLICAS}")
        return None
    if settings.peak_requests_per_second > MAX_REQUESTS_PER_SECOND:
        problems.add((*path, "interval"),
                     f"{settings.replicas} replicas every {interval:g}s (less {jitter:g} jitter) "
                     f"is {settings.peak_requests_per_second:.1f} requests per second; the probe "
                     f"sends at most {MAX_REQUESTS_PER_SECOND:g}: lengthen the interval")
        return None
    return settings
