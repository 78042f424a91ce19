"""``EngineSettings`` → the keyword arguments of vLLM's ``AsyncEngineArgs``, validated.

Pure: the field names and defaults of ``AsyncEngineArgs`` are passed in, so this is tested
without vLLM. ``extra_args`` are ``key=value`` strings (``gpu_memory_utilization=0.85``); each
value is converted to the type of the field's default, and every mistake is reported at once::

    kwargs = engine_kwargs(settings, fields={f.name: f.default for f in dataclasses.fields(Args)})
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from governor.common.cli import parse_bool
from governor.inference.engines.settings import EngineSettings

# Settings this project owns; an extra_args entry may not override them behind their backs.
OWNED = {
    "model": "--model",
    "served_model_name": "--served-model-name",
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "max_model_len": "--max-model-len",
    "seed": "--seed",
    "otlp_traces_endpoint": "the service's OTLP endpoint",
    # Per-request timings and vLLM's /metrics series need stat logging on.
    "disable_log_stats": "nothing: stat logging must stay on",
}


class EngineArgsError(ValueError):
    """One or more engine arguments are wrong; the message lists every problem."""


def convert(text: str, default: object) -> Any:
    """Convert ``text`` to the type of ``default``; ``None`` defaults guess from the text."""
    if isinstance(default, bool):
        return parse_bool(text)
    if isinstance(default, int):
        return int(text)
    if isinstance(default, float):
        return float(text)
    if isinstance(default, str):
        return text
    if isinstance(default, (dict, list, tuple)) or default is None:
        return _guess(text)
    return text


def _guess(text: str) -> Any:
    # JSON covers numbers, booleans, null, lists and objects (e.g. compilation_config={...}).
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        return parse_bool(text)
    except ValueError:
        return text


def parse_extra_args(pairs: Sequence[str], fields: Mapping[str, object]) -> dict[str, Any]:
    """``["dtype=float32", "enforce_eager=1"]`` → ``{"dtype": "float32", "enforce_eager": True}``.

    Every unknown key, malformed pair and unconvertible value is reported in one error.
    """
    parsed: dict[str, Any] = {}
    problems: list[str] = []
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            problems.append(f"{pair!r}: expected key=value")
            continue
        if key in OWNED:
            problems.append(f"{key!r}: set it with {OWNED[key]}, not as an engine argument")
            continue
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            problems.append(f"{key!r}: not an AsyncEngineArgs field{hint}")
            continue
        try:
            parsed[key] = convert(text, fields[key])
        except ValueError as error:
            problems.append(f"{key!r}: {error}")
    if problems:
        raise EngineArgsError("invalid vLLM engine arguments: " + "; ".join(problems))
    return parsed


def engine_kwargs(settings: EngineSettings, fields: Mapping[str, object]) -> dict[str, Any]:
    """Everything ``AsyncEngineArgs(**kwargs)`` needs for these settings."""
    if not settings.model:
        raise EngineArgsError("the vllm engine needs --model (a model directory or name)")
    kwargs: dict[str, Any] = {"model": settings.model, "disable_log_stats": False}
    if settings.served_model_name:
        kwargs["served_model_name"] = settings.served_model_name
    optional = {
        "max_num_seqs": settings.max_num_seqs,
        "max_num_batched_tokens": settings.max_num_batched_tokens,
        "max_model_len": settings.max_model_len,
        "otlp_traces_endpoint": settings.otlp_traces_endpoint,
    }
    kwargs.update({key: value for key, value in optional.items() if value is not None})
    kwargs["seed"] = settings.seed
    extra = parse_extra_args(settings.extra_args, fields)
    if settings.scheduling_policy != "fcfs":
        # slo.yaml's request classes carry priorities; vLLM honours them only under this policy.
        if extra.get("scheduling_policy", settings.scheduling_policy) != settings.scheduling_policy:
            raise EngineArgsError(
                f"'scheduling_policy': the SLO spec's request classes need "
                f"{settings.scheduling_policy!r}, not {extra['scheduling_policy']!r}")
        kwargs["scheduling_policy"] = settings.scheduling_policy
    kwargs.update(extra)
    unknown = sorted(key for key in kwargs if key not in fields)
    if unknown:
        raise EngineArgsError(f"this vLLM's AsyncEngineArgs lacks {', '.join(unknown)}")
    return kwargs


def otlp_traces_url(endpoint: str, protocol: str) -> str:
    """The endpoint vLLM's exporter needs for ``protocol``.

    vLLM hands the endpoint to the exporter verbatim: OTLP/HTTP wants the full ``…/v1/traces``
    URL while collectors are usually named by their base URL, so a bare base gets the path.
    """
    if protocol != "http/protobuf":
        return endpoint
    base = endpoint.rstrip("/")
    _, _, rest = base.partition("://")
    if rest and "/" not in rest:
        return f"{base}/v1/traces"
    return base
