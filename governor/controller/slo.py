"""From ``slo.yaml`` to what the controller needs: thresholds for the law, SLIs for the queries.

The decode SLO is the spec's controller-linked latency SLO (exactly one, unless named); the
time-to-first-token SLO, weighed by the law so that fixing decode does not break it, is the SLO
with ``role: ttft`` (by default the one named ``time-to-first-token``) unless another name is
given (``""``: none). The
queries read the spec's inference target and, with request classes, only the classes judged at
each SLO's own threshold: a class with a threshold of its own (documents allowed 20 s to a first
token) would otherwise ask the controller to chase a miss that is none.

>>> from governor.slo.spec import parse_spec
>>> spec = parse_spec({"version": "governor/v1", "service": "s", "period": "30d", "slos": [
...     {"name": "itl", "objective": 99, "controller": True,
...      "sli": {"latency": {"metric": "m_itl", "threshold": "120ms"}}}]})
>>> objectives(spec).slo
SloTargets(itl_seconds=0.12, itl_quantile=0.99, ttft_seconds=None, ttft_quantile=0.99)
"""

from __future__ import annotations

from dataclasses import dataclass

from governor.controller.model import SloTargets
from governor.controller.queries import HistogramSli, QuerySet
from governor.slo import class_thresholds
from governor.slo.roles import ROLE_ITL, ROLE_TTFT, RoleError, pick
from governor.slo.spec import SLO, LatencySLI, SloSpec


class ObjectiveError(ValueError):
    """The spec has no usable decode SLO (or names one that is not a latency SLO)."""


@dataclass(frozen=True, slots=True)
class Objectives:
    slo: SloTargets
    queries: QuerySet
    itl_slo_name: str


def objectives(spec: SloSpec, *, itl_slo: str | None = None,
               ttft_slo: str | None = None, short_window_seconds: int = 30,
               long_window_seconds: int = 300) -> Objectives:
    itl = _itl(spec, itl_slo)
    try:
        ttft = pick(spec, ROLE_TTFT, ttft_slo)
    except RoleError as exc:
        raise ObjectiveError(f"--ttft-slo {ttft_slo!r}: {exc}") from None
    itl_sli, ttft_sli = _sli(itl), (_sli(ttft) if ttft else None)
    return Objectives(
        SloTargets(itl_sli.threshold_seconds, itl.objective,
                   ttft_sli.threshold_seconds if ttft_sli else None,
                   ttft.objective if ttft else 0.99),
        QuerySet(_histogram(spec, itl), itl.objective,
                 _histogram(spec, ttft) if ttft else None,
                 ttft.objective if ttft else 0.99,
                 short_window_seconds=short_window_seconds,
                 long_window_seconds=long_window_seconds,
                 target=spec.targets.inference, service=spec.service, itl_slo=itl.name,
                 ttft_slo=ttft.name if ttft else ""),
        itl.name,
    )


def _histogram(spec: SloSpec, slo: SLO) -> HistogramSli:
    """The SLO's histogram, narrowed to the classes judged at the SLO's own threshold."""
    sli = _sli(slo)
    return HistogramSli(sli.metric, dict(sli.selector), sli.threshold_seconds,
                        class_thresholds.own_threshold_classes(spec, slo))


def _controller_slo(spec: SloSpec) -> SLO:
    linked = [s for s in spec.slos if s.controller and isinstance(s.sli, LatencySLI)]
    if len(linked) != 1:
        names = ", ".join(s.name for s in linked) or "none"
        raise ObjectiveError(f"the spec must mark exactly one latency SLO `controller: true` "
                             f"(found: {names}); or name the decode SLO with --itl-slo")
    return linked[0]


def _itl(spec: SloSpec, name: str | None) -> SLO:
    """The decode SLO: the one named on the command line, else the spec's `controller: true`."""
    if not name:
        return _controller_slo(spec)
    try:
        slo = pick(spec, ROLE_ITL, name)
    except RoleError as exc:
        raise ObjectiveError(f"--itl-slo {name!r}: {exc}") from None
    assert slo is not None  # a name picks an SLO or raises
    return slo


def _sli(slo: SLO) -> LatencySLI:
    assert isinstance(slo.sli, LatencySLI)  # checked by pick / _controller_slo
    return slo.sli
