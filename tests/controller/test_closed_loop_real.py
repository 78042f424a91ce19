"""The whole loop in real time: service, Prometheus, Alertmanager and controller as processes.

``governor serve --engine sim`` (the ``llama-3-8b@h200`` preset, in real time) serves chat
streams; a load step adds long documents, whose prefill steps breach the inter-token P99 SLO
under the default limits. Prometheus (scraping every second, with the generated rules) fires the
fast alert, Alertmanager delivers it to the controller's webhook, the controller lowers the token
budget through the admin API, the P99 returns under the SLO and the alert resolves. The test
measures breach-to-recovery on the controller's own query.

The law runs without its early cut (``--at-risk-share 1``): cutting on spikes before the P99
breaches, it would often win the race against the alert, which then never fires. On a breach
itself the race does not matter: the window keeps the breaching gaps for longer than the alert's
``for``, so it fires whether the cut came first or not. The alert's path is judged by the
controller's counters of notifications received, which a poll cannot miss.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import random
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from governor.alerts.prometheus_config import prometheus_args
from governor.alerts.render import ALERTMANAGER_CONFIG, PROMETHEUS_CONFIG, render_all, write_all
from governor.common.process import Child
from governor.contracts.metrics import controller as names
from governor.controller.queries import HistogramSli, QuerySet
from governor.generation.params import Endpoints, RenderParams
from governor.slo.spec import load_spec
from tests.alerts.stack import LOOPBACK, READY_SECONDS, free_port, logs

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
ADMIN_TOKEN = "closed-loop-admin-token"
WEBHOOK_TOKEN = "closed-loop-webhook-token"
SLO_SECONDS = 0.12
WINDOW = 10  # seconds: the fast alert's window and the controller's short window
FILLER = "the committee will review every chapter of the annual report in three languages"


@dataclass
class Loop:
    service: str
    controller: str
    prometheus: str
    processes: list[Child] = field(default_factory=list)

    def logs(self) -> str:
        return logs(self.processes)


def _python(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


@contextlib.asynccontextmanager
async def closed_loop(workdir: Path) -> AsyncIterator[Loop]:
    spec = load_spec(REPO / "slo.yaml")
    ports = {n: free_port() for n in ("service", "controller", "prometheus", "alertmanager")}
    addr = {n: f"{LOOPBACK}:{p}" for n, p in ports.items()}
    (workdir / "webhook-token").write_text(WEBHOOK_TOKEN + "\n")
    (workdir / "admin-token").write_text(ADMIN_TOKEN + "\n")
    params = RenderParams(
        scrape_interval_seconds=1, evaluation_interval_seconds=1, fast_window_seconds=WINDOW,
        fast_for_seconds=2, control_group_wait_seconds=1, control_group_interval_seconds=2,
        control_repeat_interval_seconds=10, controller_token_file=str(workdir / "webhook-token"))
    deploy = workdir / "deploy"
    write_all(render_all(spec, Endpoints(inference=(addr["service"],), exporter=(),
                                         controller=(addr["controller"],),
                                         alertmanager=(addr["alertmanager"],)), params), deploy)
    loop = Loop(f"http://{addr['service']}", f"http://{addr['controller']}",
                f"http://{addr['prometheus']}")
    starts = [
        ("service", _python("governor", "serve", "--engine", "sim", "--preset",
                            "llama-3-8b@h200", "--host", LOOPBACK, "--port",
                            str(ports["service"]), "--admin-token-file",
                            str(workdir / "admin-token"), "--log-level", "warning"),
         f"{loop.service}/health"),
        ("controller", _python(
            "governor.controller", "--host", LOOPBACK, "--port", str(ports["controller"]),
            "--slo", str(REPO / "slo.yaml"), "--prometheus", loop.prometheus,
            "--targets", loop.service, "--resync", "2s",
            "--scrape-interval", "1s", "--short-window", f"{WINDOW}s", "--long-window", "60s",
            "--cooldown", "15s", "--stabilisation", "600s", "--at-risk-share", "1",
            "--webhook-token-file", str(workdir / "webhook-token"),
            "--admin-token-file", str(workdir / "admin-token"),
            "--state-file", str(workdir / "state.json"),
            "--audit-log", str(workdir / "audit.jsonl")), f"{loop.controller}/health"),
        ("alertmanager", ["prometheus-alertmanager",
                          f"--config.file={deploy / ALERTMANAGER_CONFIG}",
                          f"--storage.path={workdir / 'am-data'}",
                          f"--web.listen-address={addr['alertmanager']}",
                          "--cluster.listen-address="],
         f"http://{addr['alertmanager']}/-/ready"),
        ("prometheus", ["prometheus", *prometheus_args(
            spec, params, config_file=str(deploy / PROMETHEUS_CONFIG),
            storage_path=str(workdir / "prom-data"), listen_address=addr["prometheus"])],
         f"{loop.prometheus}/-/ready"),
    ]
    with contextlib.ExitStack() as stopping:  # each started in order; stopped in reverse
        for name, argv, ready in starts:
            child = stopping.enter_context(Child(name, argv, ready, workdir / f"{name}.log"))
            loop.processes.append(child)
            await child.wait_healthy_async(READY_SECONDS)
        yield loop


async def _stream(session: aiohttp.ClientSession, url: str, text: str, max_tokens: int) -> None:
    body = {"model": "llama-3-8b@h200", "stream": True, "max_tokens": max_tokens,
            "ignore_eos": True, "messages": [{"role": "user", "content": text}]}
    with contextlib.suppress(aiohttp.ClientError):
        async with session.post(f"{url}/v1/chat/completions", json=body) as response:
            async for _ in response.content:
                pass


async def chats(session: aiohttp.ClientSession, url: str, count: int) -> None:
    async def one() -> None:
        while True:
            await _stream(session, url, FILLER, 400)

    await asyncio.gather(*(one() for _ in range(count)))


async def documents(session: aiohttp.ClientSession, url: str, per_second: float,
                    words: int) -> None:
    # Every document distinct from its first words: a repeated one would hit the prefix cache
    # and cost no prefill at all.
    rng = random.Random(0)
    vocabulary = FILLER.split()
    tasks: set[asyncio.Task[None]] = set()
    try:
        for number in itertools.count():
            text = f"Document {number}: " + " ".join(rng.choice(vocabulary)
                                                    for _ in range(words))
            task = asyncio.create_task(_stream(session, url, text, 4))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            await asyncio.sleep(1.0 / per_second)
    finally:
        for task in tasks:
            task.cancel()


async def query(session: aiohttp.ClientSession, prometheus: str, expr: str) -> float:
    async with session.get(f"{prometheus}/api/v1/query", params={"query": expr}) as response:
        result = (await response.json())["data"]["result"]
    return float(result[0]["value"][1]) if result else math.nan


async def alerts_received(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """The controller's count of alerts received on its webhook, by status."""
    async with session.get(f"{url}/metrics") as response:
        text = await response.text()
    counts = {"firing": 0.0, "resolved": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == names.ALERTS_RECEIVED.total and \
                    sample.labels.get(names.LABEL_OUTCOME) == "received":
                counts[sample.labels[names.LABEL_STATUS]] = sample.value
    return counts


async def budget(session: aiohttp.ClientSession, service: str) -> int:
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    async with session.get(f"{service}/admin/batching", headers=headers) as response:
        return int((await response.json())["max_num_batched_tokens"])


@dataclass
class Timeline:
    breach_at: float | None = None
    cut_at: float | None = None
    recovered_at: float | None = None
    alert_received_at: float | None = None
    alert_resolved_at: float | None = None
    samples: list[tuple[float, float, int]] = field(default_factory=list)


async def watch(session: aiohttp.ClientSession, loop: Loop, start: float,
                deadline: float) -> Timeline:
    """Poll every second until the alert has fired, been resolved, and the tail recovered."""
    expr = QuerySet(HistogramSli("governor_inter_token_latency_seconds"), 0.99, None, 0.99,
                    short_window_seconds=WINDOW).expressions()["itl_tail_seconds"]
    seen = Timeline()
    while time.monotonic() < deadline:
        now = time.monotonic() - start
        tail, limit = await query(session, loop.prometheus, expr), await budget(session,
                                                                               loop.service)
        received = await alerts_received(session, loop.controller)
        seen.samples.append((now, tail, limit))
        if seen.breach_at is None and tail > SLO_SECONDS:
            seen.breach_at = now
        if seen.cut_at is None and limit < 8192:
            seen.cut_at = now
        if seen.breach_at is not None and seen.recovered_at is None and tail <= SLO_SECONDS:
            seen.recovered_at = now
        if seen.alert_received_at is None and received["firing"] > 0:
            seen.alert_received_at = now
        if seen.alert_resolved_at is None and received["resolved"] > 0:
            seen.alert_resolved_at = now
        if seen.recovered_at is not None and seen.alert_resolved_at is not None:
            return seen
        await asyncio.sleep(1.0)
    return seen


async def test_a_load_step_is_caught_by_the_alert_and_fixed_by_the_controller(
    tmp_path: Path,
) -> None:
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session,
        closed_loop(tmp_path) as loop,
    ):
        start = time.monotonic()
        load = [asyncio.create_task(chats(session, loop.service, 4))]
        await asyncio.sleep(15)  # chats alone: well under the SLO
        load.append(asyncio.create_task(documents(session, loop.service, 3.0, 6000)))
        try:
            seen = await watch(session, loop, start, start + 150)
        finally:
            for task in load:
                task.cancel()
        report = json.dumps(seen.samples[-40:])
        assert seen.breach_at is not None, f"no breach under the default limits\n{report}"
        assert seen.cut_at is not None, f"the controller never cut\n{loop.logs()}"
        assert seen.recovered_at is not None, f"the tail never recovered\n{report}"
        recovery = seen.recovered_at - seen.breach_at
        print(f"breach at {seen.breach_at:.0f}s, cut at {seen.cut_at:.0f}s, recovered at "
              f"{seen.recovered_at:.0f}s: breach-to-recovery {recovery:.0f}s")
        assert recovery <= 60.0
        print(f"alert received at {seen.alert_received_at}s, resolved at "
              f"{seen.alert_resolved_at}s")
        assert seen.alert_received_at is not None, \
            f"the alert never reached the controller\n{report}\n{loop.logs()}"
        assert seen.alert_resolved_at is not None, f"the alert never resolved\n{loop.logs()}"
        audit = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text()
                 .splitlines()]
        cuts = [a for a in audit if a["action"] == "tighten" and a["applied"]]
        assert cuts
        assert cuts[0]["reason"] == "itl_breach"  # without the early cut, on the breach
