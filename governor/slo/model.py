"""The SLO spec's model: frozen, hashable dataclasses (see :mod:`governor.slo.spec` for
loading)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Final

from governor.contracts.promql import format_duration, to_decimal
from governor.slo.buckets import VllmSettings
from governor.slo.classes import RequestClasses
from governor.slo.fleet import Alerting, Cost, Kubernetes, Targets
from governor.slo.labels import Labels as Labels  # re-exported: the spec's label sets
from governor.slo.probe import ProbeSettings

SPEC_VERSION: Final = "governor/v1"
MIN_PERIOD_SECONDS: Final = 7 * 86400  # the longest burn-rate window (3d) must fit well inside
MAX_PERIOD_SECONDS: Final = 400 * 86400
MAX_SLOS: Final = 64
MAX_LABELS: Final = 32
MAX_TEXT: Final = 1024
# ``kubernetes.server`` of a fleet of stock ``vllm serve``.
STOCK_VLLM: Final = "vllm"
# What a latency SLO measures, for the parts that read one SLO by what it is rather than by its
# name: the controller (it acts on the decode SLO and weighs the first-token one) and deadline
# admission (a class's first-token target is its deadline).
ROLE_ITL: Final = "itl"
ROLE_TTFT: Final = "ttft"
ROLE_NONE: Final = "none"  # what an SLO named time-to-first-token says to take no role
ROLES: Final = (ROLE_ITL, ROLE_TTFT, ROLE_NONE)
# Specs written before roles existed: the SLO of this name has the ``ttft`` role unless it says
# otherwise (the controller-linked SLO has ``itl``).
TTFT_NAME: Final = "time-to-first-token"
# Labels the generated rules set themselves; a spec may not override them.
RESERVED_LABELS: Final = frozenset(
    {"slo", "service", "severity", "alertname", "instance", "job", "le", "quantile"}
)


class SpecError(Exception):
    """A spec that cannot be used; :attr:`errors` holds every problem, each ``where: what``."""

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors: tuple[str, ...] = tuple(errors)
        count = len(self.errors)
        heading = "1 problem" if count == 1 else f"{count} problems"
        super().__init__(f"{heading} in the SLO spec:\n  " + "\n  ".join(self.errors))


@dataclass(frozen=True)
class LatencySLI:
    """Good events: observations of histogram ``metric`` at or below ``threshold_seconds``."""

    metric: str  # histogram base name, e.g. "governor_inter_token_latency_seconds"
    threshold_seconds: float  # a bucket edge of that histogram
    selector: Mapping[str, str] = field(default_factory=Labels)  # extra equality matchers


@dataclass(frozen=True)
class RatioSLI:
    """Bad events over all events, both as plain PromQL counter selectors."""

    errors: str  # e.g. 'governor_requests_total{code=~"5.."}'
    total: str  # e.g. 'governor_requests_total'


@dataclass(frozen=True)
class SLO:
    name: str  # "inter-token-latency", "time-to-first-token", "availability"
    description: str
    objective: float  # a ratio in (0, 1), e.g. 0.99
    sli: LatencySLI | RatioSLI
    controller: bool  # the controller acts on this SLO
    labels: Mapping[str, str]
    # Burn-rate alerts stay quiet while the SLI sees fewer events per second than this (0: off).
    min_event_rate_per_second: float = 0.0
    # What it measures (ROLE_ITL, ROLE_TTFT), for the controller and deadline admission; None:
    # neither reads it.
    role: str | None = None

    @property
    def camel_name(self) -> str:
        """``inter-token-latency`` → ``InterTokenLatency``, the stem of its alert names."""
        return camel_case(self.name)

    @property
    def error_budget(self) -> Decimal:
        """``1 - objective``, exactly: 0.999 → Decimal('0.001'), not 0.0010000000000000009."""
        return Decimal(1) - to_decimal(self.objective)


@dataclass(frozen=True)
class SloSpec:
    version: str
    service: str
    period_seconds: int
    slos: tuple[SLO, ...]
    labels: Mapping[str, str] = field(default_factory=Labels)
    # The request classes; without a ``classes`` section, one class named "default".
    classes: RequestClasses = field(default_factory=RequestClasses)
    # Where the stack lives in a fleet (governor.slo.fleet); Governor's own stack by default.
    targets: Targets = field(default_factory=Targets)
    alerting: Alerting = field(default_factory=Alerting)
    kubernetes: Kubernetes = field(default_factory=Kubernetes)
    # The edges vLLM is told to expose (``vllm.custom_histogram_buckets``); none: its defaults.
    vllm: VllmSettings = field(default_factory=VllmSettings)
    # What governor probe sends, to which targets, how often (governor.slo.probe).
    probe: ProbeSettings = field(default_factory=ProbeSettings)
    # The price of a GPU hour, for the cost rules (governor.slo.fleet.Cost).
    cost: Cost = field(default_factory=Cost)

    @property
    def stock_vllm(self) -> bool:
        """The inference servers are stock ``vllm serve`` with Governor's admin middleware
        (``kubernetes.server: vllm``): vLLM's series only, no ``governor_*`` series of the
        service, so the boards read vLLM's."""
        return self.kubernetes.server == STOCK_VLLM

    def with_role(self, role: str) -> SLO | None:
        """The SLO of ``role`` (at most one has it: validation says so), or ``None``."""
        return next((slo for slo in self.slos if slo.role == role), None)

    def slo(self, name: str) -> SLO:
        for slo in self.slos:
            if slo.name == name:
                return slo
        known = ", ".join(s.name for s in self.slos)
        raise KeyError(f"no SLO named {name!r} in the spec (it has: {known})")

    @property
    def period(self) -> str:
        """The period as a Prometheus duration, e.g. ``30d``."""
        return format_duration(self.period_seconds)


def camel_case(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("-"))
