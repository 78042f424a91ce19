"""The controller board: what it decided and why, the limits it set, what it observed.

The observation panels group the controller's ``quantity`` label by its unit suffix (the
quantities follow the base-unit naming rule), so a quantity added to the controller shows up
without a change here.
"""

from __future__ import annotations

from typing import Final

from grafana_foundation_sdk.models import dashboard as dm

from governor.contracts.declaration import Metric
from governor.contracts.metrics import controller as c
from governor.contracts.promql import (
    Matcher,
    Selector,
    histogram_quantile,
    increase,
    max_by,
    not_regex,
    regex,
    sum_by,
)
from governor.dashboards import controller_events
from governor.dashboards.board import Board, BoardInfo, fleet_variables, label_variable
from governor.dashboards.panels import WARN_COLOR, Line, Query, Spec, stat, timeseries
from governor.dashboards.variables import RATE_INTERVAL, ref, scope, variable
from governor.slo.spec import LatencySLI, SloSpec

INFO: Final = BoardInfo(
    "governor-controller", "Governor / Controller",
    "The SLO controller's decisions by action and reason, the batching limits it set on each "
    "target, what it observed, and the health of its reconcile loop.")
LABELS: Final = scope()
TARGETS: Final = (*LABELS, regex(c.LABEL_TARGET, variable(c.LABEL_TARGET)))
PER_TARGET: Final = f"{ref(c.LABEL_TARGET)}"
# Unit suffixes of the observed quantities (base units in every name).
SECONDS: Final = ".+_seconds"
PER_SECOND: Final = ".+_per_second"
RATIO: Final = ".+_ratio"


def _quantities(pattern: str, negate: bool = False) -> tuple[Matcher, ...]:
    return (*TARGETS, (not_regex if negate else regex)(c.LABEL_QUANTITY, pattern))


def _series(metric: Metric, labels: tuple[Matcher, ...] = LABELS) -> str:
    return Selector(metric.series, labels).render()


def _increase(counter: Metric, by: tuple[str, ...]) -> str:
    return sum_by(by, increase(Selector(counter.total, LABELS), RATE_INTERVAL))


def controlled_thresholds(spec: SloSpec) -> list[float]:
    return sorted(slo.sli.threshold_seconds for slo in spec.slos
                  if slo.controller and isinstance(slo.sli, LatencySLI))


def _decisions_row(board: Board) -> None:
    board.row("Decisions")
    board.panel(timeseries(
        Spec("Decisions by action", "Reconcile outcomes: hold, tighten (cut a limit), relax "
             "(give some back), undo (revert a change that made things worse).", "short"),
        [Query(_increase(c.DECISIONS, (c.LABEL_ACTION,)), f"{ref(c.LABEL_ACTION)}")],
        bars=True, stacked=True))
    board.panel(timeseries(
        Spec("Decisions by reason", "Why the control law decided what it did; the audit log "
             "and /status hold each decision's inputs and before/after limits.", "short"),
        [Query(_increase(c.DECISIONS, (c.LABEL_ACTION, c.LABEL_REASON)),
               f"{ref(c.LABEL_ACTION)}: {ref(c.LABEL_REASON)}")], bars=True, stacked=True))


def _limits_row(spec: SloSpec, board: Board) -> None:
    board.row("Limits and observations")
    board.panel(timeseries(
        Spec("Batching limits set", "The limits in force on each target, as the controller "
             "last read or set them.", "short"),
        [Query(_series(c.TARGET_LIMITS, TARGETS),
               f"{ref(c.LABEL_PARAM)} {PER_TARGET}")]))
    board.panel(timeseries(
        Spec("Observed latency", "The latency tails and medians the last reconcile acted on. "
             "Dashed: the thresholds of the SLOs the controller keeps.", "s"),
        [Query(_series(c.OBSERVED, _quantities(SECONDS)),
               f"{ref(c.LABEL_QUANTITY)} {PER_TARGET}")],
        lines=[Line(t) for t in controlled_thresholds(spec)]))
    board.panel(timeseries(
        Spec("Observed rates", "Token throughput, preemptions and queue growth the last "
             "reconcile saw.", "short"),
        [Query(_series(c.OBSERVED, _quantities(PER_SECOND)),
               f"{ref(c.LABEL_QUANTITY)} {PER_TARGET}")]))
    board.panel(timeseries(
        Spec("Observed load", "Requests running and waiting, and the KV cache usage ratio.",
             "short"),
        [Query(_series(c.OBSERVED, _quantities(f"{SECONDS}|{PER_SECOND}", negate=True)),
               f"{ref(c.LABEL_QUANTITY)} {PER_TARGET}")]))


def _loop_row(board: Board) -> None:
    board.row("Reconcile loop and alerts")
    board.panel(timeseries(
        Spec("Reconciles by result", "Per-target reconciles: ok, temporary or permanent "
             "errors, or skipped while backing off.", "short", width=8),
        [Query(_increase(c.RECONCILES, (c.LABEL_RESULT,)), f"{ref(c.LABEL_RESULT)}")],
        bars=True, stacked=True))
    board.panel(timeseries(
        Spec("Reconcile duration", "One pass over all targets: Prometheus queries plus admin "
             "API calls.", "s", width=8),
        [Query(histogram_quantile(q, c.RECONCILE_DURATION.name, LABELS, RATE_INTERVAL),
               f"p{round(q * 100)}") for q in (0.5, 0.99)]))
    board.panel(stat(
        Spec("Since last reconcile", "Seconds since the loop last completed a pass; it "
             "resyncs every few seconds even without alerts.", "s", width=4),
        Query(f"time() - {max_by((), _series(c.LAST_RECONCILE))}", instant=True),
        steps=[(60, WARN_COLOR)], decimals=0))
    board.panel(stat(
        Spec("Dry run", "1: decisions are logged and counted but not applied.", "short",
             width=4),
        Query(max_by((), _series(c.DRY_RUN)), instant=True), steps=[(1, WARN_COLOR)]))
    board.panel(timeseries(
        Spec("Alerts", "Alerts the controller knows to be firing, and Alertmanager "
             "notifications received by status and outcome.", "short"),
        [Query(sum_by((), _series(c.ALERTS_FIRING)), "firing"),
         Query(_increase(c.ALERTS_RECEIVED, (c.LABEL_STATUS, c.LABEL_OUTCOME)),
               f"received {ref(c.LABEL_STATUS)} {ref(c.LABEL_OUTCOME)}")]))
    board.panel(timeseries(
        Spec("Webhook requests", "Requests on POST /alerts by HTTP status (401: a caller "
             "without the bearer token).", "short"),
        [Query(_increase(c.WEBHOOK_REQUESTS, (c.LABEL_CODE,)), f"{ref(c.LABEL_CODE)}")],
        bars=True, stacked=True))


def controller_board(spec: SloSpec, source: str) -> Board:
    board = Board(INFO, source)
    fleet_variables(board, spec.targets.controller, c.DRY_RUN.name)
    board.variable(label_variable(c.LABEL_TARGET, c.LABEL_TARGET, c.TARGET_LIMITS.name))
    controller = spec.targets.controller
    board.annotation(controller_events.decisions(controller))
    board.annotation(controller_events.limit_changes(controller))
    board.annotation(controller_events.controller_posts())
    _decisions_row(board)
    _limits_row(spec, board)
    _loop_row(board)
    return board


def build(spec: SloSpec, source: str) -> dm.Dashboard:
    return controller_board(spec, source).build()
