"""Which requests' spans are recorded: ``OTEL_TRACES_SAMPLER`` and ``OTEL_TRACES_SAMPLER_ARG``.

The names are those of OpenTelemetry's SDK configuration, and the default is the SDK's
(``parentbased_always_on``: follow the caller's sampled flag, record every trace that starts
here). The SDK warns about a name or ratio it cannot read and records everything; the service
refuses it at start instead, so that a typo never multiplies what a collector receives::

    sampler = sampler_from_env({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                                "OTEL_TRACES_SAMPLER_ARG": "0.1"})   # a tenth of new traces

An unsampled span still has a trace id and is still propagated (with the sampled flag off), but
it is never exported, and no metric exemplar names it (:func:`.tracing.exemplar`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final

from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    DEFAULT_OFF,
    DEFAULT_ON,
    ParentBasedTraceIdRatio,
    Sampler,
    TraceIdRatioBased,
)

SAMPLER_VARIABLE: Final = "OTEL_TRACES_SAMPLER"
SAMPLER_ARG_VARIABLE: Final = "OTEL_TRACES_SAMPLER_ARG"
DEFAULT_SAMPLER: Final = "parentbased_always_on"
FIXED: Final[Mapping[str, Sampler]] = {
    "always_on": ALWAYS_ON, "always_off": ALWAYS_OFF,
    "parentbased_always_on": DEFAULT_ON, "parentbased_always_off": DEFAULT_OFF,
}
RATIO: Final = {"traceidratio": TraceIdRatioBased,
                "parentbased_traceidratio": ParentBasedTraceIdRatio}
MAX_ARG_CHARS: Final = 64


class SamplingError(ValueError):
    """``OTEL_TRACES_SAMPLER`` or its argument is not one the service can use."""


def sampler_from_env(env: Mapping[str, str]) -> Sampler:
    """The sampler the variables name; raises :class:`SamplingError`."""
    name = env.get(SAMPLER_VARIABLE, "").strip().lower() or DEFAULT_SAMPLER
    if name in FIXED:
        return FIXED[name]
    if name not in RATIO:
        known = ", ".join(sorted([*FIXED, *RATIO]))
        raise SamplingError(f"{SAMPLER_VARIABLE}={name[:MAX_ARG_CHARS]!r} is not a sampler the "
                            f"service knows; one of {known}")
    return RATIO[name](_ratio(env.get(SAMPLER_ARG_VARIABLE, "").strip()))


def _ratio(raw: str) -> float:
    """The ratio sampler's argument: a number in [0, 1], 1.0 when unset (the SDK's default)."""
    if not raw:
        return 1.0
    where = f"{SAMPLER_ARG_VARIABLE}={raw[:MAX_ARG_CHARS]!r}"
    try:
        ratio = float(raw) if len(raw) <= MAX_ARG_CHARS else math.nan
    except ValueError:
        raise SamplingError(f"{where} is not a number: a ratio in [0, 1]") from None
    if not 0.0 <= ratio <= 1.0:  # NaN fails this too
        raise SamplingError(f"{where}: the ratio of traces sampled must be in [0, 1]")
    return ratio
