"""Each GPU state on a live stack: the simulated GPUs are driven into WARN and CRITICAL through the
faults a drill sets, the real Prometheus records the state from the generated rules, and
``governor status`` shows it.

The inference service runs the sim engine on fake GPU 0, the exporter follows it (GPU 1 stays
idle), Prometheus scrapes both every second. The spec's GPU-health windows are the shortest the
spec allows (a minute), so the test takes a little over a minute: a leak can only be told from
an engine's start once its process is a window old.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from governor.alerts.prometheus_config import prometheus_args
from governor.alerts.render import PROMETHEUS_CONFIG
from governor.alerts.render import render_all as render_alerts
from governor.alerts.render import write_all as write_alerts
from governor.common.process import Child, running
from governor.common.secrets import Secret
from governor.contracts.metrics import gpu_health as h
from governor.contracts.simdevice import FAULTS_PATH
from governor.generation.catalog import load_checked_spec
from governor.generation.params import Endpoints, RenderParams
from governor.status import main as status_main
from tests.alerts.stack import LOOPBACK, free_port, logs
from tests.dashboards.boards import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]

T = TypeVar("T")
ADMIN_TOKEN = Secret("gpu-health-live-admin")
WINDOW_SECONDS = 60
DEADLINE_SECONDS = WINDOW_SECONDS + 60
# Two leaked contexts beside the engine, and the engine's memory growing 32 MiB a second.
WARN_FAULTS = {"stray_processes": 2, "leak_bytes_per_second": 32 * 2**20}
CRITICAL_FAULTS = {"xid": 79, "ecc_uncorrected_per_xid": 1}


def _spec(tmp: Path) -> Path:
    data = yaml.safe_load((ROOT / "slo.yaml").read_text(encoding="utf-8"))
    data["alerting"] = {**data.get("alerting", {}), "gpu_health": {
        "max_processes": 1, "processes_for": "1m", "idle_growth": "64Mi", "idle_window": "1m"}}
    path = tmp / "slo.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


class Stack:
    def __init__(self, prometheus: str, inference: str, children: list[Child]) -> None:
        self.prometheus, self.inference, self.children = prometheus, inference, children

    def query(self, expr: str) -> list[Any]:
        url = f"{self.prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as response:
            result: list[Any] = json.load(response)["data"]["result"]
        return result

    def states(self) -> dict[str, float]:
        return {s["metric"]["gpu"]: float(s["value"][1]) for s in self.query(h.STATE.name)}

    def reasons(self, gpu: str) -> dict[str, float]:
        return {s["metric"]["reason"]: float(s["value"][1])
                for s in self.query(f'{h.REASON.name}{{gpu="{gpu}"}} > 0')}

    def set_faults(self, faults: dict[str, Any]) -> None:
        request = urllib.request.Request(
            f"{self.inference}{FAULTS_PATH}", data=json.dumps(faults).encode(), method="PUT",
            headers={"Authorization": f"Bearer {ADMIN_TOKEN.reveal()}",
                     "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("gpu-health-live")
    (workdir / "admin_token").write_text(ADMIN_TOKEN.reveal() + "\n", encoding="utf-8")
    ports = {name: free_port() for name in ("inference", "exporter", "prometheus")}
    spec = load_checked_spec(_spec(workdir))
    urls = {name: f"http://{LOOPBACK}:{port}" for name, port in ports.items()}
    endpoints = Endpoints((f"{LOOPBACK}:{ports['inference']}",),
                          (f"{LOOPBACK}:{ports['exporter']}",), (f"{LOOPBACK}:1",),
                          (f"{LOOPBACK}:1",))
    params = RenderParams(scrape_interval_seconds=1, evaluation_interval_seconds=1,
                          fast_window_seconds=5, fast_for_seconds=2,
                          controller_token_file=str(workdir / "admin_token"))
    deploy = workdir / "deploy"
    write_alerts(render_alerts(spec, endpoints, params), deploy)
    children = [
        Child("inference", [sys.executable, "-m", "governor", "serve", "--engine", "sim",
                            "--preset", "tiny", "--host", LOOPBACK,
                            "--port", str(ports["inference"]),
                            "--admin-token-file", str(workdir / "admin_token")],
              urls["inference"] + "/health", workdir / "inference.log"),
        Child("exporter", [sys.executable, "-m", "governor", "exporter", "--fake-gpus", "2",
                           "--follow", urls["inference"], "--host", LOOPBACK,
                           "--port", str(ports["exporter"])],
              urls["exporter"] + "/health", workdir / "exporter.log"),
        Child("prometheus", ["prometheus", *prometheus_args(
            spec, params, config_file=str(deploy / PROMETHEUS_CONFIG),
            storage_path=str(workdir / "prometheus-data"),
            listen_address=f"{LOOPBACK}:{ports['prometheus']}")],
              urls["prometheus"] + "/-/ready", workdir / "prometheus.log"),
    ]
    with running(children, limit_seconds=60):
        yield Stack(urls["prometheus"], urls["inference"], children)


def _until(read: Callable[[], T], want: T, seconds: float) -> T:
    deadline = time.monotonic() + seconds
    seen = read()
    while seen != want and time.monotonic() < deadline:
        time.sleep(1)
        seen = read()
    return seen


def test_a_gpu_goes_healthy_warn_critical_and_status_says_so(
    stack: Stack, capsys: pytest.CaptureFixture[str],
) -> None:
    healthy = {"0": float(h.HEALTHY), "1": float(h.HEALTHY)}
    assert _until(stack.states, healthy, 30) == healthy, logs(stack.children)
    stack.set_faults(WARN_FAULTS)
    both = {h.REASON_PROCESSES: 1.0, h.REASON_IDLE_GROWTH: 1.0}
    assert _until(lambda: stack.reasons("0"), both, DEADLINE_SECONDS) == both, \
        logs(stack.children)
    assert stack.states() == {"0": float(h.WARN), "1": float(h.HEALTHY)}
    assert stack.reasons("1") == {}

    assert status_main(["--prometheus", stack.prometheus, "--alertmanager", f"http://{LOOPBACK}:1",
                        "--controller", f"http://{LOOPBACK}:1", "--json",
                        "--timeout", "2s"]) == 1  # Alertmanager and the controller: not here
    shown = json.loads(capsys.readouterr().out)["gpus"]
    assert [(g["gpu"], g["state"], sorted(g["reasons"])) for g in shown] == [
        ("0", "WARN", [h.REASON_IDLE_GROWTH, h.REASON_PROCESSES]), ("1", "HEALTHY", [])]
    assert shown[0]["runbook"].endswith("#gpu-state-warn")

    stack.set_faults(CRITICAL_FAULTS)
    critical = {"0": float(h.CRITICAL), "1": float(h.HEALTHY)}
    assert _until(stack.states, critical, 30) == critical, logs(stack.children)
    assert {h.REASON_XID, h.REASON_ECC} <= set(stack.reasons("0"))
