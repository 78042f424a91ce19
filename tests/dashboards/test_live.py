"""Every panel and annotation query against a live Prometheus fed by the real services.

The real ``prometheus`` binary scrapes the inference service on the sim engine, the GPU exporter
with fake GPUs and the controller, all started as subprocesses through ``python -m governor``,
and evaluates the generated recording rules. A demo load streams chats and documents, a burst
overflows the admission queue, an operator lowers the token budget through the admin API and
Alertmanager's webhook call reaches the controller. Each query (Grafana's variables expanded,
"All" selected) must then run without error and return data, except the ones listed in
:data:`NO_DATA_HERE` with the reason this setup cannot produce their series.
"""

from __future__ import annotations

import concurrent.futures
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from governor.alerts.prometheus_config import prometheus_args
from governor.alerts.render import PROMETHEUS_CONFIG
from governor.alerts.render import render_all as render_alerts
from governor.alerts.render import write_all as write_alerts
from governor.common.commands import Probe
from governor.common.process import Child, running
from governor.common.secrets import Secret
from governor.contracts.metrics import service as svc
from governor.contracts.metrics import verdict
from governor.dashboards.readback import PanelQuery, expand
from governor.dashboards.render import render_all
from governor.generation.catalog import load_checked_spec
from governor.generation.params import Endpoints, RenderParams
from governor.preview import main as preview_main
from tests.alerts.cases import TESTDATA
from tests.alerts.stack import LOOPBACK, free_port, logs
from tests.dashboards.boards import ROOT, all_queries

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# (board uid, panel title) → why the running stack cannot produce that panel's series.
# The "Why … burns" panels draw the verdict, which exists only while an SLO burns: they run,
# data or not (the drills show them with data).
WHY_PANELS = "Why "
NO_XID = {
    ("governor-gpu", "XID errors"): "fake GPUs raise no XID events, and the series of an XID "
                                    "code appears only with its first event",
}
# vLLM's optional features: the sim engine has neither (test_live_stock_vllm.py shows them with
# data from a real vllm serve that runs both).
NO_FEATURES = {
    ("governor-inference", "Speculative decoding acceptance"): "the engine drafts no tokens "
    "(the sim has no speculative decoding)",
    ("governor-inference", "Tokens per draft"): "the engine drafts no tokens",
    ("governor-inference", "LoRA adapters"): "the engine serves no LoRA adapter",
}
NO_DATA_HERE = NO_XID | NO_FEATURES
FLEET = TESTDATA / "fleet.yaml"
# The second fake GPU runs in MIG mode (the first runs the engine), so the MIG panels have data.
FAKE_MIG = "1=3g.71gb+1g.18gb:2"
SCRAPE_SECONDS = 1
RATE_INTERVAL = "10s"  # Grafana's $__rate_interval at a 1 s scrape and a short range
RANGE = "5m"
DEADLINE_SECONDS = 120.0
QUERY_TIMEOUT_SECONDS = 30.0
ADMIN_TOKEN = Secret("dashboards-live-admin")
WEBHOOK_TOKEN = Secret("dashboards-live-webhook")


# Governor's own stack, and a fleet's: other job names, a cluster label on the targets, other
# severities (tests/alerts/testdata/fleet.yaml). The same checks hold for both.
SPECS = {"governor": ROOT / "slo.yaml", "fleet": FLEET}


@dataclass
class Stack:
    spec: Path
    prometheus: str
    inference: str
    controller: str
    processes: list[Child]

    def logs(self) -> str:
        return logs(self.processes)


def get_json(url: str, data: bytes | None = None, headers: dict[str, str] | None = None,
             method: str = "GET", timeout: float = 10) -> Any:
    request = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.load(response)


def _service_argv(port: int, token_file: Path) -> list[str]:
    # A small admission queue, so that the burst below is turned away (429) and the
    # rejections panel has a series.
    return [sys.executable, "-m", "governor", "serve", "--engine", "sim", "--preset", "tiny",
            "--host", LOOPBACK, "--port", str(port), "--admin-token-file", str(token_file),
            "--max-in-flight", "8", "--max-queue", "4"]


def controller_argv(spec: Path, ports: dict[str, int], workdir: Path, *,
                    stabilisation: str = "5s") -> list[str]:
    # Short windows so that the controller decides within seconds, not minutes.
    return [sys.executable, "-m", "governor", "controller", "--slo", str(spec),
            "--host", LOOPBACK, "--port", str(ports["controller"]),
            "--prometheus", f"http://{LOOPBACK}:{ports['prometheus']}",
            "--targets", f"http://{LOOPBACK}:{ports['inference']}", "--static-only",
            "--admin-token-file", str(workdir / "admin_token"),
            "--webhook-token-file", str(workdir / "webhook_token"),
            "--state-file", str(workdir / "state.json"),
            "--audit-log", str(workdir / "audit.jsonl"),
            "--resync", "1s", "--scrape-interval", f"{SCRAPE_SECONDS}s", "--short-window", "5s",
            "--long-window", "10s", "--cooldown", "7s", "--stabilisation", stabilisation]


@pytest.fixture(scope="module", params=sorted(SPECS))
def stack(request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    spec_path = SPECS[request.param]
    workdir = tmp_path_factory.mktemp(f"live-{request.param}")
    (workdir / "admin_token").write_text(ADMIN_TOKEN.reveal() + "\n", encoding="utf-8")
    (workdir / "webhook_token").write_text(WEBHOOK_TOKEN.reveal() + "\n", encoding="utf-8")
    ports = {name: free_port() for name in
             ("inference", "exporter", "controller", "prometheus", "alertmanager", "probe")}
    spec = load_checked_spec(spec_path)
    endpoints = Endpoints(*((f"{LOOPBACK}:{ports[n]}",) for n in
                            ("inference", "exporter", "controller", "alertmanager", "probe")))
    params = RenderParams(scrape_interval_seconds=SCRAPE_SECONDS, evaluation_interval_seconds=1,
                          fast_window_seconds=5, fast_for_seconds=2,
                          controller_token_file=str(workdir / "webhook_token"))
    deploy = workdir / "deploy"
    write_alerts(render_alerts(spec, endpoints, params), deploy)
    urls = {name: f"http://{LOOPBACK}:{port}" for name, port in ports.items()}
    starts = (
        ("inference", _service_argv(ports["inference"], workdir / "admin_token"), "/health"),
        ("exporter", [sys.executable, "-m", "governor", "exporter", "--fake-gpus", "2",
                      "--fake-mig", FAKE_MIG, "--follow", urls["inference"],
                      "--host", LOOPBACK, "--port", str(ports["exporter"])], "/health"),
        ("controller", controller_argv(spec_path, ports, workdir), "/health"),
        # The synthetic probe, its spec's inference target moved to this stack's service.
        ("probe", Probe(slo=str(spec_path), target=(f"inference={urls['inference']}",),
                        host=LOOPBACK, port=ports["probe"]).python(), "/health"),
        ("prometheus", ["prometheus", *prometheus_args(
            spec, params, config_file=str(deploy / PROMETHEUS_CONFIG),
            storage_path=str(workdir / "prometheus-data"),
            listen_address=f"{LOOPBACK}:{ports['prometheus']}")], "/-/ready"),
    )
    children = [Child(name, argv, urls[name] + health, workdir / f"{name}.log")
                for name, argv, health in starts]
    with running(children, limit_seconds=60):
        stack = Stack(spec_path, urls["prometheus"], urls["inference"], urls["controller"],
                      list(children))
        try:
            yield stack
        finally:  # what a test started on the stack (the load) stops first, as before
            for late in reversed(stack.processes[len(children):]):
                late.stop()


# ---- driving the stack --------------------------------------------------------------------------


def start_load(stack: Stack, workdir: Path) -> Child:
    load = Child("load", [sys.executable, "-m", "governor.demo_load", "--url", stack.inference,
                          "--chats", "4", "--doc-rate", "0.5", "--doc-words", "1500"], None,
                 workdir / "load.log").start()
    stack.processes.append(load)
    return load


def burst(stack: Stack, requests: int = 24) -> list[int]:
    """Many short completions at once: more than the admission queue holds."""
    body = json.dumps({"model": "tiny", "prompt": "hello " * 50, "max_tokens": 32}).encode()

    def one(_: int) -> int:
        request = urllib.request.Request(f"{stack.inference}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return exc.code

    with concurrent.futures.ThreadPoolExecutor(requests) as pool:
        return list(pool.map(one, range(requests)))


def lower_token_budget(stack: Stack) -> None:
    """What an operator (or the controller) does: cut max_num_batched_tokens to the floor."""
    limits = get_json(f"{stack.inference}/admin/batching",
                      headers={"Authorization": f"Bearer {ADMIN_TOKEN.reveal()}"})
    floor = limits["floor"][svc.PARAM_MAX_NUM_BATCHED_TOKENS]
    body = json.dumps({svc.PARAM_MAX_NUM_SEQS: limits[svc.PARAM_MAX_NUM_SEQS],
                       svc.PARAM_MAX_NUM_BATCHED_TOKENS: floor}).encode()
    get_json(f"{stack.inference}/admin/batching", data=body, method="PUT",
             headers={"Authorization": f"Bearer {ADMIN_TOKEN.reveal()}",
                      "Content-Type": "application/json"})


def notify_controller(stack: Stack) -> None:
    """Alertmanager's webhook call (payload version 4) for a resolved fast alert."""
    alert = {"status": "resolved", "labels": {"alertname": "InterTokenLatencyP99High",
                                              "severity": "control", "slo": "inter-token-latency"},
             "annotations": {}, "startsAt": "2026-01-01T00:00:00Z",
             "endsAt": "2026-01-01T00:05:00Z", "generatorURL": "",
             "fingerprint": "0123456789abcdef"}
    payload = {"receiver": "controller", "status": "resolved", "alerts": [alert],
               "groupLabels": {}, "commonLabels": alert["labels"], "commonAnnotations": {},
               "externalURL": "", "version": "4", "groupKey": "{}:{}", "truncatedAlerts": 0}
    get_json(f"{stack.controller}/alerts", data=json.dumps(payload).encode(), method="POST",
             headers={"Authorization": f"Bearer {WEBHOOK_TOKEN.reveal()}",
                      "Content-Type": "application/json"})


def run_query(stack: Stack, query: PanelQuery) -> list[Any]:
    expr = expand(query.expr, rate_interval=RATE_INTERVAL, range_=RANGE,
                  variables=query.variables)
    url = f"{stack.prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        answer = get_json(url, timeout=QUERY_TIMEOUT_SECONDS)
    except urllib.error.HTTPError as exc:  # Prometheus answers 400/422 for a bad query
        pytest.fail(f"{query.where}: HTTP {exc.code}: {exc.read().decode()[:500]}\n{expr}")
    assert answer["status"] == "success", f"{query.where}: {answer}"
    result: list[Any] = answer["data"]["result"]
    return result


def without_data(stack: Stack, queries: list[PanelQuery]) -> list[PanelQuery]:
    """The queries with no data at this poll. One that Prometheus does not answer in time counts as
    no data for this poll only: the callers poll again until their deadline (on a CI machine whose
    two cores also run vLLM and the load, an instant query once took more than 10 s)."""
    missing = []
    for query in queries:
        try:
            if not run_query(stack, query):
                missing.append(query)
        except TimeoutError:
            missing.append(query)
        except urllib.error.URLError as exc:
            if not isinstance(exc.reason, TimeoutError):
                raise
            missing.append(query)
    return missing


# ---- the test ----------------------------------------------------------------------------------


def test_every_panel_query_runs_and_has_data_where_the_stack_makes_series(
    stack: Stack, tmp_path: Path
) -> None:
    queries = [q for q in all_queries(render_all(load_checked_spec(stack.spec)))
               if not q.panel.startswith(WHY_PANELS)]
    expected_empty = [q for q in queries if (q.board, q.panel) in NO_DATA_HERE]
    assert {(q.board, q.panel) for q in expected_empty} == NO_DATA_HERE.keys(), \
        "a listed panel no longer exists"
    start_load(stack, tmp_path)
    time.sleep(3)
    statuses = burst(stack)
    assert 429 in statuses and 200 in statuses, statuses
    lower_token_budget(stack)
    notify_controller(stack)
    deadline = time.monotonic() + DEADLINE_SECONDS
    missing = without_data(stack, queries)
    while set(missing) != set(expected_empty) and time.monotonic() < deadline:
        time.sleep(3)
        missing = without_data(stack, queries)
    unexpected = [q.where for q in missing if q not in expected_empty]
    assert unexpected == [], f"no data for {unexpected}\n{stack.logs()}"
    assert missing == expected_empty, "a panel listed in NO_DATA_HERE has data now"


def test_preview_draws_every_board_from_the_live_prometheus(stack: Stack, tmp_path: Path) -> None:
    """Runs after the test above has loaded the stack: every panel query answers, none fails."""
    out = tmp_path / "preview"
    code = preview_main(["--prometheus", stack.prometheus, "--slo", str(stack.spec),
                         "--range", "5m", "--out", str(out)])
    assert code == 0
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == ["governor-controller.png", "governor-gpu.png", "governor-inference.png",
                    "governor-slo.png"]
    assert all((out / name).stat().st_size > 50_000 for name in pngs)


def test_every_rule_evaluates_and_every_recording_rule_has_data(stack: Stack) -> None:
    """Runs after the load above: the generated rules, in this spec's job names, evaluate
    without error, and each recorded series exists for the targets this Prometheus scrapes."""
    groups = get_json(f"{stack.prometheus}/api/v1/rules")["data"]["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert rules
    broken = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert broken == [], broken
    # The verdict's conditional series exist only while a cause is at work (docs/why.md).
    recorded = sorted({r["name"] for r in rules if r["type"] == "recording"}
                      - verdict.CONDITIONAL)
    deadline = time.monotonic() + DEADLINE_SECONDS
    empty = recorded
    while empty and time.monotonic() < deadline:
        empty = [name for name in empty if not get_json(
            f"{stack.prometheus}/api/v1/query?"
            + urllib.parse.urlencode({"query": name}))["data"]["result"]]
        if empty:
            time.sleep(3)
    assert empty == [], f"recording rules without data: {empty}\n{stack.logs()}"


def test_the_controller_observes_the_service_under_the_specs_job(stack: Stack) -> None:
    """The controller's own queries (in this spec's job and labels) see the service."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    seen: dict[str, Any] = {}
    while time.monotonic() < deadline:
        seen = get_json(f"{stack.controller}/status")["targets"]
        observed = [t.get("observation") or {} for t in seen.values()]
        if any(o.get("itl_tail_seconds") is not None for o in observed):
            return
        time.sleep(2)
    pytest.fail(f"the controller never observed its target: {seen}\n{stack.logs()}")
