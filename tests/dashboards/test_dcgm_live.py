"""The GPU board and health rules of a dcgm-exporter spec against a live Prometheus scraping the
pinned expositions of dcgm-exporter 4.8, 4.9 and 4.10 (tests/data/dcgm/).

Each sample is served as an exporter of the spec's GPU job, so one Prometheus holds a fleet half
upgraded. Every query of the GPU board, run for one exporter at a time (``$instance`` set to it),
must return data, and the same value from each release: the same two H200s, read in MHz,
percent and MiB by one and in hertz, ratios and bytes by the others. The generated rules must
evaluate without error, and the XID the samples carry must raise its alert on every release.
"""

from __future__ import annotations

import json
import math
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from governor.alerts.prometheus_config import prometheus_args
from governor.alerts.render import PROMETHEUS_CONFIG
from governor.alerts.render import render_all as render_alerts
from governor.alerts.render import write_all as write_alerts
from governor.common.process import Child, running
from governor.contracts.endpoints import METRICS_PATH
from governor.contracts.metrics import dcgm, gpu
from governor.contracts.metrics.scrape import LABEL_INSTANCE
from governor.dashboards.readback import PanelQuery, boards_of, expand, queries
from governor.dashboards.render import render_all
from governor.generation.catalog import load_checked_spec
from governor.generation.params import Endpoints, RenderParams
from tests.alerts.stack import LOOPBACK, free_port, logs
from tests.contracts.test_dcgm import SAMPLES
from tests.dashboards.boards import CASES

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SPEC = CASES["dcgm"]
SCRAPE_SECONDS = 1
RATE_INTERVAL = "10s"
DEADLINE_SECONDS = 60.0
# Readings that differ between releases by how they are made, not by what they say.
TOLERANCE = {"Memory used": 0.01}  # 4.8's total is used + free in whole MiB: 0.4% under
PROMETHEUS_OWN = {"Scrape duration", "Samples per scrape"}  # each exporter's own
PER_HOST = ("GPUs answering", "XID errors", "Driver and CUDA")  # not one series per GPU
# Panels whose fields the pinned samples cannot carry, and why.
NOT_IN_SAMPLES = {
    "NVLink traffic": "the NVLink rows are opt-in and the sampled H200s ran with the default "
                      "collectors (and no NVLink peer)",
    "MIG instances": "the sampled H200s ran without MIG mode",
    "MIG memory": "the sampled H200s ran without MIG mode",
}
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _Exposition(BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        if self.path != METRICS_PATH:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: Any) -> None:  # the scrapes are not news
        return


def serve(sample: Path) -> ThreadingHTTPServer:
    handler = type("Sample", (_Exposition,), {"body": sample.read_bytes()})
    server = ThreadingHTTPServer((LOOPBACK, free_port()), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@dataclass
class Fleet:
    prometheus: str
    exporters: dict[str, str]  # release → its address
    processes: list[Child]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    workdir = tmp_path_factory.mktemp("dcgm-live")
    servers = {release: serve(sample) for release, sample in SAMPLES.items()}
    exporters = {release: f"{LOOPBACK}:{server.server_address[1]}"
                 for release, server in servers.items()}
    spec = load_checked_spec(SPEC)
    port = free_port()
    closed = f"{LOOPBACK}:{free_port()}"  # the controller and Alertmanager are not part of this
    endpoints = Endpoints(inference=(), exporter=tuple(exporters.values()), controller=(closed,),
                          alertmanager=(closed,))
    params = RenderParams(scrape_interval_seconds=SCRAPE_SECONDS, evaluation_interval_seconds=1)
    deploy = workdir / "deploy"
    write_alerts(render_alerts(spec, endpoints, params), deploy)
    prometheus = Child("prometheus", ["prometheus", *prometheus_args(
        spec, params, config_file=str(deploy / PROMETHEUS_CONFIG),
        storage_path=str(workdir / "data"), listen_address=f"{LOOPBACK}:{port}")],
        f"http://{LOOPBACK}:{port}/-/ready", workdir / "prometheus.log")
    try:
        with running([prometheus], limit_seconds=60):
            yield Fleet(f"http://{LOOPBACK}:{port}", exporters, [prometheus])
    finally:
        for server in servers.values():
            server.shutdown()


def ask(fleet: Fleet, path: str, **params: str) -> Any:
    url = f"{fleet.prometheus}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def run(fleet: Fleet, query: PanelQuery, release: str) -> list[dict[str, Any]]:
    expr = expand(query.expr, rate_interval=RATE_INTERVAL, range_="1m",
                  variables={**query.variables, LABEL_INSTANCE: fleet.exporters[release]})
    answer = ask(fleet, "/api/v1/query", query=expr)
    assert answer["status"] == "success", (query.where, answer)
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def by_gpu(result: list[dict[str, Any]]) -> dict[str, float]:
    """Each GPU's value; "<gpu> <reason>" for the health reasons (one series per reason)."""
    values = {" ".join(filter(None, (series["metric"].get(dcgm.LABEL_GPU, ""),
                                     series["metric"].get(gpu.LABEL_REASON, "")))):
              float(series["value"][1]) for series in result}
    assert len(values) == len(result), f"more than one series per GPU: {result}"
    return values


def gpu_queries() -> list[PanelQuery]:
    board = boards_of(render_all(load_checked_spec(SPEC)))["governor-gpu"]
    return list(queries(board))


def answers(fleet: Fleet) -> dict[tuple[PanelQuery, str], list[dict[str, Any]]]:
    """Every query of the board for every release, once each has data (or the deadline)."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        found = {(q, release): run(fleet, q, release)
                 for q in gpu_queries() for release in fleet.exporters}
        if all(result or q.panel in NOT_IN_SAMPLES for (q, _), result in found.items()) \
                or time.monotonic() > deadline:
            return found
        time.sleep(2)


def test_every_panel_has_data_for_every_release_and_reads_the_same(fleet: Fleet) -> None:
    found = answers(fleet)
    empty = [f"{q.where} ({release})" for (q, release), result in found.items()
             if not result and q.panel not in NOT_IN_SAMPLES]
    assert empty == [], f"no data for {empty}\n{logs(fleet.processes)}"
    for query in gpu_queries():
        if query.panel in PROMETHEUS_OWN or query.panel in NOT_IN_SAMPLES:
            continue
        first, *rest = (by_gpu(found[query, release]) for release in dcgm.RELEASES)
        gpus = {key.split(" ")[0] for key in first}
        assert gpus == {"0", "1"} or query.panel in PER_HOST
        for release, other in zip(dcgm.RELEASES[1:], rest, strict=True):
            assert other.keys() == first.keys(), (query.where, release)
            for key, value in first.items():
                assert math.isclose(other[key], value, rel_tol=TOLERANCE.get(query.panel, 1e-6),
                                    abs_tol=1e-9), (query.where, release, key, value, other[key])


def test_the_panels_show_governors_units(fleet: Fleet) -> None:
    """GPU 0 at its matmul: 1.425 GHz, 100% busy, 93.4% tensor, 690 W, 1 GiB used."""
    expected = {("Clocks", "A"): 1.425e9, ("GPU utilization", "A"): 1.0,
                ("Tensor pipes active", "A"): 0.934021, ("Power", "A"): 690.064,
                ("Memory used", "A"): 1059913728.0, ("GPUs answering", "A"): 2.0}
    for query in gpu_queries():
        if (query.panel, query.ref_id) in expected:
            want = expected[query.panel, query.ref_id]
            for release in dcgm.RELEASES:
                got = by_gpu(run(fleet, query, release))
                value = got[""] if query.panel == "GPUs answering" else got["0"]
                assert math.isclose(value, want, rel_tol=1e-3), (query.where, release, value)


def test_the_rules_evaluate_and_the_samples_xid_raises_its_alert_on_every_release(
        fleet: Fleet) -> None:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        groups = ask(fleet, "/api/v1/rules")["data"]["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        alerts = ask(fleet, "/api/v1/query", query='ALERTS{alertstate="firing"}')["data"][
            "result"]
        xids = sorted((a["metric"][LABEL_INSTANCE], a["metric"]["gpu"], a["metric"]["xid"])
                      for a in alerts if a["metric"]["alertname"] == "GpuXidErrors")
        if len(xids) == len(dcgm.RELEASES) or time.monotonic() > deadline:
            break
        time.sleep(2)
    broken = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert broken == [], broken
    assert xids == sorted((address, "1", "31") for address in fleet.exporters.values())
    others = {a["metric"]["alertname"] for a in alerts} - {"GpuXidErrors", "GovernorTargetDown"}
    assert not {name for name in others if name.startswith("Gpu")}, others
