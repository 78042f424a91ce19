"""``docker compose up`` for real: the repository's compose.yaml, its images built here, the
simulated engine and fake GPUs, and the loop closed inside compose.

The machine is made ready first (``tests.compose.machine``: the engine, Compose, a local Debian
base and stand-ins for the images compose pulls). Grafana and Jaeger are left out: no image
registry is reachable here and no package provides either, so nothing can stand in for them;
the service exports traces on a best-effort basis and runs without Jaeger.

Two things differ from a user's ``docker compose up``, both through variables the compose file
reads: the published ports are free ones (another stack may hold 8000 or 9090 on this machine),
and the configuration comes from ``governor generate`` with the short intervals of
``governor up`` (5 s scrapes, a 30 s fast-alert window), so that the alert fires within a minute.
The project has its own name, so a user's ``governor`` project is never touched. Every request
the test sends goes to a published port on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from governor.contracts.endpoints import ADMIN_BATCHING_PATH, ALERTMANAGER, CONTROLLER, PROMETHEUS
from governor.contracts.metrics import controller as controller_metrics
from governor.contracts.metrics import slo as slo_names
from governor.generate import TIMING
from governor.generate import main as generate
from governor.generation.params import RenderParams
from tests.compose import machine
from tests.governor.test_up import free_ports

pytestmark = [pytest.mark.compose, pytest.mark.integration, pytest.mark.slow]

ROOT: Final = machine.ROOT
PROJECT: Final = "governor-compose-test"
# Everything the sim profile runs but Grafana and Jaeger (see the module's docstring).
SERVICES: Final = ("inference", "exporter", "controller", "probe", "prometheus", "alertmanager")
PUBLISHED: Final = ("inference", "exporter", "controller", "probe", "prometheus")
RUN_DIR: Final = ROOT / ".run" / "compose-test"
UP_SECONDS: Final = 180
ALERT_SECONDS: Final = 150
RETUNE_SECONDS: Final = 120
DEFAULT_BUDGET: Final = 8192  # the sim preset's max_num_batched_tokens, the engine's ceiling


@dataclass
class Stack:
    ports: dict[str, int]
    env: dict[str, str]
    started_at: float
    took: dict[str, float] = field(default_factory=dict)

    def url(self, service: str) -> str:
        return f"http://127.0.0.1:{self.ports[service]}"

    def compose(self, *args: str, timeout: float = 300) -> str:
        return machine.run(["docker", "compose", "-f", str(machine.COMPOSE_FILE), "-p", PROJECT,
                            *args], env=self.env, timeout=timeout)


def get(url: str, headers: dict[str, str] | None = None) -> bytes:
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=10) as response:
        body: bytes = response.read()
    return body


def get_json(url: str, headers: dict[str, str] | None = None) -> Any:
    return json.loads(get(url, headers))


def fast_config(out: Path) -> None:
    """``governor generate`` with governor up's short intervals, for the compose names."""
    fast = RenderParams.fast(RenderParams().controller_token_file)
    argv = ["--slo", str(ROOT / "slo.yaml"), "--out", str(out)]
    for option, attribute in TIMING.items():
        argv += [f"--{option}", f"{getattr(fast, attribute)}s"]
    assert generate(argv) == 0


def machine_or_skip() -> dict[str, float]:
    """The machine made ready; skipped only outside CI where it cannot be (no root, no
    engine): CI runs as root and must run this test."""
    can_prepare = os.geteuid() == 0 or machine.succeeds(["docker", "info"])
    if not can_prepare and os.environ.get("CI") != "true":
        pytest.skip("needs root to install Docker, or a running Docker engine")
    return machine.prepare()


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    took = machine_or_skip()
    ports = dict(zip(PUBLISHED, free_ports(len(PUBLISHED)), strict=True))
    fast_config(RUN_DIR / "deploy")
    env = {"COMPOSE_PROFILES": "sim", "COMPOSE_BAKE": "false",
           "PYTHON_IMAGE": machine.PYTHON_IMAGE,
           "GOVERNOR_COMPOSE_DEPLOY_DIR": str(RUN_DIR / "deploy"),
           **{f"GOVERNOR_COMPOSE_{name.upper()}_PORT": str(port)
              for name, port in ports.items()}}
    machine.run(["make", "-s", "-C", str(ROOT), "secrets"], env={"MAKEFLAGS": ""})
    stack = Stack(ports, env, time.time(), took)
    stack.compose("down", "-v", "--remove-orphans")  # a run cut short before
    started = time.monotonic()
    stack.compose("build", timeout=900)
    stack.took["build"] = time.monotonic() - started
    started, stack.started_at = time.monotonic(), time.time()
    try:
        stack.compose("up", "-d", "--wait", "--wait-timeout", str(UP_SECONDS), *SERVICES,
                      timeout=UP_SECONDS + 60)
        stack.took["up to healthy"] = time.monotonic() - started
        yield stack
    finally:
        logs = subprocess.run(["docker", "compose", "-f", str(machine.COMPOSE_FILE), "-p",
                               PROJECT, "logs", "--no-color", "--tail", "40"],
                              capture_output=True, text=True, env={**os.environ, **env},
                              check=False, timeout=60)
        print(logs.stdout[-20000:])
        stack.compose("down", "-v", "--remove-orphans", "--timeout", "10")


def compose_file() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    return loaded


def events(stack: Stack) -> list[dict[str, Any]]:
    """The engine's container events of the project since it was brought up."""
    out = machine.run(["docker", "events", "--since", f"{stack.started_at - 1:.3f}", "--until",
                       f"{time.time():.3f}", "--filter",
                       f"label=com.docker.compose.project={PROJECT}", "--filter",
                       "type=container", "--format", "{{json .}}"])
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def first(found: Sequence[dict[str, Any]], service: str, status: str) -> int | None:
    times = [e["timeNano"] for e in found
             if e["Actor"]["Attributes"].get("com.docker.compose.service") == service
             and e["status"] == status]
    return min(times) if times else None


def test_every_service_becomes_healthy_after_what_it_depends_on(stack: Stack) -> None:
    services = compose_file()["services"]
    found = events(stack)
    start = min(e["timeNano"] for e in found)
    print("compose test: healthy after " + "  ".join(
        f"{name} {((first(found, name, 'health_status: healthy') or start) - start) / 1e9:.1f}s"
        for name in SERVICES))
    for name in SERVICES:
        assert first(found, name, "health_status: healthy") is not None, f"{name} never healthy"
        started = first(found, name, "start")
        assert started is not None
        for other, rule in services[name].get("depends_on", {}).items():
            if other not in SERVICES:
                continue  # another profile's service
            assert rule["condition"] == "service_healthy"
            healthy = first(found, other, "health_status: healthy")
            assert healthy is not None and healthy < started, \
                f"{name} started before {other} was healthy"


def test_ports_are_published_on_loopback_only(stack: Stack) -> None:
    ids = stack.compose("ps", "-q").split()
    bindings: dict[str, list[str]] = {}
    for item in json.loads(machine.run(["docker", "inspect", *ids])):
        service = item["Config"]["Labels"]["com.docker.compose.service"]
        for port, hosts in (item["NetworkSettings"]["Ports"] or {}).items():
            for host in hosts or []:  # none: exposed to the compose network only
                bindings.setdefault(service, []).append(
                    f"{host['HostIp']}:{host['HostPort']}->{port}")
    assert sorted(bindings) == sorted(PUBLISHED), bindings  # Alertmanager: not at all
    for service, published in bindings.items():
        assert all(b.startswith("127.0.0.1:") for b in published), (service, published)
        assert f"127.0.0.1:{stack.ports[service]}" in published[0]


def control_alerts(stack: Stack) -> list[dict[str, Any]]:
    """The fast alerts Prometheus holds, pending or firing."""
    alerts = get_json(f"{stack.url('prometheus')}/api/v1/alerts")["data"]["alerts"]
    return [a for a in alerts if a["labels"].get(slo_names.LABEL_SEVERITY)
            == slo_names.SEVERITY_CONTROL
            and a["labels"]["alertname"].endswith(slo_names.FAST_ALERT_SUFFIX)]


def alerts_received(stack: Stack) -> float:
    """The controller's count of firing alerts received on its webhook."""
    text = get(f"{stack.url('controller')}/metrics").decode()
    return sum(sample.value for family in text_string_to_metric_families(text)
               for sample in family.samples
               if sample.name == controller_metrics.ALERTS_RECEIVED.total
               and sample.labels.get(controller_metrics.LABEL_STATUS) == "firing"
               and sample.labels.get(controller_metrics.LABEL_OUTCOME) == "received")


def wait_for(what: str, check: Any, seconds: float) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(2)
    raise AssertionError(f"{what}: not within {seconds:.0f}s")


def demo_load(stack: Stack) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "governor.demo_load", "--url",
                             stack.url("inference")], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def cut_limits(stack: Stack) -> dict[str, Any] | None:
    """The service's limits, read on its admin API with the token compose gave it, once the
    token budget is below the engine's ceiling."""
    token = (ROOT / ".secrets" / "admin_token").read_text(encoding="utf-8").strip()
    limits: dict[str, Any] = get_json(f"{stack.url('inference')}{ADMIN_BATCHING_PATH}",
                                      {"Authorization": f"Bearer {token}"})
    return limits if limits["max_num_batched_tokens"] < DEFAULT_BUDGET else None


def test_the_fast_alert_reaches_the_controller_which_retunes_the_service(stack: Stack) -> None:
    """The law cuts the token budget early, on spikes, before the tail breaches, and so usually
    wins the race against the alert, which then never fires (tests/controller's closed loop says
    the same). Here the controller is stopped while the demo load makes the tail breach, so the
    alert must fire; it waits in Alertmanager, crosses the compose network once the controller
    is back, and the controller cuts the budget of the service through its admin API."""
    stack.compose("stop", "controller")
    load = demo_load(stack)
    started = time.monotonic()
    try:
        wait_for("the fast alert firing in Prometheus",
                 lambda: [a for a in control_alerts(stack) if a["state"] == "firing"],
                 ALERT_SECONDS)
        stack.took["load to alert"] = time.monotonic() - started
        stack.compose("up", "-d", "--wait", "controller")
        wait_for("the alert on the controller's webhook", lambda: alerts_received(stack) > 0,
                 RETUNE_SECONDS)
        limits = wait_for("a lower token budget on the service", lambda: cut_limits(stack),
                          RETUNE_SECONDS)
        stack.took["load to retune"] = time.monotonic() - started
    finally:
        os.killpg(load.pid, signal.SIGTERM)
        load.wait(10)
    status = get_json(f"{stack.url('controller')}/status")
    assert status["state"]["error"] is None  # the state volume is the governor user's
    (target,) = status["targets"].values()
    assert target["limits"]["max_num_batched_tokens"] == limits["max_num_batched_tokens"]
    audit = [json.loads(line) for line in stack.compose(
        "exec", "-T", "controller", "cat", "/var/lib/governor/audit.jsonl").splitlines()]
    cuts = [a for a in audit if a["action"] == "tighten" and a["applied"]]
    assert cuts, audit[-3:]


def governor_status(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "governor", "status", "--json", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)


def test_governor_status_reads_the_published_ports(stack: Stack) -> None:
    """Prometheus and the controller answer on their published ports; Alertmanager, which is
    not published, is named as the one source that did not, on a port that nothing holds."""
    (closed,) = free_ports(1)
    result = governor_status("--prometheus", stack.url("prometheus"), "--controller",
                             stack.url("controller"), "--alertmanager",
                             f"http://127.0.0.1:{closed}")
    report = json.loads(result.stdout)
    assert result.returncode == 1 and sorted(report["errors"]) == ["alertmanager"], report
    assert {s["name"] for s in report["slos"]} >= {"inter-token-latency", "time-to-first-token"}
    assert all(s["objective"] is not None for s in report["slos"])
    assert list(report["targets"]) == ["inference:8000"]
    inside = stack.compose("exec", "-T", "controller", "governor", "status", "--json",
                           "--prometheus", PROMETHEUS.url(), "--alertmanager",
                           ALERTMANAGER.url(), "--controller",
                           CONTROLLER.url("localhost"))
    assert json.loads(inside)["errors"] == {}  # all three, on the compose network


def test_down_leaves_no_container_network_or_volume(stack: Stack) -> None:
    started = time.monotonic()
    stack.compose("down", "-v", "--timeout", "10")
    stack.took["down"] = time.monotonic() - started
    label = f"label=com.docker.compose.project={PROJECT}"
    for kind in (["ps", "-a"], ["network", "ls"], ["volume", "ls"]):
        left = machine.run(["docker", *kind, "-q", "--filter", label]).split()
        assert left == [], f"docker {' '.join(kind)}: {left}"
    report = "  ".join(f"{k} {v:.1f}s" for k, v in stack.took.items())
    (RUN_DIR / "timings.txt").write_text(report + "\n", encoding="utf-8")
    print(f"compose test: {report}")
