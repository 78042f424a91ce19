"""The SLO overview: for each SLO of the spec, where it stands and how fast it burns.

Every number comes from the recording rules the alerts generator writes (their names from
:mod:`governor.contracts.metrics.slo`, their selectors from
:func:`governor.alerts.slo_rules.recorded`), so the board and the alerts can never disagree about
what an SLI is. With request classes in the spec, the summary lists them and each latency SLO
gets per-class panels: burn rate and error budget left by class, each class against its own
threshold.
"""

from __future__ import annotations

from typing import Final

from grafana_foundation_sdk.models import dashboard as dm

from governor.contracts import causes
from governor.contracts.declaration import Metric
from governor.contracts.metrics import slo as n
from governor.contracts.metrics import verdict
from governor.contracts.metrics.scrape import LABEL_INSTANCE
from governor.contracts.metrics.service import LABEL_CLASS
from governor.contracts.promql import Selector, eq, format_duration, format_number, to_decimal
from governor.dashboards import controller_events
from governor.dashboards.board import Board, BoardInfo
from governor.dashboards.panels import (
    BAD_COLOR,
    OK_COLOR,
    WARN_COLOR,
    Line,
    Query,
    Spec,
    stat,
    text,
    timeseries,
)
from governor.dashboards.variables import ref
from governor.slo import class_thresholds
from governor.slo.burn import SEVERITIES, SLI_WINDOWS, firing_tiers, recorded
from governor.slo.spec import SLO, LatencySLI, SloSpec

INFO: Final = BoardInfo(
    "governor-slo", "Governor / SLOs",
    "Each SLO of slo.yaml: objective, SLI over the period, error budget left and burn rates; "
    "controller actions are annotations.", time_from="now-6h")
# Budget remaining below this is worth a look before it is gone.
BUDGET_LOW: Final = 0.25
TIER_COLORS: Final = {n.SEVERITY_PAGE: BAD_COLOR, n.SEVERITY_TICKET: WARN_COLOR}
# Windows drawn on the error-ratio panel: the fastest page window and the slow tiers' long ones.
RATIO_WINDOWS: Final = (300, 3600, 6 * 3600)


def percent(ratio: float) -> str:
    return format_number(to_decimal(ratio) * 100) + "%"


def describe_sli(slo: SLO) -> str:
    if isinstance(slo.sli, LatencySLI):
        selector = "".join(f", {k}={v}" for k, v in sorted(slo.sli.selector.items()))
        return (f"observations of `{slo.sli.metric}`{selector} at or below "
                f"{format_number(slo.sli.threshold_seconds)} s")
    return f"`{slo.sli.errors}` out of `{slo.sli.total}`"


def table_cell(markdown: str) -> str:
    """A pipe (regex alternation in a selector) would end a markdown table cell early."""
    return markdown.replace("|", "\\|")


def summary(spec: SloSpec) -> str:
    """A markdown table of the spec, so the board says what it measures against."""
    rows = [f"| {slo.name} | {percent(slo.objective)} | {table_cell(describe_sli(slo))} | "
            f"{'yes' if slo.controller else 'no'} |" for slo in spec.slos]
    return (f"Service **{spec.service}**, rolling period **{spec.period}**.\n\n"
            "| SLO | objective | good events | controller |\n| --- | --- | --- | --- |\n"
            + "\n".join(rows) + class_summary(spec))


def class_summary(spec: SloSpec) -> str:
    """The request classes, in match order: what selects each, and what each is owed."""
    if not spec.classes.declared:
        return ""
    rows = []
    for c in spec.classes.classes:
        limits = " | ".join("—" if v is None else str(v) for v in (c.max_in_flight, c.max_queue))
        own = ", ".join(f"{name} ≤ {format_number(t)} s" for name, t in c.thresholds) or "—"
        rows.append(f"| {c.name} | {table_cell(c.describe_match())} | {c.priority} | {limits} | "
                    f"{table_cell(own)} |")
    return ("\n\nRequest classes, tried in order (lower priority values are served first):"
            "\n\n| class | matched by | vLLM priority | in flight at most | waiting at most "
            "| own thresholds |\n| --- | --- | --- | --- | --- | --- |\n" + "\n".join(rows))


def _title(spec: SloSpec, slo: SLO) -> str:
    return f"{slo.name}: {percent(slo.objective)} over {spec.period}"


def _stats(spec: SloSpec, slo: SLO, board: Board) -> None:
    def series(metric: Metric) -> str:
        return recorded(metric, spec, slo)

    objective = float(slo.objective)
    board.panel(stat(Spec("Objective", f"{slo.description} Good events: {describe_sli(slo)}.",
                          "percentunit", width=4, height=5),
                     Query(series(n.OBJECTIVE), instant=True), decimals=2))
    board.panel(stat(Spec(f"SLI over {spec.period}", "Share of good events over the whole "
                          "period, weighted by events (a busy hour counts more than a quiet "
                          "one). Red below the objective.", "percentunit", width=5, height=5),
                     Query(f"1 - {series(n.SLI_ERROR_RATIO_PERIOD)}", instant=True),
                     base_color=BAD_COLOR, steps=[(objective, OK_COLOR)], decimals=3))
    board.panel(stat(Spec("Error budget remaining", "1: untouched; 0: spent; below 0: the "
                          "objective is missed over the period.", "percentunit", width=5,
                          height=5),
                     Query(series(n.ERROR_BUDGET_REMAINING), instant=True),
                     base_color=BAD_COLOR, steps=[(0, WARN_COLOR), (BUDGET_LOW, OK_COLOR)],
                     decimals=1))
    board.panel(stat(Spec(f"Burn rate over {spec.period}", "Error ratio over the period "
                          "divided by the error budget: 1 spends exactly the budget by the end "
                          "of the period.", "x", width=5, height=5),
                     Query(series(n.BURN_RATE_PERIOD), instant=True),
                     steps=[(1, BAD_COLOR)], decimals=2))
    window = SLI_WINDOWS[0]
    board.panel(stat(Spec(f"Events per second ({format_duration(window)})",
                          "Traffic the SLI counts; with little traffic one bad event moves the "
                          "ratios a lot.", "short", width=5, height=5),
                     Query(series(n.SLI_EVENTS_RATE.at(window)), instant=True),
                     decimals=2))


def _burn_lines(spec: SloSpec, slo: SLO) -> list[Line]:
    return [Line(float(tier.factor(spec.period_seconds)), TIER_COLORS[severity])
            for severity in SEVERITIES for tier in firing_tiers(spec, slo, severity)]


def _trends(spec: SloSpec, slo: SLO, board: Board) -> None:
    board.panel(timeseries(
        Spec("Burn rate by window", "Error ratio over each alert window divided by the error "
             "budget. Dashed lines: the burn rates at which the page (red) and ticket (orange) "
             "alerts fire when both of a tier's windows exceed them.", "x"),
        [Query(recorded(n.BURN_RATE.at(w), spec, slo), format_duration(w))
         for w in SLI_WINDOWS],
        lines=_burn_lines(spec, slo)))
    board.panel(timeseries(
        Spec("Error ratio", "Bad events over all events per window. Dashed: the error budget "
             f"({percent(float(slo.error_budget))} of events).", "percentunit"),
        [Query(recorded(n.SLI_ERROR_RATIO.at(w), spec, slo), format_duration(w))
         for w in RATIO_WINDOWS],
        lines=[Line(float(slo.error_budget))]))


def _classes(spec: SloSpec, slo: SLO, board: Board) -> None:
    """Per request class, each against its own threshold (the ``classes`` rule set)."""
    legend = ref(LABEL_CLASS)
    board.panel(timeseries(
        Spec("Burn rate by request class", "Each class's error ratio, against its own threshold "
             f"({class_thresholds.describe(spec, slo)}), over the error budget, in the fastest "
             "page tier's windows. Dashed: the page and ticket burn rates.", "x"),
        [Query(recorded(n.CLASS_BURN_RATE.at(w), spec, slo), f"{legend} {format_duration(w)}")
         for w in (300, 3600)],
        lines=_burn_lines(spec, slo)))
    board.panel(timeseries(
        Spec(f"Error budget left by request class ({spec.period})", "Share of the period's "
             "error budget each class has left: 1 untouched, 0 spent.", "percentunit"),
        [Query(recorded(n.CLASS_ERROR_BUDGET_REMAINING, spec, slo), legend)],
        lines=[Line(0.0), Line(BUDGET_LOW, WARN_COLOR)]))


def _explained(slo: SLO) -> bool:
    """The verdict splits this SLO's latency (inter-token or first-token)."""
    return isinstance(slo.sli, LatencySLI) and slo.sli.metric in causes.PATHS


def _why(spec: SloSpec, board: Board) -> None:
    """Who is to blame while a latency SLO burns: each cause's share of the breach per target
    (``verdict.yml``; docs/why.md)."""
    explained = [slo for slo in spec.slos if _explained(slo)]
    if not explained:
        return
    board.row("Why it burns")
    for slo in explained:
        selector = Selector(verdict.CAUSE_SHARE.name, (eq(n.LABEL_SLO, slo.name),
                                                       eq(n.LABEL_SERVICE, spec.service)))
        board.panel(timeseries(
            Spec(f"Why {slo.name} burns", "While the SLO burns on a target, each cause's share "
                 "of its breach (how far its quantile is over the threshold): the GPU's "
                 "condition first, then the service's stages, the KV cache, batching or the "
                 "queue, then saturation. Empty while nothing burns; `governor why` prints the "
                 "numbers behind each cause.", "percentunit"),
            [Query(selector.render(), f"{ref(verdict.LABEL_CAUSE)} on {ref(LABEL_INSTANCE)}")],
            stacked=True, bars=True, max_value=1))


def slo_board(spec: SloSpec, source: str) -> Board:
    board = Board(INFO, source)
    controller = spec.targets.controller
    for annotation in (controller_events.decisions(controller),
                       controller_events.limit_changes(controller)):
        board.annotation(annotation)
    board.annotation(controller_events.controller_posts())
    rows = len(spec.slos) + (4 + len(spec.classes.classes) if spec.classes.declared else 0)
    board.panel(text("SLOs", summary(spec), height=3 + rows))
    for slo in spec.slos:
        board.row(_title(spec, slo))
        _stats(spec, slo, board)
        _trends(spec, slo, board)
        if class_thresholds.applies(spec, slo):
            _classes(spec, slo, board)
    _why(spec, board)
    return board


def build(spec: SloSpec, source: str) -> dm.Dashboard:
    return slo_board(spec, source).build()
