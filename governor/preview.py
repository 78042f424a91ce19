"""``governor preview``: every dashboard panel drawn from a live Prometheus, without Grafana.

The boards ``governor generate`` writes are read back, each panel's queries are run against
Prometheus over the chosen range (Grafana's variables expanded: every template variable "All",
``$__rate_interval`` a few scrapes), and each board becomes one PNG laid out on Grafana's
24-column grid: time series with their legend, unit and threshold lines, heat maps as an image
of buckets (or GPUs) by time, stats as their latest value coloured by the thresholds (an
instant target's value at the end of the range, as Grafana shows it), text panels as text::

    governor preview                                  # the stack of `governor up`: .run/preview/
    governor preview --range 15m --out docs/images    # the pictures in the docs
    governor preview --board governor-slo --prometheus http://prometheus:9090

Nothing is drawn from a board that is not the generated one: the spec is rendered in memory
(``--slo``), so a preview always matches what ``governor generate`` would write.
"""

from __future__ import annotations

import importlib.util
import math
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from governor.common.cli import EnvArgumentParser, parse_duration_seconds
from governor.common.prometheus_api import PrometheusHTTP
from governor.contracts.endpoints import LOCAL_HOST, PROMETHEUS
from governor.contracts.package import install_hint
from governor.contracts.promql import format_duration
from governor.dashboards.readback import boards_of, defaults, expand, legend
from governor.dashboards.render import render_all
from governor.generation.catalog import load_checked_spec
from governor.slo.spec import SpecError

GRID_COLUMNS = 24
ROW_INCHES = 0.42  # one Grafana grid unit of height
FIGURE_WIDTH_INCHES = 20.0
POINTS = 240  # samples per series over the range
MAX_SERIES = 12  # per panel; a legend beyond that says how many were left out
THRESHOLD_GREYS = {"text", "transparent"}


@dataclass(frozen=True)
class Series:
    name: str
    times: list[float]
    values: list[float]


class PreviewError(Exception):
    """Something the user can fix: Prometheus unreachable, a bad spec, no matplotlib."""


def panel_series(panel: Mapping[str, Any], prometheus: str, window: tuple[float, float],
                 step: float, timeout: float, variables: Mapping[str, str] | None = None,
                 ) -> tuple[list[Series], list[str]]:
    """Every series of a panel's targets over the window, and the queries that failed;
    ``variables``: the board's opening values (:func:`defaults`). An instant target is asked as
    Grafana asks it, once at the window's end: a series that held earlier in the window and no
    longer does (a ``topk`` whose winner changed, a state left) is not drawn."""
    start, end = window
    rate_interval = format_duration(max(60, int(4 * step)))
    found: list[Series] = []
    failed: list[str] = []
    client = PrometheusHTTP(prometheus, timeout_seconds=timeout)
    for target in panel.get("targets", []):
        expr = expand(target["expr"], rate_interval=rate_interval,
                      range_=format_duration(max(1, int(end - start))), variables=variables)
        try:
            result = ([{**item, "values": [item["value"]]} for item in client.instant(expr, end)]
                      if target.get("instant") else client.range(expr, start, end, step))
        except (urllib.error.URLError, OSError, ValueError, KeyError) as exc:
            failed.append(f"{target.get('refId', '?')}: {exc}")
            continue
        for item in result:
            values = [(float(t), float(v)) for t, v in item["values"]]
            found.append(Series(legend(target.get("legendFormat", ""), item["metric"]),
                                [t for t, _ in values], [v for _, v in values]))
    return found, failed


# ---- units ------------------------------------------------------------------------------------

def scale_for(unit: str, values: Sequence[float]) -> tuple[float, str]:
    """A factor and a label that make ``values`` readable in Grafana's ``unit``."""
    peak = max((abs(v) for v in values if math.isfinite(v)), default=0.0)
    if unit == "s":
        return (1000.0, "ms") if peak < 1 else (1.0, "s")
    if unit == "percentunit":
        return 100.0, "%"
    if unit in ("bytes", "decbytes"):
        for factor, name in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
            if peak >= factor:
                return 1 / factor, name
        return 1.0, "B"
    if unit in ("Bps", "binBps"):
        return (1 / 2**30, "GiB/s") if peak >= 2**30 else (1 / 2**20, "MiB/s")
    if unit == "hertz":
        return (1e-6, "MHz") if peak >= 1e6 else (1.0, "Hz")
    labels = {"watt": "W", "celsius": "°C", "reqps": "req/s", "x": "x", "percent": "%"}
    return 1.0, labels.get(unit, "" if unit in ("short", "none", "") else unit)


def thresholds(panel: Mapping[str, Any]) -> list[tuple[float, str]]:
    steps = panel.get("fieldConfig", {}).get("defaults", {}).get("thresholds", {}).get("steps")
    return [(float(s["value"]), s.get("color", "red")) for s in steps or []
            if s.get("value") is not None]


def stacked(panel: Mapping[str, Any]) -> bool:
    """Whether Grafana stacks the panel's series (``stacking.mode`` ``normal``)."""
    custom = panel.get("fieldConfig", {}).get("defaults", {}).get("custom", {})
    return (custom.get("stacking") or {}).get("mode") == "normal"


def stack(series: Sequence[Series]) -> tuple[list[float], list[list[float]]]:
    """The series on one time axis (every time any of them has), as Grafana stacks them: a
    series without a value at a time adds nothing there."""
    times = sorted({t for s in series for t in s.times})
    rows = []
    for s in series:
        at = dict(zip(s.times, s.values, strict=True))
        rows.append([v if math.isfinite(v := at.get(t, 0.0)) else 0.0 for t in times])
    return times, rows


def bucket_rows(panel: Mapping[str, Any]) -> bool:
    """Whether a heat map's rows are a histogram's buckets (its query's format ``heatmap``)."""
    return any(t.get("format") == "heatmap" for t in panel.get("targets", []))


def _edge(name: str) -> float:
    try:
        return float(name)  # "+Inf" included
    except ValueError:
        return math.inf


def heatmap_cells(series: Sequence[Series], buckets: bool,
                  ) -> tuple[list[float], list[str], list[list[float]]]:
    """A heat map's times, row names (bottom to top) and cells (a list per row), as Grafana's
    heat map reads them: cumulative bucket series (named by their ``le``) become each bucket's
    own count, lowest edge at the bottom; other series are a row each, in name order."""
    times, rows = stack(series)
    order = sorted(range(len(series)), key=lambda i: ((_edge(series[i].name), series[i].name)
                                                      if buckets else (0.0, series[i].name)))
    names = [series[i].name for i in order]
    ordered = [rows[i] for i in order]
    if not buckets:
        return times, names, ordered
    cells = [[max(0.0, v - below) for v, below in zip(row, lower, strict=True)]
             for row, lower in zip(ordered[1:], ordered, strict=False)]
    return times, names, ordered[:1] + cells


def _colour(name: str) -> str:
    return "grey" if name in THRESHOLD_GREYS else name


# ---- drawing ----------------------------------------------------------------------------------

def draw_board(board: Mapping[str, Any], prometheus: str, window: tuple[float, float],
               step: float, timeout: float, path: Path) -> dict[str, Any]:
    """One PNG of the board; returns what was drawn and what failed."""
    import matplotlib.pyplot as plt

    fig, summary = board_figure(board, prometheus, window, step, timeout)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80, bbox_inches="tight")
    plt.close(fig)
    return summary


# Room kept inside each panel's grid cells for its title above the plot, and for the tick labels
# and the axis label below it. In inches, not in grid units: a gap between cells scales with the
# cell (a GridSpec hspace of 1.6 left 0.24 in between panels, where a title over the tick labels
# and the "minutes" label of the panel above need about half an inch, so they overlapped).
TITLE_INCHES = 0.3
AXIS_LABELS_INCHES = 0.45


def board_figure(board: Mapping[str, Any], prometheus: str, window: tuple[float, float],
                 step: float, timeout: float) -> tuple[Any, dict[str, Any]]:
    """The board drawn on a matplotlib figure, and what was drawn and what failed."""
    import matplotlib

    matplotlib.use("Agg")  # files only; never a display
    import matplotlib.pyplot as plt
    from matplotlib.gridspec import GridSpec

    items = list(board["panels"])
    items += [child for p in board["panels"] for child in p.get("panels", [])]
    height = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in items)
    fig = plt.figure(figsize=(FIGURE_WIDTH_INCHES, max(4.0, height * ROW_INCHES)))
    grid = GridSpec(height, GRID_COLUMNS, figure=fig, hspace=0.0, wspace=1.2, top=0.97,
                    bottom=0.03, left=0.04, right=0.99)
    summary: dict[str, Any] = {"board": board["uid"], "panels": 0, "empty": [], "failed": []}
    for panel in items:
        pos = panel["gridPos"]
        ax = fig.add_subplot(grid[pos["y"]:pos["y"] + pos["h"], pos["x"]:pos["x"] + pos["w"]])
        if panel["type"] == "row":
            _draw_row(ax, panel)
            continue
        _inset(ax, fig, top=TITLE_INCHES,
               bottom=AXIS_LABELS_INCHES if panel["type"] in ("timeseries", "heatmap")
               else 0.0)
        summary["panels"] += 1
        if panel["type"] == "text":
            _draw_text(ax, panel)
            continue
        series, failed = panel_series(panel, prometheus, window, step, timeout,
                                      defaults(board))
        summary["failed"] += [f"{panel['title']} {f}" for f in failed]
        if not series:
            summary["empty"].append(panel["title"])
        if panel["type"] == "stat":
            _draw_stat(ax, panel, series)
        elif panel["type"] == "heatmap":
            _draw_heatmap(fig, ax, panel, series, window)
        else:
            _draw_timeseries(ax, panel, series, window)
    span = format_duration(max(1, int(window[1] - window[0])))
    fig.suptitle(f"{board['title']} — last {span} from {prometheus}", fontsize=14, y=0.995)
    return fig, summary


def _inset(ax: Any, fig: Any, *, top: float, bottom: float) -> None:
    """Shrink the axes inside its cells by ``top`` and ``bottom`` inches."""
    box = ax.get_position()
    figure_inches = fig.get_size_inches()[1]
    low, high = box.y0 + bottom / figure_inches, box.y1 - top / figure_inches
    if high > low:
        ax.set_position([box.x0, low, box.width, high - low])


def _draw_row(ax: Any, panel: Mapping[str, Any]) -> None:
    ax.axis("off")
    ax.text(0.0, 0.5, panel.get("title", ""), fontsize=13, fontweight="bold",
            va="center", transform=ax.transAxes)


def _draw_text(ax: Any, panel: Mapping[str, Any]) -> None:
    ax.axis("off")
    content = panel.get("options", {}).get("content", "")
    lines = [line.replace("**", "") for line in content.splitlines() if line.strip()][:12]
    ax.text(0.0, 1.0, "\n".join(lines), fontsize=8, va="top", family="monospace",
            transform=ax.transAxes)
    ax.set_title(panel.get("title", ""), loc="left", fontsize=10)


def names_shown(panel: Mapping[str, Any], series: Sequence[Series]) -> list[str] | None:
    """What a stat of ``textMode: name`` shows (each series' legend, as Grafana does), or None
    for a stat that shows its value."""
    if panel.get("options", {}).get("textMode") != "name":
        return None
    return [s.name for s in series if s.values][:MAX_SERIES]


def values_shown(series: Sequence[Series]) -> list[tuple[str, float]]:
    """(legend, latest value) of each series a value stat shows: Grafana draws a value per
    series, each named by its legend when there are several (one per GPU, one per profile)."""
    return [(s.name, s.values[-1]) for s in series
            if s.values and math.isfinite(s.values[-1])][:MAX_SERIES]


def _draw_stat(ax: Any, panel: Mapping[str, Any], series: list[Series]) -> None:
    ax.axis("off")
    ax.set_title(panel.get("title", ""), loc="left", fontsize=10)
    shown = values_shown(series)
    if not shown:
        ax.text(0.5, 0.45, "no data", ha="center", va="center", fontsize=14, color="grey",
                transform=ax.transAxes)
        return
    names = names_shown(panel, series)
    if names is not None:
        ax.text(0.5, 0.45, "\n".join(names), ha="center", va="center", fontsize=11,
                color="green", fontweight="bold", transform=ax.transAxes)
        return
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
    worst = max(value for _, value in shown)
    factor, label = scale_for(unit, [value for _, value in shown])
    colour = "green"
    for limit, name in thresholds(panel):
        if worst >= limit:
            colour = _colour(name)
    if len(shown) == 1:
        text, size = f"{_number(shown[0][1] * factor)}{label}", 22
    else:
        text = "\n".join(f"{name}: {_number(value * factor)}{label}" for name, value in shown)
        size = 11
    ax.text(0.5, 0.45, text, ha="center", va="center", fontsize=size, color=colour,
            fontweight="bold", transform=ax.transAxes)


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def _draw_timeseries(ax: Any, panel: Mapping[str, Any], series: list[Series],
                     window: tuple[float, float]) -> None:
    ax.set_title(panel.get("title", ""), loc="left", fontsize=10)
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
    factor, label = scale_for(unit, [v for s in series for v in s.values])
    start = window[0]
    shown = series[:MAX_SERIES]
    if stacked(panel) and shown:
        times, rows = stack(shown)
        ax.stackplot([(t - start) / 60 for t in times], [[v * factor for v in row] for row in rows],
                     labels=[s.name or "value" for s in shown], alpha=0.8)
    else:
        for s in shown:
            ax.plot([(t - start) / 60 for t in s.times], [v * factor for v in s.values],
                    linewidth=1.0, label=s.name or "value")
    for limit, name in thresholds(panel):
        ax.axhline(limit * factor, color=_colour(name), linestyle="--", linewidth=1.0)
    if not series:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", color="grey",
                transform=ax.transAxes)
    elif len(series) <= MAX_SERIES:
        ax.legend(fontsize=7, loc="upper left")
    else:
        ax.legend(fontsize=7, loc="upper left",
                  title=f"{len(series) - MAX_SERIES} more not shown", title_fontsize=7)
    ax.set_ylabel(label, fontsize=8)
    ax.set_xlabel("minutes", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.set_xlim(0, (window[1] - window[0]) / 60)


HEATMAP_LABELS = 8  # row names on a heat map's axis at most; the rest go unnamed
COLOR_SCALE_SHARE = 0.1  # of a heat map panel's width: its colour scale and the scale's labels
ROW_NAME_FITS = 8  # characters of a row name that fit left of the axes, as tick labels do
ROW_NAME_INCHES = 0.05  # per character at the row names' 6 points


def _draw_heatmap(fig: Any, ax: Any, panel: Mapping[str, Any], series: list[Series],
                  window: tuple[float, float]) -> None:
    """Rows (buckets, or one per GPU) against time, darker where the value is higher."""
    from matplotlib.colors import Normalize, PowerNorm

    ax.set_title(panel.get("title", ""), loc="left", fontsize=10)
    ax.set_xlabel("minutes", fontsize=8)
    ax.tick_params(labelsize=7)
    span = (window[1] - window[0]) / 60
    options = panel.get("options", {})
    color = options.get("color", {})
    if not series:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", color="grey",
                transform=ax.transAxes)
        ax.set_xlim(0, span)
        return
    buckets = bucket_rows(panel)
    times, names, cells = heatmap_cells(series, buckets)
    low = color.get("min", 0.0)
    high = color.get("max", max((v for row in cells for v in row), default=0.0) or 1.0)
    norm = (PowerNorm(color.get("exponent", 0.5), low, high)
            if color.get("scale") == "exponential" else Normalize(low, high))
    first, last = (times[0] - window[0]) / 60, (times[-1] - window[0]) / 60
    image = ax.imshow(cells, aspect="auto", origin="lower", interpolation="nearest",
                      cmap=color.get("scheme", "Oranges"), norm=norm,
                      extent=(first, max(last, first + 1e-9), 0, len(cells)))
    unit = options.get("yAxis", {}).get("unit", "")
    factor, label = scale_for(unit, [_edge(n) for n in names if math.isfinite(_edge(n))])
    shown = [(row, name) for row, name in enumerate(names)
             if row % max(1, math.ceil(len(names) / HEATMAP_LABELS)) == 0]
    names_shown = [f"≤ {_number(_edge(n) * factor)}{label}" if buckets and
                   math.isfinite(_edge(n)) else n for _, n in shown]
    ax.set_yticks([row + 0.5 for row, _ in shown])
    ax.set_yticklabels(names_shown, fontsize=6)
    ax.set_xlim(0, span)
    _make_room(fig, ax, max(len(n) for n in names_shown))
    box = ax.get_position()
    ax.set_position([box.x0, box.y0, box.width * (1 - COLOR_SCALE_SHARE), box.height])
    scale = fig.add_axes([box.x0 + box.width * (1 - COLOR_SCALE_SHARE / 2), box.y0,
                          box.width * COLOR_SCALE_SHARE / 4, box.height])
    bar = fig.colorbar(image, cax=scale)
    bar.ax.yaxis.set_ticks_position("left")  # between the map and the bar, not over the next
    bar.ax.tick_params(labelsize=6)


def _make_room(fig: Any, ax: Any, characters: int) -> None:
    """Move a heat map's left edge right for row names longer than a time series' tick labels
    (``GPU 0 10.0.0.7:9400``), so they stay inside the panel's cells; the colour scale, its labels
    on its left, fits in the last :data:`COLOR_SCALE_SHARE` of the width. colorbar(ax=…) would
    take that room by resetting the axes to the whole cell, over the title and the tick labels."""
    box = ax.get_position()
    wanted = max(0, characters - ROW_NAME_FITS) * ROW_NAME_INCHES / fig.get_size_inches()[0]
    room = min(box.width * 0.3, wanted)
    ax.set_position([box.x0 + room, box.y0, box.width - room, box.height])


# ---- command line ------------------------------------------------------------------------------

def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="governor preview", description=__doc__.split("\n\n")[0],
                          env_prefix="GOVERNOR_PREVIEW_")
    p.add_argument("--prometheus", default=PROMETHEUS.url(LOCAL_HOST), help="Prometheus URL")
    p.add_argument("--slo", type=Path, default=Path("slo.yaml"), help="the SLO spec")
    p.add_argument("--range", type=parse_duration_seconds, default=1800.0, dest="range_seconds",
                   metavar="DURATION", help="how far back to draw (default 30m)")
    p.add_argument("--board", action="append", default=None, metavar="UID",
                   help="only this board (repeatable; default: all four)")
    p.add_argument("--out", type=Path, default=Path(".run/preview"), help="where the PNGs go")
    p.add_argument("--timeout", type=parse_duration_seconds, default=10.0,
                   help="how long to wait for each query")
    return p


def board_line(path: Path, summary: Mapping[str, Any]) -> str:
    """What one board's drawing came to, naming each panel that had no data.

    >>> board_line(Path("slo.png"), {"panels": 12, "empty": ["Preemptions"]})
    "slo.png: 12 panels, 1 without data: 'Preemptions'"
    """
    empty = summary["empty"]
    names = ", ".join(repr(title) for title in empty)
    return f"{path}: {summary['panels']} panels" + (
        f", {len(empty)} without data: {names}" if empty else "")


def _unreachable(prometheus: str, timeout: float) -> str | None:
    """Why Prometheus cannot answer a query at all, or ``None`` when it can."""
    try:
        now = time.time()
        PrometheusHTTP(prometheus, timeout_seconds=timeout).range("vector(1)", now - 60, now, 60)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return str(getattr(exc, "reason", exc))
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if importlib.util.find_spec("matplotlib") is None:
        print(f"governor preview: drawing needs matplotlib ({install_hint('bench')})",
              file=sys.stderr)
        return 2
    try:
        spec = load_checked_spec(args.slo)
    except SpecError as exc:
        print(f"governor preview: {exc}", file=sys.stderr)
        return 2
    boards = boards_of(render_all(spec))
    wanted = args.board or sorted(boards)
    unknown = sorted(set(wanted) - set(boards))
    if unknown:
        print(f"governor preview: no board {', '.join(unknown)}; boards: "
              f"{', '.join(sorted(boards))}", file=sys.stderr)
        return 2
    prometheus = args.prometheus.rstrip("/")
    unreachable = _unreachable(prometheus, args.timeout)
    if unreachable is not None:
        # Every panel would fail the same way: say so once instead of drawing empty boards.
        print(f"governor preview: cannot query Prometheus ({unreachable}): is Prometheus at "
              f"{prometheus}?", file=sys.stderr)
        return 1
    end = time.time()
    window = (end - args.range_seconds, end)
    step = max(1.0, args.range_seconds / POINTS)
    failures = 0
    for uid in wanted:
        path = args.out / f"{uid}.png"
        summary = draw_board(boards[uid], prometheus, window, step, args.timeout, path)
        failures += len(summary["failed"])
        print(board_line(path, summary), flush=True)
        for failure in summary["failed"][:5]:
            print(f"  failed: {failure}", file=sys.stderr)
    if failures:
        print(f"governor preview: {failures} queries failed (is Prometheus at {prometheus}?)",
              file=sys.stderr)
        return 1
    return 0
