"""The probe on a live stack: ``governor serve --engine sim``, ``governor probe`` and the real
Prometheus scraping both with the rules generated from a spec whose ``probe-success`` SLO reads
the probe's series. The probe SLI's recording rules get data, and the service's own request and
latency series count none of the probe's requests (its ``governor_probe_requests_served_total``
counts them instead). About 25 s on a busy two-core machine: three processes start, then a 1 s
scrape and rule evaluation need a few probes (one every 2 s) before a 5 m rate has two points."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from governor.alerts.prometheus_config import prometheus_args
from governor.alerts.render import PROMETHEUS_CONFIG
from governor.alerts.render import render_all as render_alerts
from governor.alerts.render import write_all as write_alerts
from governor.common.commands import Probe, Serve
from governor.common.process import Child, running
from governor.contracts.endpoints import JOB_INFERENCE, JOB_PROBE
from governor.contracts.metrics import probe as p
from governor.contracts.metrics import service as svc
from governor.contracts.metrics import slo as n
from governor.generation.catalog import load_checked_spec
from governor.generation.params import Endpoints, RenderParams
from tests.alerts.cases import ROOT
from tests.alerts.stack import LOOPBACK, free_port, logs

pytestmark = [pytest.mark.integration]

DEADLINE_SECONDS = 60.0


def query(prometheus: str, expr: str) -> list[Any]:
    url = f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as response:
        answer = json.load(response)
    assert answer["status"] == "success", answer
    result: list[Any] = answer["data"]["result"]
    return result


def value(prometheus: str, expr: str) -> float | None:
    result = query(prometheus, expr)
    return float(result[0]["value"][1]) if result else None


def test_the_probe_slis_rules_have_data_and_the_service_counts_none_of_its_requests(
        tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "slo.yaml").read_text(encoding="utf-8"))
    data["probe"] = {"interval": "2s", "timeout": "1.5s", "max_tokens": 4}
    spec_path = tmp_path / "slo.yaml"
    spec_path.write_text(yaml.safe_dump(data), encoding="utf-8")
    spec = load_checked_spec(spec_path)
    (tmp_path / "admin_token").write_text("probe-live-admin\n", encoding="utf-8")
    probe_token = tmp_path / "probe_token"
    probe_token.write_text("probe-live-mark\n", encoding="utf-8")
    ports = {name: free_port() for name in ("inference", "probe", "prometheus", "nobody")}
    urls = {name: f"http://{LOOPBACK}:{port}" for name, port in ports.items()}
    endpoints = Endpoints(inference=(f"{LOOPBACK}:{ports['inference']}",), exporter=(),
                          controller=(f"{LOOPBACK}:{ports['nobody']}",),
                          alertmanager=(f"{LOOPBACK}:{ports['nobody']}",),
                          probe=(f"{LOOPBACK}:{ports['probe']}",))
    params = RenderParams(scrape_interval_seconds=1, evaluation_interval_seconds=1,
                          controller_token_file=str(tmp_path / "admin_token"))
    write_alerts(render_alerts(spec, endpoints, params), tmp_path / "deploy")
    children = [
        Child("inference", Serve(engine="sim", preset="tiny", host=LOOPBACK,
                                 port=ports["inference"], slo=str(spec_path),
                                 admin_token_file=str(tmp_path / "admin_token"),
                                 probe_token_file=str(probe_token)).python(),
              urls["inference"] + "/health", tmp_path / "inference.log"),
        Child("probe", [*Probe(slo=str(spec_path), target=(f"inference={urls['inference']}",),
                               probe_token_file=str(probe_token), host=LOOPBACK,
                               port=ports["probe"]).python()],
              urls["probe"] + "/health", tmp_path / "probe.log"),
        Child("prometheus", ["prometheus", *prometheus_args(
            spec, params, config_file=str(tmp_path / "deploy" / PROMETHEUS_CONFIG),
            storage_path=str(tmp_path / "prometheus-data"),
            listen_address=f"{LOOPBACK}:{ports['prometheus']}")],
              urls["prometheus"] + "/-/ready", tmp_path / "prometheus.log"),
    ]
    prometheus = urls["prometheus"]
    slo = f'{{{n.LABEL_SLO}="probe-success"}}'
    events = f"{n.SLI_EVENTS_RATE.at(300).name}{slo}"
    with running(children, limit_seconds=60):
        deadline = time.monotonic() + DEADLINE_SECONDS
        while time.monotonic() < deadline and not (value(prometheus, events) or 0) > 0:
            time.sleep(1)
        assert (value(prometheus, events) or 0) > 0, logs(children)
        # Every probe succeeded: its SLI's error ratio is 0, its TTFT and ITL were observed.
        assert value(prometheus, f"{n.SLI_ERROR_RATIO.at(300).name}{slo}") == 0.0
        on_probe = f'{{job="{JOB_PROBE}"}}'
        assert (value(prometheus, f"sum({p.TIME_TO_FIRST_TOKEN.count}{on_probe})") or 0) > 0
        assert (value(prometheus, f"sum({p.INTER_TOKEN_LATENCY.count}{on_probe})") or 0) > 0
        # The service served them, and counted them only apart.
        on_service = f'{{job="{JOB_INFERENCE}"}}'
        served = value(prometheus, f"sum({svc.PROBE_REQUESTS_SERVED.total}{on_service})")
        assert served is not None and served > 0, logs(children)
        rejected = value(prometheus, f"sum({svc.PROBE_MARK_REJECTED.total}{on_service})")
        assert rejected == 0.0, logs(children)  # the probe's token is the service's
        for series in (svc.REQUESTS.total, svc.TIME_TO_FIRST_TOKEN.count,
                       svc.INTER_TOKEN_LATENCY.count, svc.REQUEST_DURATION.count):
            generation = f'{{job="{JOB_INFERENCE}", route!~"/metrics|/health"}}' \
                if series in (svc.REQUESTS.total, svc.REQUEST_DURATION.count) else on_service
            assert value(prometheus, f"sum({series}{generation})") in (None, 0.0), series
        # The availability SLI, which reads the service's counter, saw no event at all.
        assert value(prometheus, f'{n.SLI_EVENTS_RATE.at(300).name}{{slo="availability"}}') \
            in (None, 0.0)
