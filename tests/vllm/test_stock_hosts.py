"""docs/stock-vllm.md's recipe for hosts, run as written: stock ``vllm serve`` with Governor's
middleware, the recipe's ``governor generate`` and ``governor controller`` command lines, and
Debian's Prometheus and Alertmanager on their own packaged configurations plus the generated
entries the recipe tells a user to add.

The commands are read from the doc itself, so the doc cannot drift from what is tested: only
the example host names and system paths are swapped for this test's loopback ports and folders
(:func:`localised`). The YAML the doc shows is held to what its ``governor generate`` writes
(the first test, offline and fast); the stack is built from the generated files, not from the
doc's copy.

Slow: about two minutes on two CPU cores, most of it vLLM's start.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from governor.alerts.alertmanager import alertmanager_args
from governor.alerts.prometheus_config import prometheus_args
from governor.common.commands import Exporter
from governor.common.process import Child, running
from governor.generate import main as generate_main
from governor.generation.catalog import load_checked_spec
from governor.generation.params import RenderParams
from governor.inference.engines.vllm.tiny_model import write_tiny_llama
from governor.vllm import MIDDLEWARE
from governor.vllm.admin import TOKEN_FILE_ENV
from tests.alerts.stack import LOOPBACK, free_port, logs
from tests.dashboards.boards import EXAMPLES
from tests.dashboards.test_live import get_json
from tests.support.hosts_recipe import command, snippet
from tests.support.stock_vllm import stock_vllm

SPEC = EXAMPLES["stock-vllm"]  # the recipe's slo.yaml
# The packaged configurations of Debian's prometheus and prometheus-alertmanager: the "existing"
# Prometheus and Alertmanager the recipe adds to.
DEBIAN = Path("/etc/prometheus")
# Prometheus scrapes every 15 s as generated (the recipe's defaults), and vLLM's /metrics takes
# seconds to render on two busy cores: a few scrapes' worth on a loaded machine.
DEADLINE_SECONDS = 240.0
ADMIN_TOKEN = "stock-hosts-admin-token"
WEBHOOK_TOKEN = "stock-hosts-webhook-token"
T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., None])


def slow(test: F) -> F:
    """Marked as the other stock-vLLM integration tests; the doc's own check stays fast."""
    for mark in (pytest.mark.vllm, pytest.mark.integration, pytest.mark.slow):
        test = mark(test)
    return test


def localised(words: list[str], swaps: dict[str, str]) -> list[str]:
    """The recipe's words with its example hosts and system paths swapped for the test's."""
    for before, after in swaps.items():
        words = [word.replace(before, after) for word in words]
    return words


# ---- what a user copies from the generated files -----------------------------------------------

def read_yaml(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def prometheus_entries(out: Path) -> dict[str, Any]:
    """The entries of the generated prometheus.yml the recipe adds to an existing one."""
    generated = read_yaml(out / "prometheus" / "prometheus.yml")
    return {key: generated[key] for key in snippet("scrape_configs")}


def alertmanager_entries(out: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The controller's route and receiver in the generated alertmanager.yml."""
    generated = read_yaml(out / "alertmanager" / "alertmanager.yml")
    (receiver,) = [r for r in generated["receivers"] if "webhook_configs" in r]
    (route,) = [r for r in generated["route"]["routes"] if r["receiver"] == receiver["name"]]
    return route, receiver


def test_the_recipes_yaml_is_what_its_generate_command_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, words = command("governor", "generate")
    monkeypatch.chdir(tmp_path)
    shutil.copy(SPEC, tmp_path / "slo.yaml")
    assert generate_main(words[2:]) == 0
    out = tmp_path / words[words.index("--out") + 1]
    assert snippet("scrape_configs") == prometheus_entries(out)
    route, receiver = alertmanager_entries(out)
    assert snippet("receivers") == {"route": {"routes": [route]}, "receivers": [receiver]}


# ---- the recipe, run -----------------------------------------------------------------------------

@dataclass
class Hosts:
    vllm: str
    prometheus: str
    alertmanager: str
    controller: str
    out: Path  # what the recipe's governor generate wrote
    children: list[Child]

    def logs(self) -> str:
        return logs(self.children)


def eventually(read: Callable[[], T], done: Callable[[T], bool], hosts: Hosts, what: str) -> T:
    """Poll ``read`` until ``done`` holds of its value (a loaded machine is slow to scrape)."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    value = read()
    while not done(value) and time.monotonic() < deadline:
        time.sleep(3)
        value = read()
    assert done(value), f"{what}: {json.dumps(value, default=str)[:3000]}\n{hosts.logs()}"
    return value


def existing_prometheus(etc: Path, out: Path) -> Path:
    """Debian's prometheus.yml with the recipe's additions (its rules and targets are copied
    beside it by the recipe's ``cp``). Its ``alerting`` is replaced, not kept: it names an
    Alertmanager this test does not run."""
    config = read_yaml(DEBIAN / "prometheus.yml")
    added = prometheus_entries(out)
    config["rule_files"] = [*(config.get("rule_files") or []), *added["rule_files"]]
    config["scrape_configs"] = [*config["scrape_configs"], *added["scrape_configs"]]
    config["alerting"] = added["alerting"]
    path = etc / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def existing_alertmanager(etc: Path, out: Path) -> Path:
    """Debian's alertmanager.yml with the controller's route first and its receiver."""
    config = read_yaml(DEBIAN / "alertmanager.yml")
    route, receiver = alertmanager_entries(out)
    config["route"]["routes"] = [route, *(config["route"].get("routes") or [])]
    config["receivers"] = [*config["receivers"], receiver]
    path = etc / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def checked(words: list[str], cwd: Path) -> None:
    """Run a recipe's command, its globs expanded as the shell would."""
    argv = [match for word in words
            for match in (sorted(str(p) for p in cwd.glob(word)) if "*" in word else [word])]
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{shlex.join(argv)}:\n{done.stdout}{done.stderr}"


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hosts]:
    work = tmp_path_factory.mktemp("stock-hosts")
    etc = {name: work / name for name in ("etc-governor", "etc-prometheus", "var-lib-governor")}
    for folder in etc.values():
        folder.mkdir()
    (etc["etc-governor"] / "admin_token").write_text(ADMIN_TOKEN + "\n")
    (etc["etc-governor"] / "controller_token").write_text(WEBHOOK_TOKEN + "\n")
    (etc["etc-prometheus"] / "governor_controller_token").write_text(WEBHOOK_TOKEN + "\n")
    swaps = {"/etc/governor/": f"{etc['etc-governor']}/",
             "/etc/prometheus/": f"{etc['etc-prometheus']}/",
             "/var/lib/governor/": f"{etc['var-lib-governor']}/"}
    env, serve = command("vllm", "serve")
    assert serve[serve.index("--middleware") + 1] == MIDDLEWARE
    token_file = localised([env[TOKEN_FILE_ENV]], swaps)[0]
    with stock_vllm("vllm", write_tiny_llama(work / "model"), work,
                    env={TOKEN_FILE_ENV: token_file}, middleware=(MIDDLEWARE,),
                    stats=True) as server:
        ports = {n: free_port() for n in ("exporter", "controller", "prometheus", "alertmanager")}
        swaps |= {"vllm-0:8000": server.url.removeprefix("http://"),
                  "vllm-0:9400": f"{LOOPBACK}:{ports['exporter']}",
                  "governor-0:9500": f"{LOOPBACK}:{ports['controller']}",
                  "prometheus-0:9090": f"{LOOPBACK}:{ports['prometheus']}",
                  "alertmanager-0:9093": f"{LOOPBACK}:{ports['alertmanager']}",
                  "0.0.0.0": LOOPBACK}
        shutil.copy(SPEC, work / "slo.yaml")
        _, generate = command("governor", "generate")
        generate = localised(generate, swaps)
        checked([sys.executable, "-m", "governor", *generate[1:]], work)
        checked(localised(command("promtool", "test", "rules")[1], swaps), work)
        out = work / generate[generate.index("--out") + 1]
        _, copy = command("sudo", "cp")
        checked(localised(copy[1:], swaps), work)  # this test's folders are its own: no sudo
        _, controller = command("governor", "controller")
        # The recipe's controller listens on its default port, which --controller-targets names;
        # here on a free one.
        controller = [*localised(controller, swaps), "--port", str(ports["controller"])]
        spec = load_checked_spec(SPEC)
        urls = {n: f"http://{LOOPBACK}:{p}" for n, p in ports.items()}
        starts = (
            # dcgm-exporter's stand-in on the GPU host: fake GPUs under DCGM's names.
            ("exporter", Exporter(fake_gpus=1, names="dcgm", host=LOOPBACK,
                                  port=ports["exporter"]).python(), "/health"),
            ("alertmanager", ["prometheus-alertmanager", *alertmanager_args(
                config_file=str(existing_alertmanager(etc["etc-prometheus"], out)),
                storage_path=str(work / "alertmanager-data"),
                listen_address=f"{LOOPBACK}:{ports['alertmanager']}")], "/-/ready"),
            ("prometheus", ["prometheus", *prometheus_args(
                spec, RenderParams(),
                config_file=str(existing_prometheus(etc["etc-prometheus"], out)),
                storage_path=str(work / "prometheus-data"),
                listen_address=f"{LOOPBACK}:{ports['prometheus']}")], "/-/ready"),
            ("controller", [sys.executable, "-m", "governor", *controller[1:]], "/health"),
        )
        for check in (("promtool", "check", "config"), ("amtool", "check-config")):
            checked(localised(command(*check)[1], swaps), work)
        children = [Child(name, argv, urls[name] + health, work / f"{name}.log", cwd=work)
                    for name, argv, health in starts]
        with running(children, limit_seconds=120):
            yield Hosts(server.url, urls["prometheus"], urls["alertmanager"],
                        urls["controller"], out, [server.child, *children])


@slow
def test_prometheus_scrapes_the_recipes_jobs_and_loads_the_generated_rules(hosts: Hosts) -> None:
    # The probe's job waits for a `governor probe` the recipe leaves to the reader
    # (docs/probe.md); every other job is up.
    jobs = {job["job_name"] for job in prometheus_entries(hosts.out)["scrape_configs"]} - {"probe"}

    def up() -> dict[str, float]:
        result = get_json(f"{hosts.prometheus}/api/v1/query?query=up")["data"]["result"]
        return {r["metric"]["job"]: float(r["value"][1]) for r in result
                if r["metric"]["job"] in jobs}

    eventually(up, lambda seen: seen == dict.fromkeys(jobs, 1.0), hosts,
               f"the recipe's jobs {sorted(jobs)} are not all up")
    generated = {group["name"] for rules in (hosts.out / "prometheus" / "rules").glob("*.yml")
                 for group in read_yaml(rules)["groups"]}
    loaded = get_json(f"{hosts.prometheus}/api/v1/rules")["data"]["groups"]
    assert generated and generated <= {group["name"] for group in loaded}, hosts.logs()
    assert [(r["name"], r.get("lastError")) for group in loaded for r in group["rules"]
            if r["health"] == "err"] == []


@slow
def test_alertmanager_holds_the_controllers_route_and_reaches_its_webhook(hosts: Hosts) -> None:
    route, receiver = alertmanager_entries(hosts.out)
    config = yaml.safe_load(get_json(f"{hosts.alertmanager}/api/v2/status")["config"]["original"])
    # Alertmanager shows its configuration re-marshalled, its defaults filled in.
    (loaded,) = [r for r in config["receivers"] if r["name"] == receiver["name"]]
    (webhook,) = loaded["webhook_configs"]
    assert webhook["url"] == f"{hosts.controller}/alerts"
    assert webhook["http_config"]["authorization"] == \
        receiver["webhook_configs"][0]["http_config"]["authorization"]
    first = config["route"]["routes"][0]
    assert (first["receiver"], first["matchers"]) == (route["receiver"], route["matchers"])
    # A control alert as the generated rules label it, through the route to the controller,
    # with the token Alertmanager reads from the file the recipe put it in.
    rule = next(rule for group in read_yaml(hosts.out / "prometheus" / "rules" / "control.yml")
                ["groups"] for rule in group["rules"] if "alert" in rule)
    labels = {**rule["labels"], "alertname": rule["alert"],
              "instance": hosts.vllm.removeprefix("http://")}
    posted = urllib.request.Request(f"{hosts.alertmanager}/api/v2/alerts",
                                    data=json.dumps([{"labels": labels}]).encode(),
                                    headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(posted, timeout=10) as answer:  # an empty body
        assert answer.status == 200
    eventually(lambda: get_json(f"{hosts.controller}/status")["alerts"],
               lambda alerts: any(a["labels"] == labels for a in alerts), hosts,
               "the controller's webhook never received the alert")


@slow
def test_the_controller_reads_the_vllm_servers_limits_through_the_middleware(
        hosts: Hosts) -> None:
    targets = eventually(lambda: get_json(f"{hosts.controller}/status")["targets"],
                         lambda seen: any(t["limits"] for t in seen.values()), hosts,
                         "the controller read no limits")
    (target,) = targets.values()
    assert target["url"] == hosts.vllm
    # What vllm serve started with (tests/support/stock_vllm.py), read from vLLM's engine.
    assert target["limits"]["ceiling"] == {"max_num_seqs": 8, "max_num_batched_tokens": 512}
    assert target["last_error"] is None
