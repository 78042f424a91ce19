"""``governor preview``: every panel of the generated boards drawn from Prometheus's answers."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from governor.common.prometheus_api import QUERY_PATH, QUERY_RANGE_PATH
from governor.dashboards.readback import boards_of
from governor.dashboards.render import render_all
from governor.generation.catalog import load_checked_spec
from governor.preview import board_figure, main, scale_for, thresholds

ROOT = Path(__file__).resolve().parents[2]


class FakePrometheus(BaseHTTPRequestHandler):
    """Answers every range query with one ramp series and every instant query with one value
    at the time asked, and keeps the queries (``asked``: path and parameters of each)."""

    queries: list[str] = []
    asked: list[tuple[str, dict[str, str]]] = []

    def do_GET(self) -> None:
        from urllib.parse import parse_qs, urlsplit

        url = urlsplit(self.path)
        query = {key: values[0] for key, values in parse_qs(url.query).items()}
        FakePrometheus.queries.append(query["query"])
        FakePrometheus.asked.append((url.path, query))
        metric = {"instance": "a:8000", "gpu": "0"}
        if url.path == QUERY_PATH:
            data: dict[str, Any] = {"resultType": "vector", "result": [
                {"metric": metric, "value": [float(query.get("time", time.time())), "1"]}]}
        else:
            start, end = float(query["start"]), float(query["end"])
            values = [[start + i * (end - start) / 10, str(i / 10)] for i in range(11)]
            data = {"resultType": "matrix", "result": [{"metric": metric, "values": values}]}
        body = json.dumps({"status": "success", "data": data}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def prometheus() -> Iterator[str]:
    FakePrometheus.queries, FakePrometheus.asked = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakePrometheus)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_every_board_becomes_one_png_and_every_query_is_asked(
    prometheus: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--prometheus", prometheus, "--slo", str(ROOT / "slo.yaml"),
                 "--out", str(tmp_path), "--range", "10m"]) == 0
    assert sorted(p.name for p in tmp_path.glob("*.png")) == [
        "governor-controller.png", "governor-gpu.png", "governor-inference.png",
        "governor-slo.png"]
    # Grafana's variables never reach Prometheus.
    assert FakePrometheus.queries and not [q for q in FakePrometheus.queries if "$" in q]
    board = json.loads((ROOT / "deploy/grafana/dashboards/governor-slo.json").read_text())
    panels = board["panels"] + [child for p in board["panels"] for child in p.get("panels", [])]
    drawn = sum(1 for panel in panels if panel["type"] != "row")
    assert f"governor-slo.png: {drawn} panels" in capsys.readouterr().out


def test_one_board_can_be_asked_for(prometheus: str, tmp_path: Path) -> None:
    assert main(["--prometheus", prometheus, "--slo", str(ROOT / "slo.yaml"),
                 "--out", str(tmp_path), "--board", "governor-gpu"]) == 0
    assert [p.name for p in tmp_path.glob("*.png")] == ["governor-gpu.png"]


def test_an_unknown_board_is_a_clear_error(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--slo", str(ROOT / "slo.yaml"), "--out", str(tmp_path),
                 "--board", "nope"]) == 2
    assert "no board nope" in capsys.readouterr().err


def test_an_unreachable_prometheus_fails_with_what_to_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    started = time.monotonic()
    code = main(["--prometheus", "http://127.0.0.1:1", "--slo", str(ROOT / "slo.yaml"),
                 "--out", str(tmp_path), "--board", "governor-controller", "--timeout", "1s"])
    assert code == 1
    assert "is Prometheus at http://127.0.0.1:1?" in capsys.readouterr().err
    # One probe, not a board of failing panels: no PNG, and no wait for every panel's timeout.
    assert not list(tmp_path.glob("*.png"))
    assert time.monotonic() - started < 60


def test_a_bad_spec_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "slo.yaml"
    bad.write_text("version: governor/v1\n")
    assert main(["--slo", str(bad), "--out", str(tmp_path)]) == 2
    assert "slo.yaml" in capsys.readouterr().err


@pytest.mark.parametrize(("unit", "values", "expected"), [
    ("s", [0.05], (1000.0, "ms")), ("s", [2.0], (1.0, "s")), ("percentunit", [0.5], (100.0, "%")),
    ("bytes", [3 * 2**30], (1 / 2**30, "GiB")), ("watt", [300.0], (1.0, "W")),
    ("short", [5.0], (1.0, "")), ("reqps", [], (1.0, "req/s"))])
def test_units_read_like_grafana(unit: str, values: list[float],
                                 expected: tuple[float, str]) -> None:
    assert scale_for(unit, values) == expected


def test_thresholds_skip_the_base_step() -> None:
    panel = {"fieldConfig": {"defaults": {"thresholds": {"steps": [
        {"color": "text", "value": None}, {"color": "red", "value": 0.12}]}}}}
    assert thresholds(panel) == [(0.12, "red")]


def test_a_stacked_panel_is_drawn_stacked_on_one_time_axis() -> None:
    from governor.preview import Series, stack, stacked

    assert stacked({"fieldConfig": {"defaults": {"custom": {"stacking": {"mode": "normal"}}}}})
    assert not stacked({"fieldConfig": {"defaults": {"custom": {"stacking": {"mode": "none"}}}}})
    assert not stacked({"type": "text"})
    times, rows = stack([Series("read", [0.0, 10.0], [1.0, 2.0]),
                         Series("decode", [10.0, 20.0], [5.0, float("nan")])])
    # A stage without a value at a moment adds nothing to the stack there.
    assert times == [0.0, 10.0, 20.0]
    assert rows == [[1.0, 2.0, 0.0], [0.0, 5.0, 0.0]]


def test_the_panels_without_data_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    prometheus: str,
) -> None:
    from governor import preview

    asked = preview.panel_series

    def none_for_preemptions(panel: Any, *args: Any) -> Any:
        series, failed = asked(panel, *args)
        return ([], failed) if panel["title"] == "Preemptions" else (series, failed)

    monkeypatch.setattr(preview, "panel_series", none_for_preemptions)
    assert main(["--prometheus", prometheus, "--slo", str(ROOT / "slo.yaml"),
                 "--out", str(tmp_path), "--board", "governor-inference"]) == 0
    assert ", 1 without data: 'Preemptions'\n" in capsys.readouterr().out


@pytest.mark.parametrize("uid", ["governor-inference", "governor-gpu"])
def test_no_panel_title_overlaps_the_axis_labels_of_the_panel_above(
        prometheus: str, uid: str) -> None:
    import matplotlib.pyplot as plt

    board = boards_of(render_all(load_checked_spec(ROOT / "slo.yaml")))[uid]
    end = time.time()
    fig, _ = board_figure(board, prometheus, (end - 600, end), 60.0, 5.0)
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        titled = [ax for ax in fig.axes if ax.get_title(loc="left")]
        labelled = [ax for ax in fig.axes if ax.get_xlabel()]
        assert titled and labelled
        for above in labelled:
            below = above.xaxis.get_tightbbox(renderer)
            for ax in titled:
                if ax is not above:
                    title = ax._left_title  # set_title(loc="left") draws this one
                    assert not title.get_window_extent(renderer).overlaps(below), (
                        ax.get_title(loc="left"), above.get_title(loc="left"))
    finally:
        plt.close(fig)


def test_a_heat_map_of_buckets_counts_each_bucket_lowest_at_the_bottom() -> None:
    from governor.preview import Series, heatmap_cells

    # Cumulative buckets as Prometheus answers them, in no particular order.
    answered = [Series("+Inf", [0.0, 60.0], [10.0, 4.0]),
                Series("0.1", [0.0, 60.0], [2.0, 4.0]),
                Series("0.5", [0.0, 60.0], [9.0, 4.0])]
    times, names, cells = heatmap_cells(answered, buckets=True)
    assert times == [0.0, 60.0]
    assert names == ["0.1", "0.5", "+Inf"]
    assert cells == [[2.0, 4.0], [7.0, 0.0], [1.0, 0.0]]


def test_a_heat_map_of_gpus_keeps_one_row_per_gpu_as_it_reads() -> None:
    from governor.preview import Series, heatmap_cells

    _, names, cells = heatmap_cells([Series("GPU 1", [0.0], [0.9]),
                                     Series("GPU 0", [0.0], [0.2])], buckets=False)
    assert names == ["GPU 0", "GPU 1"]
    assert cells == [[0.2], [0.9]]


@pytest.mark.parametrize("uid", ["governor-inference", "governor-gpu"])
def test_every_heat_map_panel_is_drawn_as_an_image(prometheus: str, uid: str) -> None:
    import matplotlib.pyplot as plt

    board = boards_of(render_all(load_checked_spec(ROOT / "slo.yaml")))[uid]
    heatmaps = {p["title"] for p in board["panels"] if p["type"] == "heatmap"}
    end = time.time()
    fig, summary = board_figure(board, prometheus, (end - 600, end), 60.0, 5.0)
    try:
        imaged = {ax.get_title(loc="left") for ax in fig.axes if ax.images}
        assert heatmaps and imaged == heatmaps
        assert summary["failed"] == []
    finally:
        plt.close(fig)


def test_a_heat_maps_colour_scale_stays_inside_its_panel(prometheus: str) -> None:
    import matplotlib.pyplot as plt

    board = boards_of(render_all(load_checked_spec(ROOT / "slo.yaml")))["governor-gpu"]
    end = time.time()
    fig, _ = board_figure(board, prometheus, (end - 600, end), 60.0, 5.0)
    try:
        fig.canvas.draw()
        heatmaps = [ax for ax in fig.axes if ax.images]
        scales = [ax for ax in fig.axes if not ax.get_title(loc="left") and ax.get_ylabel() == ""
                  and ax not in heatmaps and ax.collections]
        assert len(heatmaps) == 2 and len(scales) == 2
        for ax, scale in zip(heatmaps, scales, strict=True):
            plot, bar = ax.get_position(), scale.get_position()
            # Beside the heat map, as tall as it: the title above and the labels below stay
            # clear (the overlap test above checks those).
            assert bar.x0 > plot.x1 and (bar.y0, bar.y1) == (plot.y0, plot.y1)
    finally:
        plt.close(fig)


def test_an_instant_target_is_asked_once_at_the_end_of_the_range_as_grafana_asks_it(
        prometheus: str) -> None:
    """A stat of ``topk by (instance) (1, vllm:lora_requests_info)`` (the LoRA adapters panel)
    shows one state per server in Grafana; asked over a range, each state that won at some step
    came back, and the preview drew the adapters both running and not."""
    from governor.preview import panel_series

    panel = {"type": "stat", "targets": [
        {"refId": "A", "expr": "topk by (instance) (1, up)", "instant": True},
        {"refId": "B", "expr": "up"}]}
    series, failed = panel_series(panel, prometheus, (1000.0, 1300.0), 30.0, 5.0)
    assert failed == []
    (instant, over_range) = FakePrometheus.asked
    assert instant == (QUERY_PATH, {"query": "topk by (instance) (1, up)", "time": "1300.0"})
    assert over_range[0] == QUERY_RANGE_PATH
    at_end, ramp = series
    assert (at_end.times, at_end.values) == ([1300.0], [1.0])
    assert len(ramp.times) == 11


def test_a_stat_that_shows_names_draws_each_series_legend_not_its_value() -> None:
    """Grafana's ``textMode: name`` (the Versions and Driver panels): the legend is the data."""
    from governor.preview import Series, names_shown

    series = [Series("a: vLLM 0.32.0", [1.0], [1.0]), Series("b: vLLM 0.34.0", [1.0], [1.0]),
              Series("gone", [], [])]
    assert names_shown({"options": {"textMode": "name"}}, series) == [
        "a: vLLM 0.32.0", "b: vLLM 0.34.0"]
    assert names_shown({"options": {"textMode": "auto"}}, series) is None
    assert names_shown({}, series) is None


def test_a_value_stat_of_several_series_draws_each_named_by_its_legend() -> None:
    """One value per GPU (GPU state) or per profile (MIG instances), as Grafana shows them; the
    colour is the worst value's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from governor.preview import Series, _draw_stat, values_shown

    series = [Series("3g.71gb", [1.0], [1.0]), Series("1g.18gb", [1.0, 2.0], [3.0, 2.0]),
              Series("gone", [], []), Series("nan", [1.0], [float("nan")])]
    assert values_shown(series) == [("3g.71gb", 1.0), ("1g.18gb", 2.0)]
    panel = {"title": "MIG instances", "fieldConfig": {"defaults": {"unit": "short",
             "thresholds": {"steps": [{"value": None, "color": "green"},
                                      {"value": 2, "color": "red"}]}}}}
    fig, ax = plt.subplots()
    try:
        _draw_stat(ax, panel, series)
        (text,) = ax.texts
        assert text.get_text() == "3g.71gb: 1\n1g.18gb: 2"
        assert text.get_color() == "red"
        ax.clear()
        _draw_stat(ax, panel, series[:1])
        assert [t.get_text() for t in ax.texts] == ["1"]
    finally:
        plt.close(fig)
