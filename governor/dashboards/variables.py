"""Grafana's side of a board's queries: its template variables and legend references.

The PromQL itself is built by :mod:`governor.contracts.promql`; a board adds Grafana's rate
window and scopes every selector to the board's ``$job``, ``$namespace`` and ``$instance``
variables, so one Grafana can show a fleet whatever its jobs are called (the spec's ``targets``
give the variables their defaults)::

    >>> from governor.contracts.promql import Selector
    >>> Selector("governor_queue_depth", scope()).render()
    'governor_queue_depth{job=~"$job", namespace=~"$namespace", instance=~"$instance"}'
"""

from __future__ import annotations

from typing import Final

from governor.contracts.metrics.scrape import LABEL_INSTANCE, LABEL_JOB, LABEL_NAMESPACE
from governor.contracts.promql import Matcher, regex

# The rate window Grafana derives from the scrape interval and the step.
RATE_INTERVAL: Final = "$__rate_interval"


def variable(name: str) -> str:
    return f"${name}"


def target_scope() -> tuple[Matcher, ...]:
    """The board's component: ``job=~"$job", namespace=~"$namespace"``."""
    return (regex(LABEL_JOB, variable(LABEL_JOB)),
            regex(LABEL_NAMESPACE, variable(LABEL_NAMESPACE)))


def scope(**variables: str) -> tuple[Matcher, ...]:
    """:func:`target_scope`, ``instance=~"$instance"``, and ``label=~"value"`` for each
    keyword."""
    return (*target_scope(), regex(LABEL_INSTANCE, variable(LABEL_INSTANCE)),
            *(regex(label, value) for label, value in variables.items()))


def ref(label: str) -> str:
    """A label in a legend or annotation template: ``{{gpu}}``."""
    return "{{" + label + "}}"
