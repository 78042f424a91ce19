"""Grafana's side of a board's queries: its template variables and legend references.

The PromQL itself is built by :mod:`governor.contracts.promql`; a board adds Grafana's rate
window and scopes every selector to one scrape job and the board's ``$instance`` variable, so
one Grafana can show a fleet::

    >>> from governor.contracts.promql import Selector
    >>> Selector("governor_queue_depth", scope("inference")).render()
    'governor_queue_depth{job="inference", instance=~"$instance"}'
"""

from __future__ import annotations

from typing import Final

from governor.contracts.metrics.prometheus import LABEL_INSTANCE, LABEL_JOB
from governor.contracts.promql import Matcher, eq, regex

# The rate window Grafana derives from the scrape interval and the step.
RATE_INTERVAL: Final = "$__rate_interval"


def variable(name: str) -> str:
    return f"${name}"


def scope(job: str, **variables: str) -> tuple[Matcher, ...]:
    """``job="gpu", instance=~"$instance"`` plus ``label=~"value"`` for each keyword."""
    return (eq(LABEL_JOB, job), regex(LABEL_INSTANCE, variable(LABEL_INSTANCE)),
            *(regex(label, value) for label, value in variables.items()))


def ref(label: str) -> str:
    """A label in a legend or annotation template: ``{{gpu}}``."""
    return "{{" + label + "}}"
