"""PromQL the boards query, built from metric names and Grafana's template variables.

Pure string building, no evaluation. Every selector names its scrape job (the jobs the generated
``prometheus.yml`` defines) and the board's ``$instance`` variable, so one Grafana can show a
fleet::

    >>> on_job("inference", "governor_queue_depth")
    'governor_queue_depth{job="inference", instance=~"$instance"}'
    >>> quantile(0.99, "x_seconds", 'job="a"')
    'histogram_quantile(0.99, sum by (le) (rate(x_seconds_bucket{job="a"}[$__rate_interval])))'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from governor.slo.promql import quote

# Grafana's own variables: the rate window it derives from the scrape interval and the step,
# and the dashboard's whole time range.
RATE_INTERVAL: Final = "$__rate_interval"
RANGE: Final = "$__range"
INSTANCE: Final = "instance"
JOB: Final = "job"


def variable(name: str) -> str:
    return f"${name}"


def matchers(job: str, **regexes: str) -> str:
    """``job="gpu", instance=~"$instance"`` plus ``label=~"$variable"`` for each keyword."""
    parts = [f"{JOB}={quote(job)}", f"{INSTANCE}=~{quote(variable(INSTANCE))}"]
    parts += [f"{label}=~{quote(value)}" for label, value in regexes.items()]
    return ", ".join(parts)


def selector(metric: str, labels: str = "") -> str:
    return f"{metric}{{{labels}}}" if labels else metric


def on_job(job: str, metric: str, **regexes: str) -> str:
    return selector(metric, matchers(job, **regexes))


def with_label(labels: str, matcher: str) -> str:
    """Add one more matcher (``param="max_num_seqs"``) to a matcher list."""
    return f"{labels}, {matcher}" if labels else matcher


def equals(label: str, value: str) -> str:
    return f"{label}={quote(value)}"


def rate(metric: str, labels: str, window: str = RATE_INTERVAL) -> str:
    return f"rate({selector(metric, labels)}[{window}])"


def sum_by(by: Sequence[str], expr: str) -> str:
    return f"sum by ({', '.join(by)}) ({expr})" if by else f"sum({expr})"


def quantile(q: float, histogram: str, labels: str, by: Sequence[str] = ()) -> str:
    """The q-quantile of a classic histogram over the rate interval, per ``by`` group."""
    rates = rate(histogram + "_bucket", labels)
    return f"histogram_quantile({q:g}, {sum_by(('le', *by), rates)})"


def mean(histogram: str, labels: str, by: Sequence[str] = ()) -> str:
    """Mean observation over the rate interval: rate of the sum over rate of the count."""
    return (f"{sum_by(by, rate(histogram + '_sum', labels))}\n/\n"
            f"{sum_by(by, rate(histogram + '_count', labels))}")


def ratio_of_rates(numerator: str, denominator: str, labels: str,
                   by: Sequence[str] = ()) -> str:
    return (f"{sum_by(by, rate(numerator, labels))}\n/\n"
            f"{sum_by(by, rate(denominator, labels))}")


def events(counter: str, labels: str, by: Sequence[str], window: str) -> str:
    """Counter events for annotations: an increase, or a series that was absent ``window`` ago.

    increase() needs two samples, so a label set's first event (a series that appears at 1) is
    invisible to it; the ``unless … offset`` half catches exactly that case.
    """
    series = selector(counter, labels)
    return (f"{sum_by(by, f'increase({series}[{window}])')} > 0\nor\n"
            f"{sum_by(by, f'{series} unless {series} offset {window}')} > 0")


def changed(gauge: str, labels: str, window: str) -> str:
    """Samples of ``gauge`` whose value changed within ``window`` (for annotations)."""
    return f"changes({selector(gauge, labels)}[{window}]) > 0"


def increase(metric: str, labels: str, window: str = RATE_INTERVAL) -> str:
    return f"increase({selector(metric, labels)}[{window}])"


def ref(label: str) -> str:
    """A label in a legend or annotation template: ``{{gpu}}``."""
    return "{{" + label + "}}"
