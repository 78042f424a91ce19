"""Where a request's time goes: the stage clock, then the service measuring every stage.

The clock is checked on given timestamps. The service is served through its own listener (the
gate that sees each request's first byte) on the sim engine, and each test puts the time in one
stage on purpose (a body sent slowly, a client that stops reading, a tokenizer that is the
bottleneck) and finds it there; in every case the stages add up to the request's duration.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import socket
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from governor.common.process import wait_http_ok
from governor.contracts.metrics import service as svc
from governor.contracts.stages import BEFORE_FIRST_TOKEN, FIRST_TOKEN, Stage
from governor.inference import keys
from governor.inference.app import create_app
from governor.inference.config import ConnectionSettings, ServiceConfig
from governor.inference.engines.settings import EngineSettings
from governor.inference.http.listener import Listener, listening
from governor.inference.telemetry.stages import StageClock
from governor.inference.warmup import WarmupSettings
from tests.inference.http.test_slow_clients import (
    http_request,
    small_send_buffer,
    stalled_client,
    wait_until,
)

# The sum of a request's stages is its duration up to float rounding of a dozen additions.
SUM_TOLERANCE_SECONDS = 1e-6
CHAT = "/v1/chat/completions"
SIM = EngineSettings(kind="sim", preset="tiny", seed=11)
ENGINE_STAGES = (Stage.ENGINE_QUEUE, Stage.PREFILL, Stage.DECODE)


# ---- the clock ------------------------------------------------------------------------------

def test_marks_give_each_stage_the_time_since_the_last_and_add_up() -> None:
    clock = StageClock(10.0)
    clock.reach(Stage.READ, 10.5)
    clock.reach_all(((Stage.TEXT_QUEUE, 10.75), (Stage.PARSE, 11.0), (Stage.TOKENIZE, 12.0)))
    clock.reach(Stage.READ, 12.25)  # a stage may come back: its intervals add up
    stages = clock.finish(13.0)
    assert stages.seconds[Stage.READ] == 0.75
    assert stages.seconds[Stage.TEXT_QUEUE] == 0.25
    assert stages.seconds[Stage.TOKENIZE] == 1.0
    assert stages.seconds[Stage.OTHER] == 0.75
    assert stages.duration_seconds == 3.0
    assert sum(stages.seconds.values()) == stages.duration_seconds
    assert list(stages.seconds) == list(Stage)  # every stage, in order, zeros included


def test_a_mark_earlier_than_the_last_counts_nothing() -> None:
    clock = StageClock(0.0)
    clock.reach(Stage.PARSE, 2.0)
    assert clock.reach(Stage.RENDER, 1.5) == 2.0  # a thread's stamp read after a later mark
    stages = clock.finish(2.0)
    assert stages.seconds[Stage.RENDER] == 0.0
    assert stages.duration_seconds == 2.0


def test_the_wait_for_the_engine_is_split_by_the_engines_times_and_the_rest_is_other() -> None:
    clock = StageClock(0.0)
    clock.split(((Stage.ENGINE_QUEUE, 0.25), (Stage.PREFILL, 0.5)), at=1.0)
    stages = clock.finish(1.0)
    assert (stages.seconds[Stage.ENGINE_QUEUE], stages.seconds[Stage.PREFILL],
            stages.seconds[Stage.OTHER]) == (0.25, 0.5, 0.25)


@pytest.mark.parametrize(("queued", "prefill", "expected"), [
    (0.75, 0.5, (0.75, 0.25, 0.0)),  # the engine's times exceed the wait: capped, in order
    (None, 0.5, (0.0, 0.5, 0.5)),  # an unknown time takes nothing
    (None, None, (0.0, 0.0, 1.0)),  # an engine that reports nothing: all of it is other
    (-1.0, 0.25, (0.0, 0.25, 0.75)),  # a negative time (clock trouble) takes nothing
], ids=["capped to the wait", "one unknown", "none known", "negative"])
def test_a_split_never_gives_out_more_than_the_wait(
    queued: float | None, prefill: float | None, expected: tuple[float, float, float],
) -> None:
    clock = StageClock(0.0)
    clock.split(((Stage.ENGINE_QUEUE, queued), (Stage.PREFILL, prefill)), at=1.0)
    stages = clock.finish(1.0)
    assert (stages.seconds[Stage.ENGINE_QUEUE], stages.seconds[Stage.PREFILL],
            stages.seconds[Stage.OTHER]) == expected
    assert math.isclose(sum(stages.seconds.values()), 1.0)


def test_an_unbounded_part_takes_the_rest_and_the_record_reads_by_label() -> None:
    """How a stream ends: its writes exactly, then the wait for tokens up to the engine's own
    decode time (unknown: all of it)."""
    clock = StageClock(0.0)
    clock.split(((Stage.STREAM_WRITE, 0.5), (Stage.DECODE, math.inf)), at=2.0)
    stages = clock.finish(2.0)
    assert (stages.seconds[Stage.STREAM_WRITE], stages.seconds[Stage.DECODE]) == (0.5, 1.5)
    assert stages.as_dict()["decode"] == 1.5


def test_the_stages_before_the_first_token_lead_the_record() -> None:
    """What the service observes at the first token is the record's first values."""
    assert tuple(Stage)[:len(BEFORE_FIRST_TOKEN)] == BEFORE_FIRST_TOKEN
    assert set(BEFORE_FIRST_TOKEN) == {*FIRST_TOKEN.engine, *FIRST_TOKEN.service}


def test_at_the_first_token_the_clock_gives_the_stages_before_it_and_the_record_says_so() -> None:
    clock = StageClock(0.0, read=2.0)
    clock.reach_all(((Stage.TOKENIZE, 2.5), (Stage.ADMISSION, 3.0)))
    clock.split(((Stage.ENGINE_QUEUE, 0.25), (Stage.PREFILL, 0.5)), at=4.0)
    before_first = clock.first_token()
    clock.split(((Stage.STREAM_WRITE, 0.5), (Stage.DECODE, math.inf)), at=9.0)
    stages = clock.finish(9.0)
    assert before_first == tuple(stages.seconds[stage] for stage in BEFORE_FIRST_TOKEN)
    assert before_first == (2.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.25, 0.5)
    assert stages.reached_first_token
    assert not StageClock(0.0).finish(1.0).reached_first_token


def test_the_record_is_final_once_the_clock_has_finished() -> None:
    """What an error path marks after the request ended changes nothing recorded."""
    clock = StageClock(0.0, read=0.25)
    stages = clock.finish(1.0)
    clock.reach(Stage.STREAM_WRITE, 5.0)
    clock.reach_all(((Stage.PARSE, 6.0),))
    clock.split(((Stage.DECODE, 1.0),), at=7.0)
    assert stages.duration_seconds == 1.0
    assert stages.seconds[Stage.READ] == 0.25 and stages.seconds[Stage.OTHER] == 0.75
    assert sum(stages.seconds.values()) == 1.0


# ---- the service ----------------------------------------------------------------------------

class Served:
    """The service behind its own listener (the gate that sees each request's first byte)."""

    def __init__(self, app: web.Application, listener: Listener) -> None:
        self.app = app
        self.listener = listener
        self.url = f"http://127.0.0.1:{listener.port}"

    @property
    def registry(self) -> CollectorRegistry:
        return self.app[keys.REGISTRY]

    async def ready(self) -> None:
        await wait_http_ok(f"{self.url}/health", limit_seconds=30, poll_seconds=0.05)


@contextlib.asynccontextmanager
async def serving(config: ServiceConfig, sock: socket.socket | None = None
                  ) -> AsyncIterator[Served]:
    # No warm-up: its requests would run beside the ones whose stages are measured.
    app = create_app(replace(config, warmup=WarmupSettings(0)), env={})
    async with listening(app, "127.0.0.1", 0, ConnectionSettings(), sock=sock) as listener:
        served = Served(app, listener)
        await served.ready()
        yield served


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    async with serving(ServiceConfig(engine=SIM)) as service:
        yield service


class Seen:
    """The stage and duration histograms' sums and counts, to take differences of."""

    def __init__(self, served: Served) -> None:
        reg = served.registry
        self.stages = {stage: reg.get_sample_value(svc.REQUEST_STAGE.sum,
                                                   {svc.LABEL_STAGE: stage.value}) or 0.0
                       for stage in Stage}
        self.counts = {stage: reg.get_sample_value(svc.REQUEST_STAGE.count,
                                                   {svc.LABEL_STAGE: stage.value}) or 0.0
                       for stage in Stage}
        self.duration = reg.get_sample_value(svc.REQUEST_DURATION.sum, {
            svc.LABEL_ROUTE: CHAT, svc.LABEL_CLASS: svc.DEFAULT_CLASS}) or 0.0

    def since(self, before: Seen) -> tuple[dict[Stage, float], float]:
        """The stages' seconds and the duration of the requests between ``before`` and this;
        every stage counted once per request."""
        counts = {self.counts[s] - before.counts[s] for s in Stage}
        assert len(counts) == 1, counts
        return ({s: self.stages[s] - before.stages[s] for s in Stage},
                self.duration - before.duration)


def chat(max_tokens: int, content: str = "where does the time go?", *, stream: bool = True,
         model: str = "tiny") -> dict[str, object]:
    return {"model": model, "max_tokens": max_tokens, "stream": stream, "ignore_eos": True,
            "messages": [{"role": "user", "content": content}]}


def assert_adds_up(stages: Mapping[Stage, float], duration: float) -> None:
    assert duration > 0
    assert abs(sum(stages.values()) - duration) <= SUM_TOLERANCE_SECONDS
    assert all(seconds >= 0 for seconds in stages.values()), stages


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_every_stage_is_measured_and_the_stages_add_up_to_the_duration(
    served: Served, stream: bool,
) -> None:
    url = served.url
    before = Seen(served)
    async with aiohttp.ClientSession() as session:
        started = time.perf_counter()
        async with session.post(f"{url}{CHAT}", json=chat(24, stream=stream)) as response:
            assert response.status == 200
            await response.read()
        seen_by_client = time.perf_counter() - started
    stages, duration = Seen(served).since(before)
    assert_adds_up(stages, duration)
    assert duration <= seen_by_client
    # Where the time of a 24-token answer on millisecond steps goes: mostly the engine.
    for stage in (Stage.READ, Stage.PARSE, Stage.RENDER, Stage.TOKENIZE, Stage.PREFILL,
                  Stage.DECODE, Stage.STREAM_WRITE):
        assert stages[stage] > 0, stage
    engine = sum(stages[s] for s in ENGINE_STAGES)
    assert engine > stages[Stage.OTHER], stages


async def test_a_body_sent_slowly_is_time_in_read_from_the_first_byte(served: Served) -> None:
    before = Seen(served)
    request = http_request(CHAT, json.dumps(chat(2, stream=False)).encode())
    reader, writer = await asyncio.open_connection("127.0.0.1", served.listener.port)
    writer.write(request[:10])  # the request line begins: the request's first byte
    await writer.drain()
    await asyncio.sleep(0.3)
    writer.write(request[10:])
    await writer.drain()
    assert (await reader.readline()).startswith(b"HTTP/1.1 200")
    writer.close()
    async with aiohttp.ClientSession() as session, session.get(f"{served.url}/health"):
        pass  # the response is complete once the next request is served
    stages, duration = Seen(served).since(before)
    assert_adds_up(stages, duration)
    assert stages[Stage.READ] >= 0.3
    assert duration >= 0.3


async def test_a_client_that_stops_reading_is_time_in_stream_write() -> None:
    # The engine's free steps may reach the handler as a few large deltas (~26 KB of events in
    # all): the smallest paced send buffer keeps the kernel from taking them all at once.
    config = ServiceConfig(engine=replace(SIM, time_scale=0.0),
                           connections=ConnectionSettings(stream_send_buffer_bytes=4096))
    sock = small_send_buffer("127.0.0.1", 0, socket.AF_INET)
    async with serving(config, sock) as served:
        before = Seen(served)
        body = json.dumps(chat(1500, "stall " * 20)).encode()
        stalled = await stalled_client(served.listener.port, http_request(CHAT, body))
        await asyncio.sleep(1.0)  # steps cost nothing: the engine is done, the client is not
        await read_to_the_end(served, stalled)
        stages, duration = Seen(served).since(before)
    assert_adds_up(stages, duration)
    assert stages[Stage.STREAM_WRITE] >= 0.8
    # The engine's 1,500 steps cost no simulated time, but wall time on a loaded machine (two
    # other live stacks beside it made them ~0.1 s): the stalled second is the writes', by far.
    assert stages[Stage.STREAM_WRITE] > 3 * sum(stages[s] for s in ENGINE_STAGES)


async def read_to_the_end(served: Served, stalled: socket.socket) -> None:
    """Read a stalled client's stream to its last chunk, close it, and make one more request,
    so that the service has observed the stream's end."""
    loop, received = asyncio.get_running_loop(), b""
    while not received.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"):  # the last chunk
        received += await asyncio.wait_for(loop.sock_recv(stalled, 65536), 10)
    stalled.close()
    async with aiohttp.ClientSession() as session, session.get(f"{served.url}/health"):
        pass


async def test_the_stages_before_the_first_token_are_observed_with_it_not_at_the_end() -> None:
    """A body sent slowly, then a stream its client does not read: the read stage (and every
    stage before the first token) is counted as the time to first token is, while the stream
    still waits for its reader; the rest when it ends, each stage once per request."""
    config = ServiceConfig(engine=replace(SIM, time_scale=0.0),
                           connections=ConnectionSettings(stream_send_buffer_bytes=4096))
    sock = small_send_buffer("127.0.0.1", 0, socket.AF_INET)
    async with serving(config, sock) as served:
        reg = served.registry

        def first_tokens() -> float:
            return reg.get_sample_value(svc.TIME_TO_FIRST_TOKEN.count, {
                svc.LABEL_MODEL: "tiny", svc.LABEL_CLASS: svc.DEFAULT_CLASS}) or 0.0

        before, tokens_before = Seen(served), first_tokens()
        request = http_request(CHAT, json.dumps(chat(1500, "stall " * 20)).encode())
        stalled = await stalled_client(served.listener.port, request[:10])
        await asyncio.sleep(0.3)  # the body arrives late: time in read
        loop = asyncio.get_running_loop()
        await loop.sock_sendall(stalled, request[10:])
        await wait_until(lambda: first_tokens() > tokens_before, 10)
        during = Seen(served)
        await read_to_the_end(served, stalled)
        stages, duration = Seen(served).since(before)
    counted = {stage: during.counts[stage] - before.counts[stage] for stage in Stage}
    assert counted == {stage: 1.0 if stage in BEFORE_FIRST_TOKEN else 0.0 for stage in Stage}
    assert during.stages[Stage.READ] - before.stages[Stage.READ] >= 0.3
    assert {stage: during.stages[stage] - before.stages[stage]
            for stage in BEFORE_FIRST_TOKEN} == {stage: stages[stage]
                                                 for stage in BEFORE_FIRST_TOKEN}
    assert_adds_up(stages, duration)  # and Seen.since: every stage counted once in all


async def test_prompts_that_queue_for_the_one_text_thread_show_it_in_text_queue() -> None:
    """Four long prompts at once on one text thread: each waits for the ones before it, so the
    queue for the thread holds more time than tokenizing them did."""
    settings = EngineSettings(kind="sim", preset="llama-3-8b@h200", time_scale=0.0)
    config = ServiceConfig(engine=settings, tokenizer_threads=1)
    async with serving(config) as served:
        before = Seen(served)
        model = served.app[keys.ENGINE].model_name
        prompt = "多语言的文本，和 English words, そして日本語も。" * 600  # noqa: RUF001
        async with aiohttp.ClientSession() as session:
            async def one() -> None:
                body = chat(1, prompt, stream=False, model=model)
                async with session.post(f"{served.url}{CHAT}", json=body) as response:
                    assert response.status == 200, await response.text()
            await asyncio.gather(*(one() for _ in range(4)))
        reg = served.registry
        stages, duration = Seen(served).since(before)
        engine = served.app[keys.ENGINE]
        rendered = engine.render_chat([{"role": "user", "content": prompt}])
        assert reg.get_sample_value(svc.REQUEST_PROMPT_TOKENS.sum) == 4 * len(
            engine.tokenize(rendered))
        assert reg.get_sample_value(svc.REQUEST_PROMPT_BYTES.sum) == 4 * len(rendered.encode())
    assert_adds_up(stages, duration)
    assert stages[Stage.TOKENIZE] > 0
    assert stages[Stage.TEXT_QUEUE] > stages[Stage.TOKENIZE]


async def test_time_to_first_token_is_counted_in_the_prompts_size_bucket(served: Served) -> None:
    """A short chat lands in the 128-token bucket, a long one (over 512 tokens) in 2048, each
    with the time to first token the client-facing histogram counts; the other buckets stay
    at zero from the start."""
    reg = served.registry

    def count(size: str) -> float:
        return reg.get_sample_value(svc.TIME_TO_FIRST_TOKEN_BY_PROMPT.count,
                                    {svc.LABEL_PROMPT_SIZE: size}) or 0.0

    assert [count(size) for size in svc.PROMPT_SIZES] == [0.0] * len(svc.PROMPT_SIZES)
    async with aiohttp.ClientSession() as session:
        for content in ("short", " ".join(f"w{i}" for i in range(700))):
            async with session.post(f"{served.url}{CHAT}",
                                    json=chat(2, content, stream=False)) as response:
                assert response.status == 200
    assert {size: count(size) for size in svc.PROMPT_SIZES} == {
        "128": 1.0, "512": 0.0, "2048": 1.0, "8192": 0.0, svc.PROMPT_SIZE_MORE: 0.0}
    by_prompt = sum(reg.get_sample_value(svc.TIME_TO_FIRST_TOKEN_BY_PROMPT.sum,
                                         {svc.LABEL_PROMPT_SIZE: size}) or 0.0
                    for size in svc.PROMPT_SIZES)
    ttft = reg.get_sample_value(svc.TIME_TO_FIRST_TOKEN.sum, {
        svc.LABEL_MODEL: "tiny", svc.LABEL_CLASS: svc.DEFAULT_CLASS})
    assert ttft is not None and abs(by_prompt - ttft) < 1e-9
