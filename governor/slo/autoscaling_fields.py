"""Validating ``kubernetes.autoscaling`` (:mod:`governor.slo.autoscaling`), every problem
recorded with its place, as :mod:`governor.slo.fleet_fields` does for the rest of the section."""

from __future__ import annotations

import contextlib
import math
from typing import Final

from governor.slo.autoscaling import (
    AUTOSCALERS,
    GPU_UTILIZATION,
    KEDA,
    QUEUE_LENGTH,
    TRIGGERS,
    Autoscaling,
)
from governor.slo.fields import (
    Problems,
    parse_counter_selector,
    parse_mapping,
    type_name,
)
from governor.slo.yamlio import Path_

# The most replicas the spec may name (kubernetes.replicas has the same bound).
MAX_REPLICAS: Final = 64
MAX_QUEUE_LENGTH: Final = 100_000
_KEYS: Final = ("autoscaler", "min_replicas", "max_replicas", "triggers", "demand")


def _whole(value: object, path: Path_, problems: Problems, low: int, high: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        shown = repr(value)[:80] if isinstance(value, int | float) and not isinstance(
            value, bool) else type_name(value)
        problems.add(path, f"must be a whole number from {low} to {high}: got {shown}")
        return None
    return value


def _ratio(value: object, path: Path_, problems: Problems) -> float | None:
    """``0.8`` or ``"80%"`` → 0.8; a ratio in (0, 1]."""
    ratio = math.nan
    if isinstance(value, str) and value.strip().endswith("%"):
        with contextlib.suppress(ValueError):
            ratio = float(value.strip()[:-1]) / 100
    elif isinstance(value, int | float) and not isinstance(value, bool):
        ratio = float(value)
    if not (math.isfinite(ratio) and 0 < ratio <= 1):
        shown = repr(value)[:80] if isinstance(value, int | float | str) and not isinstance(
            value, bool) else type_name(value)
        problems.add(path, f"must be a utilisation ratio in (0, 1] or a percentage such as "
                           f"80%: got {shown}")
        return None
    return ratio


def _one_of(value: object, path: Path_, problems: Problems) -> str | None:
    if not isinstance(value, str) or value not in AUTOSCALERS:
        problems.add(path, f"must be one of {', '.join(AUTOSCALERS)}: got {value!r}"[:200])
        return None
    return value


def _triggers(value: object, path: Path_, problems: Problems) -> dict[str, object] | None:
    fields = parse_mapping(value, path, problems, TRIGGERS)
    if fields is None:
        return None
    parsed: dict[str, object] = {}
    if QUEUE_LENGTH in fields:
        parsed["queue_length"] = _whole(fields[QUEUE_LENGTH], (*path, QUEUE_LENGTH), problems,
                                        1, MAX_QUEUE_LENGTH)
    if GPU_UTILIZATION in fields:
        parsed["gpu_utilization"] = _ratio(fields[GPU_UTILIZATION], (*path, GPU_UTILIZATION),
                                           problems)
    return None if any(v is None for v in parsed.values()) else parsed


def _consistent(scaling: Autoscaling, replicas: int, path: Path_, problems: Problems) -> bool:
    """What each field allows alone, the others may still forbid."""
    fine = True
    low, high = scaling.bounds(replicas)
    if low > high:
        given = "min_replicas" if scaling.min_replicas is not None else "kubernetes.replicas"
        problems.add((*path, "max_replicas"), f"{high} is below {given} ({low})")
        fine = False
    if scaling.scales_to_zero and scaling.autoscaler != KEDA:
        problems.add((*path, "min_replicas"), "0 needs autoscaler: keda: an HPA never scales "
                     f"to zero (autoscaler is {scaling.autoscaler})")
        fine = False
    if scaling.scales_to_zero and scaling.demand is None:
        problems.add((*path, "demand"), "min_replicas 0 needs a demand: a counter of the "
                     "requests sent to the fleet that exists while no replica runs (a "
                     "gateway's or router's), for KEDA to wake the fleet on")
        fine = False
    if scaling.demand is not None and not scaling.scales_to_zero:
        problems.add((*path, "demand"), "only wakes a fleet scaled to zero: set "
                                        "min_replicas: 0, or remove it")
        fine = False
    return fine


def autoscaling(value: object, path: Path_, problems: Problems,
                replicas: int) -> Autoscaling | None:
    """``kubernetes.autoscaling``, checked alone and against ``kubernetes.replicas``."""
    fields = parse_mapping(value, path, problems, _KEYS)
    if fields is None:
        return None
    parsed: dict[str, object] = {}
    if "autoscaler" in fields:
        parsed["autoscaler"] = _one_of(fields["autoscaler"], (*path, "autoscaler"), problems)
    if "min_replicas" in fields:
        parsed["min_replicas"] = _whole(fields["min_replicas"], (*path, "min_replicas"),
                                        problems, 0, MAX_REPLICAS)
    if "max_replicas" in fields:
        parsed["max_replicas"] = _whole(fields["max_replicas"], (*path, "max_replicas"),
                                        problems, 1, MAX_REPLICAS)
    if "demand" in fields:
        parsed["demand"] = parse_counter_selector(fields["demand"], (*path, "demand"), problems)
    triggers = _triggers(fields["triggers"], (*path, "triggers"), problems) \
        if "triggers" in fields else {}
    if triggers is None or any(v is None for v in parsed.values()):
        return None
    scaling = Autoscaling(**parsed, **triggers)  # type: ignore[arg-type]
    return scaling if _consistent(scaling, replicas, path, problems) else None
