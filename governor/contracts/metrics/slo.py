"""The series the generated recording rules write, and the names of the alerts on them.

Every recorded SLO series carries :data:`LABEL_SLO` and :data:`LABEL_SERVICE` plus the spec's
routing labels. Windowed series exist for each alert window (``slo:sli_error:ratio_rate5m`` …
``ratio_rate3d``). With request classes in the spec, each latency SLO also has the same series
per class, at the ``slo_class`` level and labelled :data:`LABEL_CLASS`::

    >>> SLI_ERROR_RATIO.at(300).name, CLASS_SLI_ERROR_RATIO.at(300).name
    ('slo:sli_error:ratio_rate5m', 'slo_class:sli_error:ratio_rate5m')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from governor.contracts.declaration import Metric
from governor.contracts.metrics.service import LABEL_CLASS, LABEL_STAGE
from governor.contracts.promql import format_duration

LABEL_SLO: Final = "slo"
LABEL_SERVICE: Final = "service"
LABEL_SEVERITY: Final = "severity"

SEVERITY_PAGE: Final = "page"
SEVERITY_TICKET: Final = "ticket"
SEVERITY_CONTROL: Final = "control"  # routed to the controller's webhook

SLO_LABELS: Final = (LABEL_SLO, LABEL_SERVICE)
CLASS_LABELS: Final = (LABEL_SLO, LABEL_SERVICE, LABEL_CLASS)

# Alert names: <CamelCaseSloName> + suffix.
BURN_ALERT_SUFFIX: Final = "ErrorBudgetBurn"  # severity page or ticket
CLASS_BURN_ALERT_SUFFIX: Final = "ClassErrorBudgetBurn"  # the same, per request class
FAST_ALERT_SUFFIX: Final = "P99High"  # severity control, per instance
# Severity page, beside the burn alert: it burns, and the time went outside the engine.
NOT_IN_ENGINE_ALERT_SUFFIX: Final = "BurnNotInEngine"


@dataclass(frozen=True, slots=True)
class Windowed:
    """A recorded series per window: the prefix completed by the window (``rate5m``)."""

    prefix: str
    help: str
    unit: str = "ratio"
    labels: tuple[str, ...] = SLO_LABELS

    def at(self, window_seconds: int) -> Metric:
        return Metric(self.prefix + format_duration(window_seconds), "gauge", self.help,
                      self.unit, self.labels)


def _recorded(name: str, help: str, unit: str = "ratio",
              labels: tuple[str, ...] = SLO_LABELS) -> Metric:
    return Metric(name, "gauge", help, unit, labels)


SLI_EVENTS_RATE: Final = Windowed(
    "slo:sli_events:rate", "All of the SLI's events per second over the window.", "events")
SLI_ERROR_EVENTS_RATE: Final = Windowed(
    "slo:sli_error_events:rate", "The SLI's bad events per second over the window.", "events")
SLI_ERROR_RATIO: Final = Windowed(
    "slo:sli_error:ratio_rate", "Bad events over all events within the window.")
BURN_RATE: Final = Windowed(
    "slo:burn_rate:ratio_rate", "The window's error ratio over the error budget.")

# Over the whole SLO period, weighted by events (not an average of 5-minute ratios).
SLI_ERROR_RATIO_PERIOD: Final = _recorded(
    "slo:sli_error:ratio_period", "Bad events over all events within the SLO period.")
BURN_RATE_PERIOD: Final = _recorded(
    "slo:burn_rate:ratio_period", "The period's error ratio over the error budget.")
ERROR_BUDGET_REMAINING: Final = _recorded(
    "slo:error_budget_remaining:ratio",
    "Share of the period's error budget left: 1 untouched, below 0 blown.")
OBJECTIVE: Final = _recorded("slo:objective:ratio", "The SLO's objective.")
ERROR_BUDGET: Final = _recorded("slo:error_budget:ratio", "1 - the objective.")
PERIOD: Final = _recorded("slo:period:seconds", "The SLO period.", "seconds")
# Value 1; its labels describe the SLO (objective, kind, threshold, …).
INFO: Final = _recorded("slo:info", "The SLO's description, in labels.", "")

# ---- per request class (latency SLOs of a spec with classes), each class at its own threshold ---
CLASS_SLI_EVENTS_RATE: Final = Windowed(
    "slo_class:sli_events:rate", "The SLI's events of one request class per second over the "
    "window.", "events", CLASS_LABELS)
CLASS_SLI_ERROR_EVENTS_RATE: Final = Windowed(
    "slo_class:sli_error_events:rate", "One class's bad events (over its own threshold) per "
    "second over the window.", "events", CLASS_LABELS)
CLASS_SLI_ERROR_RATIO: Final = Windowed(
    "slo_class:sli_error:ratio_rate", "One class's bad events over its events within the window.",
    labels=CLASS_LABELS)
CLASS_BURN_RATE: Final = Windowed(
    "slo_class:burn_rate:ratio_rate", "One class's error ratio over the SLO's error budget.",
    labels=CLASS_LABELS)
CLASS_SLI_ERROR_RATIO_PERIOD: Final = _recorded(
    "slo_class:sli_error:ratio_period", "One class's bad events over its events within the SLO "
    "period.", labels=CLASS_LABELS)
CLASS_ERROR_BUDGET_REMAINING: Final = _recorded(
    "slo_class:error_budget_remaining:ratio", "Share of the period's error budget one class has "
    "left.", labels=CLASS_LABELS)

# ---- where a request's time goes (governor_request_stage_seconds), per stage -------------------
STAGE_MEAN: Final = Windowed(
    "governor:request_stage_seconds:mean", "Mean seconds per request in each stage over the "
    "window, over the inference target.", "seconds", (LABEL_STAGE,))
