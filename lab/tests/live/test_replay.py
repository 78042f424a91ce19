"""Replaying arrivals over HTTP: exact prompt lengths, one timed event per streamed output."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp.test_utils import TestServer
from prometheus_client.parser import text_string_to_metric_families

from governor.bench.api import Arrival
from governor.common.process import wait_http_ok
from governor.common.secrets import Secret
from governor.contracts.metrics import vllm
from governor.inference.app import create_app
from governor.inference.config import ServiceConfig
from governor.inference.engines.settings import EngineSettings
from governor.inference.engines.sim.tokenizer import pieces
from governor.inference.warmup import WarmupSettings
from lab.live.replay import SIM_WORDS, PromptBook, Trace, replay, replica_of, words_of


def test_words_of_keeps_whole_lowercase_words_of_three_to_six_letters() -> None:
    vocab = ["Ġhello", "Ġhi", "Ġtoolong", "world", "ĠCaps", "Ġab1", "Ġcafé", "Ġzebra"]
    assert words_of(vocab) == ["hello", "zebra"]


def test_prompts_have_exactly_the_asked_token_count_on_the_sim_tokenizer() -> None:
    book = PromptBook.from_words(SIM_WORDS)
    for tokens in (1, 17, 512, 4000):
        assert len(pieces(book.prompt(tokens, seed=tokens))) == tokens
    assert book.prompt(64, seed=1) == book.prompt(64, seed=1) != book.prompt(64, seed=2)


def test_a_trace_row_round_trips_and_scores_like_a_simulated_request() -> None:
    trace = Trace("doc", 1.0, 1.0, [1.5, 1.6, 1.75], 200, True, 3)
    again = Trace.from_row(trace.as_row())
    assert again.token_times == trace.token_times and again.finished
    outcome = again.outcome(0.5)
    assert outcome.kind == "doc" and math.isclose(outcome.ttft, 0.5)
    assert math.isclose(outcome.itl_tail, 0.125)


async def test_a_replay_against_the_service_times_every_output(
    aiohttp_server: Callable[..., Awaitable[TestServer]],
) -> None:
    config = ServiceConfig(engine=EngineSettings(kind="sim", preset="tiny", seed=1),
                           admin_token=Secret("t"))
    server = await aiohttp_server(create_app(config, env={}))
    url = str(server.make_url("")).rstrip("/")
    await wait_http_ok(f"{url}/health", limit_seconds=30, poll_seconds=0.05)
    arrivals = [Arrival(0.0, 40, 8, "chat"), Arrival(0.05, 120, 5, "doc"),
                Arrival(0.1, 10, 3, "chat")]
    traces = await replay(url, "tiny", arrivals, PromptBook.from_words(SIM_WORDS), seed=4)
    assert [t.kind for t in traces] == ["chat", "doc", "chat"]
    for trace, arrival in zip(traces, arrivals, strict=True):
        assert trace.status == 200 and trace.finished and trace.error is None
        assert trace.prompt_tokens == arrival.prompt_tokens
        assert trace.output_tokens == arrival.output_tokens
        assert trace.sent >= arrival.at - 0.01
        assert trace.token_times == sorted(trace.token_times)
        assert trace.token_times[0] >= trace.arrival


async def test_a_refused_request_is_a_trace_with_its_status(
    aiohttp_server: Callable[..., Awaitable[TestServer]],
) -> None:
    config = ServiceConfig(engine=EngineSettings(kind="sim", preset="tiny"),
                           admin_token=Secret("t"))
    server = await aiohttp_server(create_app(config, env={}))
    url = str(server.make_url("")).rstrip("/")
    await wait_http_ok(f"{url}/health", limit_seconds=30, poll_seconds=0.05)
    traces = await replay(url, "no-such-model", [Arrival(0.0, 4, 2, "chat")],
                          PromptBook.from_words(SIM_WORDS))
    assert traces[0].status == 404 and not traces[0].finished and traces[0].error


async def test_a_replay_to_two_replicas_sends_them_alternate_arrivals(
    aiohttp_server: Callable[..., Awaitable[TestServer]],
) -> None:
    urls = []
    for seed in (1, 2):
        # No warm-up: vLLM's series, which count what each replica got, would count its
        # prompts too.
        config = ServiceConfig(engine=EngineSettings(kind="sim", preset="tiny", seed=seed),
                               admin_token=Secret("t"), warmup=WarmupSettings(0))
        server = await aiohttp_server(create_app(config, env={}))
        urls.append(str(server.make_url("")).rstrip("/"))
        await wait_http_ok(f"{urls[-1]}/health", limit_seconds=30, poll_seconds=0.05)
    arrivals = [Arrival(0.0, 40, 3, "chat"), Arrival(0.02, 120, 3, "doc"),
                Arrival(0.04, 10, 3, "chat"), Arrival(0.06, 7, 3, "chat")]
    traces = await replay(urls, "tiny", arrivals, PromptBook.from_words(SIM_WORDS), seed=4)
    assert all(t.finished for t in traces)
    assert [replica_of(i, 2) for i in range(4)] == [0, 1, 0, 1]
    assert [await prompt_tokens(url) for url in urls] == [40 + 10, 120 + 7]


async def prompt_tokens(url: str) -> float:
    async with aiohttp.ClientSession() as session, session.get(f"{url}/metrics") as response:
        text = await response.text()
    return sum(s.value for f in text_string_to_metric_families(text)
               if f.name == vllm.PROMPT_TOKENS.name for s in f.samples
               if s.name == vllm.PROMPT_TOKENS.total)
