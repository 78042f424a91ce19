"""Names of the series and alerts the generated rules produce (dashboards import these).

Every recorded SLO series carries the labels ``slo`` and ``service`` plus the spec's routing
labels. Windowed series exist for each window of :data:`governor.alerts.windows.SLI_WINDOWS`
(``slo:sli_error:ratio_rate5m`` … ``ratio_rate3d``).
"""

from __future__ import annotations

from typing import Final

from governor.slo.promql import format_duration

LABEL_SLO: Final = "slo"
LABEL_SERVICE: Final = "service"
LABEL_SEVERITY: Final = "severity"
LABEL_INSTANCE: Final = "instance"
LABEL_JOB: Final = "job"

SEVERITY_PAGE: Final = "page"
SEVERITY_TICKET: Final = "ticket"
SEVERITY_CONTROL: Final = "control"  # routed to the controller's webhook

# Prefixes completed by a window (``rate5m``) — see :func:`windowed`.
SLI_EVENTS_RATE: Final = "slo:sli_events:rate"  # events per second (all events)
SLI_ERROR_EVENTS_RATE: Final = "slo:sli_error_events:rate"  # bad events per second
SLI_ERROR_RATIO: Final = "slo:sli_error:ratio_rate"  # bad / all over the window
BURN_RATE: Final = "slo:burn_rate:ratio_rate"  # error ratio / error budget

# Over the whole SLO period, weighted by events (not an average of 5-minute ratios).
SLI_ERROR_RATIO_PERIOD: Final = "slo:sli_error:ratio_period"
BURN_RATE_PERIOD: Final = "slo:burn_rate:ratio_period"
ERROR_BUDGET_REMAINING: Final = "slo:error_budget_remaining:ratio"  # 1 → untouched, < 0 → blown

OBJECTIVE: Final = "slo:objective:ratio"
ERROR_BUDGET: Final = "slo:error_budget:ratio"
PERIOD: Final = "slo:period:seconds"
INFO: Final = "slo:info"  # value 1; labels describe the SLO (objective, kind, threshold, …)

# Alert names: <CamelCaseSloName> + suffix.
BURN_ALERT_SUFFIX: Final = "ErrorBudgetBurn"  # severity page or ticket
FAST_ALERT_SUFFIX: Final = "P99High"  # severity control, per instance


def windowed(prefix: str, window_seconds: int) -> str:
    """``windowed(SLI_ERROR_RATIO, 300)`` → ``slo:sli_error:ratio_rate5m``."""
    return prefix + format_duration(window_seconds)
