"""Panels as Governor's boards use them, on grafana-foundation-sdk's builders.

Each function returns a builder whose ``options`` and ``fieldConfig.defaults.custom`` are set in
full (the panel schemas' required keys), so that what Grafana renders does not depend on its
defaults, and the schema tests check something. Every panel reads the ``$datasource`` variable::

    ts = timeseries(Spec("ITL p99", "…", "s"), [Query(expr, "p99")], lines=[Line(0.12, "SLO")])
    hm = heatmap(Spec("ITL", "…", "s"), Query(buckets_expr, "{{le}}", buckets=True))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import heatmap as hm_builder
from grafana_foundation_sdk.builders import prometheus as pb
from grafana_foundation_sdk.builders import stat as stat_builder
from grafana_foundation_sdk.builders import text as text_builder
from grafana_foundation_sdk.builders import timeseries as ts_builder
from grafana_foundation_sdk.cog import builder as cog
from grafana_foundation_sdk.cog import variants
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import heatmap as hm
from grafana_foundation_sdk.models import prometheus as pm
from grafana_foundation_sdk.models import text as tm

DATASOURCE_VARIABLE: Final = "datasource"
PROMETHEUS_TYPE: Final = "prometheus"
FULL_WIDTH: Final = 24
# The first threshold step has no lower bound; Grafana writes it as null (the schema allows it).
BASE: Final = None

# Colours by meaning, so every board reads the same.
OK_COLOR: Final = "green"
WARN_COLOR: Final = "orange"
BAD_COLOR: Final = "red"
REFERENCE_COLOR: Final = "text"


def prometheus_ref() -> dm.DataSourceRef:
    return dm.DataSourceRef(type_val=PROMETHEUS_TYPE, uid=f"${{{DATASOURCE_VARIABLE}}}")


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""
    instant: bool = False
    # Ask for exemplars (the service's histograms carry trace ids; vLLM's do not).
    exemplar: bool = False
    # A histogram's buckets (``sum by (le) (rate(…_bucket[…]))``): Grafana's heatmap format,
    # which sorts the buckets by ``le`` and takes each one's count from the cumulative ones.
    buckets: bool = False


@dataclass(frozen=True)
class Line:
    """A horizontal reference (an SLO threshold, a limit), drawn as a dashed threshold line."""

    value: float
    color: str = BAD_COLOR


@dataclass(frozen=True)
class Spec:
    """What every panel has: a title, a description that says how to read it, a unit."""

    title: str
    description: str
    unit: str = "short"
    width: int = 12
    height: int = 8


def _targets(queries: Sequence[Query]) -> list[cog.Builder[variants.Dataquery]]:
    targets: list[cog.Builder[variants.Dataquery]] = []
    for index, query in enumerate(queries):
        target = (pb.Dataquery().expr(query.expr).legend_format(query.legend or "__auto")
                  .ref_id(chr(ord("A") + index)).datasource(prometheus_ref())
                  .editor_mode(pm.QueryEditorMode.CODE))
        target = target.instant() if query.instant else target.range()
        if query.exemplar:
            target = target.exemplar(True)
        if query.buckets:
            target = target.format(pm.PromQueryFormat.HEATMAP)
        targets.append(target)
    return targets



def thresholds(base_color: str, steps: Sequence[tuple[float, str]]) -> db.ThresholdsConfig:
    """Colour steps: ``base_color`` below the first value, then each ``(value, colour)``."""
    ordered = sorted(steps)
    return (db.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE)
            .steps([dm.Threshold(BASE, base_color),
                    *(dm.Threshold(value, color) for value, color in ordered)]))


def _legend() -> cb.VizLegendOptions:
    return (cb.VizLegendOptions().display_mode(cm.LegendDisplayMode.LIST)
            .placement(cm.LegendPlacement.BOTTOM).show_legend(True).calcs([]))


def _tooltip() -> cb.VizTooltipOptions:
    return cb.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.DESCENDING)


def timeseries(spec: Spec, queries: Sequence[Query], *, lines: Sequence[Line] = (),
               stacked: bool = False, bars: bool = False, min_value: float | None = 0,
               max_value: float | None = None) -> ts_builder.Panel:
    panel = (ts_builder.Panel().title(spec.title).description(spec.description)
             .datasource(prometheus_ref()).unit(spec.unit).span(spec.width).height(spec.height)
             .targets(_targets(queries)).legend(_legend()).tooltip(_tooltip())
             .draw_style(cm.GraphDrawStyle.BARS if bars else cm.GraphDrawStyle.LINE)
             .line_width(1).fill_opacity(60 if bars or stacked else 10)
             .show_points(cm.VisibilityMode.NEVER).span_nulls(False)
             .stacking(cb.StackingConfig().mode(
                 cm.StackingMode.NORMAL if stacked else cm.StackingMode.NONE))
             .color_scheme(db.FieldColor().mode(dm.FieldColorModeId.PALETTE_CLASSIC))
             .thresholds(thresholds(REFERENCE_COLOR, [(line.value, line.color) for line in lines]))
             .thresholds_style(cb.GraphThresholdsStyleConfig().mode(
                 cm.GraphThresholdsStyleMode.DASHED if lines else cm.GraphThresholdsStyleMode.OFF)))
    if min_value is not None:
        panel = panel.min(min_value)
    if max_value is not None:
        panel = panel.max(max_value)
    return panel


# A stat that shows each series' legend instead of its value (an identity: versions, adapters).
NAME_ONLY: Final = cm.BigValueTextMode.NAME


def stat(spec: Spec, query: Query, *, base_color: str = OK_COLOR,
         steps: Sequence[tuple[float, str]] = (), decimals: int | None = None,
         no_value: str = "no data",
         text_mode: cm.BigValueTextMode = cm.BigValueTextMode.AUTO) -> stat_builder.Panel:
    """One number (the last value), coloured by ``steps``; with ``text_mode=NAME_ONLY`` each
    series' legend instead."""
    panel = (stat_builder.Panel().title(spec.title).description(spec.description)
             .datasource(prometheus_ref()).unit(spec.unit).span(spec.width).height(spec.height)
             .targets(_targets([query]))
             .graph_mode(cm.BigValueGraphMode.NONE).color_mode(cm.BigValueColorMode.VALUE)
             .justify_mode(cm.BigValueJustifyMode.AUTO).text_mode(text_mode)
             .wide_layout(True).show_percent_change(False)
             .percent_change_color_mode(cm.PercentChangeColorMode.STANDARD)
             .orientation(cm.VizOrientation.AUTO)
             .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
             .color_scheme(db.FieldColor().mode(dm.FieldColorModeId.THRESHOLDS))
             .thresholds(thresholds(base_color, steps)).no_value(no_value))
    if decimals is not None:
        panel = panel.decimals(decimals)
    return panel


def text(title: str, markdown: str, *, width: int = FULL_WIDTH,
         height: int = 4) -> text_builder.Panel:
    return (text_builder.Panel().title(title).span(width).height(height)
            .mode(tm.TextMode.MARKDOWN).content(markdown))


# Darker is more: a bucket that holds many requests, a GPU that is busy.
HEATMAP_SCHEME: Final = "Oranges"
HEATMAP_STEPS: Final = 64


def heatmap(spec: Spec, query: Query, *, cell_unit: str = "short", max_value: float | None = None,
            ) -> hm_builder.Panel:
    """A heat map of time (x) against ``query``'s series (y), each cell coloured by its value.

    With ``query.buckets`` the rows are a histogram's buckets, bottom to top by their upper edge
    (``spec.unit`` is the edges' unit, ``cell_unit`` the counts'); otherwise each series is a row
    of its own (a GPU), named by the query's legend, its cells in ``spec.unit`` up to
    ``max_value``.
    """
    color = (hm_builder.HeatmapColorOptions().mode(hm.HeatmapColorMode.SCHEME)
             .scheme(HEATMAP_SCHEME).fill("dark-orange").reverse(False)
             .steps(HEATMAP_STEPS))
    if query.buckets:
        # Request counts span decades; an exponential scale keeps the thin tail visible.
        color = color.scale(hm.HeatmapColorScale.EXPONENTIAL).exponent(0.5)
        cells = hm_builder.CellValues().unit(cell_unit)
        axis = hm_builder.YAxisConfig().unit(spec.unit)
        layout = cm.HeatmapCellLayout.LE
    else:
        color = color.scale(hm.HeatmapColorScale.LINEAR).exponent(1).min(0)
        color = color.max(max_value) if max_value is not None else color
        cells = hm_builder.CellValues().unit(spec.unit)
        axis = hm_builder.YAxisConfig()
        layout = cm.HeatmapCellLayout.AUTO
    return (hm_builder.Panel().title(spec.title).description(spec.description)
            .datasource(prometheus_ref()).span(spec.width).height(spec.height)
            .targets(_targets([query])).calculate(False).color(color)
            .y_axis(axis.axis_placement(cm.AxisPlacement.LEFT).reverse(False))
            .rows_frame(hm_builder.RowsHeatmapOptions().layout(layout))
            .cell_values(cells).cell_gap(1).show_value(cm.VisibilityMode.NEVER)
            .filter_values(hm_builder.FilterValueRange().le(1e-9)).show_legend()
            .mode(cm.TooltipDisplayMode.SINGLE).show_y_histogram().show_color_scale(True)
            .exemplars_color("rgba(255,0,255,0.7)").selection_mode(hm.HeatmapSelectionMode.X)
            .scale_distribution(cb.ScaleDistributionConfig().type(cm.ScaleDistribution.LINEAR))
            .hide_from(cb.HideSeriesConfig().legend(False).tooltip(False).viz(False)))
