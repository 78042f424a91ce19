"""Deadline-aware admission over HTTP: a request that cannot meet its first-token target is
answered 429 with Retry-After at once, a waiter whose deadline passes is shed before it reaches
the engine, and what runs is never taken back."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import aiohttp

from governor.inference.config import AdmissionSettings
from governor.inference.engines.base import FinishReason, GenerateRequest, TokenDelta
from governor.slo.classes import Match, RequestClass, RequestClasses
from tests.inference.conftest import ServiceFactory
from tests.support.scripted import ScriptedEngine

CLASSES = RequestClasses((
    RequestClass("interactive", (Match(headers=(("x-governor-class", ("interactive",)),)),)),
    RequestClass("default")), declared=True)
INTERACTIVE = {"x-governor-class": "interactive"}
RATE = 200.0  # prompt tokens per second the engine prefills, one prompt at a time
PROMPT = " ".join(["word"] * 20)  # 20 tokens: 0.1 s of prefill


class PrefillLane(ScriptedEngine):
    """Prefills one prompt at a time at ``RATE`` tokens/s, then streams its tokens; records
    which requests reached it."""

    max_model_len = 4096

    def __init__(self) -> None:
        super().__init__()
        self.started: list[str] = []
        self.one_more = asyncio.Event()  # set as each request reaches the engine
        self._lane = asyncio.Lock()

    async def generate(self, request: GenerateRequest) -> AsyncIterator[TokenDelta]:
        self.started.append(request.request_id)
        self.one_more.set()
        async with self._lane:
            await asyncio.sleep(len(request.prompt_token_ids) / RATE)
        for index in range(request.max_tokens):
            if index:
                await asyncio.sleep(0.05)
            last = index == request.max_tokens - 1
            yield TokenDelta(f" w{index}", 1, FinishReason.LENGTH if last else None)


def body(max_tokens: int = 2, prompt: str = PROMPT) -> dict[str, object]:
    return {"model": "scripted", "max_tokens": max_tokens, "stream": True,
            "messages": [{"role": "user", "content": prompt}]}


async def post(session: aiohttp.ClientSession, url: str, payload: dict[str, object],
               headers: dict[str, str] | None = None,
               ) -> tuple[int, str | None, dict[str, object], float]:
    started = time.perf_counter()
    async with session.post(f"{url}/v1/chat/completions", json=payload,
                            headers=headers) as response:
        if response.status == 200:
            await response.text()
            return 200, None, {}, time.perf_counter() - started
        answer = await response.json()
        return (response.status, response.headers.get("Retry-After"), answer["error"],
                time.perf_counter() - started)


async def warm(session: aiohttp.ClientSession, url: str) -> None:
    """Six prompts one after another: 0.6 s of prefill, enough for the gate to trust its rate."""
    for _ in range(6):
        assert (await post(session, url, body(max_tokens=1)))[0] == 200


async def test_a_request_the_backlog_would_make_late_is_refused_at_once_with_retry_after(
    make_service: ServiceFactory,
) -> None:
    engine = PrefillLane()
    # Interactive requests have a 0.25 s first-token target; the rest none (never refused by
    # deadline), at the same priority: their prompts are ahead of an interactive one.
    service = await make_service(engine=engine, classes=CLASSES, admission=AdmissionSettings(
        first_token_targets=(("interactive", 0.25),)))
    async with aiohttp.ClientSession() as session:
        await warm(session, service.url)
        # Five prompts at once: 0.5 s of prefill ahead of the next one, past its 0.25 s.
        backlog = [asyncio.create_task(post(session, service.url, body())) for _ in range(5)]
        await asyncio.sleep(0.03)
        status, retry_after, error, seconds = await post(session, service.url, body(),
                                                         INTERACTIVE)
        served = await asyncio.gather(*backlog)
    assert status == 429 and retry_after == "1"
    assert error["code"] == "deadline" and error["type"] == "rate_limit_error"
    assert "first-token deadline" in str(error["message"])
    assert seconds < 0.1  # answered at arrival, not after a wait
    assert [s for s, *_ in served] == [200] * 5  # nothing admitted was taken back
    assert len(engine.started) == 6 + 5  # the refused request never reached the engine
    labels = {"reason": "deadline", "class": "interactive"}
    assert service.sample("governor_admission_rejections_total", labels) == 1
    assert service.sample("governor_admitted_requests_total", {"class": "default"}) == 11
    assert service.sample("governor_admitted_requests_total", {"class": "interactive"}) == 0
    assert (service.sample("governor_admission_prefill_tokens_per_second") or 0) > 50
    assert service.sample("governor_admission_backlog_prompt_tokens") == 0
    # Every admitted request after the warm-up had a prediction, observed beside what happened.
    predicted = service.sample("governor_admission_predicted_wait_seconds_count",
                               {"class": "default"})
    actual = service.sample("governor_admission_wait_seconds_count", {"class": "default"})
    assert predicted == actual and predicted is not None and predicted >= 5


async def test_a_waiter_whose_deadline_passes_is_shed_before_the_engine(
    make_service: ServiceFactory,
) -> None:
    engine = PrefillLane()
    service = await make_service(engine=engine, admission=AdmissionSettings(
        max_in_flight=1, first_token_targets=(("default", 0.2),)))
    async with aiohttp.ClientSession() as session:
        # Holds the only slot for ~1 s after its first token.
        running = asyncio.create_task(post(session, service.url, body(max_tokens=20)))
        await asyncio.sleep(0.3)  # its prompt is prefilled: nothing is ahead, only the slot
        status, retry_after, error, seconds = await post(session, service.url, body())
        assert (await running)[0] == 200  # the running request was never taken back
    assert status == 429 and retry_after is not None and int(retry_after) >= 1
    assert error["code"] == "deadline_passed"
    assert 0.15 < seconds < 0.6  # it waited for its deadline, not for the slot
    assert len(engine.started) == 1  # shed before it reached the engine
    assert service.sample("governor_admission_rejections_total",
                          {"reason": "deadline_passed", "class": "default"}) == 1
    assert service.sample("governor_queue_depth") == 0


async def test_without_targets_nothing_is_refused_by_deadline(
    make_service: ServiceFactory,
) -> None:
    engine = PrefillLane()
    service = await make_service(engine=engine)
    async with aiohttp.ClientSession() as session:
        await warm(session, service.url)
        results = await asyncio.gather(*(post(session, service.url, body()) for _ in range(8)))
    assert [s for s, *_ in results] == [200] * 8
    assert service.sample("governor_admission_rejections_total",
                          {"reason": "deadline", "class": "default"}) is None


async def test_a_static_bound_on_tokens_ahead_refuses_past_it(
    make_service: ServiceFactory,
) -> None:
    engine = PrefillLane()
    service = await make_service(engine=engine, admission=AdmissionSettings(max_tokens_ahead=50))
    async with aiohttp.ClientSession() as session:
        backlog = [asyncio.create_task(post(session, service.url, body())) for _ in range(3)]
        await asyncio.sleep(0.03)  # 60 tokens without a first token
        status, retry_after, error, _ = await post(session, service.url, body())
        await asyncio.gather(*backlog)
    assert status == 429 and retry_after == "1" and error["code"] == "tokens_ahead"


async def raw_post(session: aiohttp.ClientSession, url: str, data: bytes,
                   headers: dict[str, str]) -> tuple[int, dict[str, object]]:
    async with session.post(f"{url}/v1/chat/completions", data=data,
                            headers={"content-type": "application/json", **headers}) as response:
        return response.status, (await response.json())["error"]


async def test_a_request_late_in_every_class_it_can_be_is_refused_before_its_body_is_read(
    make_service: ServiceFactory,
) -> None:
    # The interactive class has a 0.25 s target; documents (the long prompts) and the rest
    # none (never refused by deadline).
    classes = RequestClasses((
        RequestClass("interactive", (Match(headers=(("x-governor-class", ("interactive",)),)),)),
        RequestClass("doc", (Match(min_prompt_tokens=1000),)),
        RequestClass("default")), declared=True)
    engine = PrefillLane()
    service = await make_service(engine=engine, classes=classes, admission=AdmissionSettings(
        first_token_targets=(("interactive", 0.25),)))
    garbage = b"{not json at all"
    async with aiohttp.ClientSession() as session:
        await warm(session, service.url)
        # Nothing ahead: the body is read and judged as always (its own 400).
        assert (await raw_post(session, service.url, garbage, INTERACTIVE))[0] == 400
        backlog = [asyncio.create_task(post(session, service.url, body())) for _ in range(5)]
        async with asyncio.timeout(10):
            while len(engine.started) < 6 + 5:  # all five admitted: 0.5 s of prefill ahead
                engine.one_more.clear()
                await engine.one_more.wait()
        # 0.5 s of prefill ahead of a 0.25 s deadline: refused before the body is parsed (a
        # body that would have been a 400 gets the 429, its prompt never tokenized).
        status, error = await raw_post(session, service.url, garbage, INTERACTIVE)
        assert (status, error["code"]) == (429, "deadline")
        # Without the header it is a document or a default request (no deadline either way):
        # it is read, and the malformed body is told as such.
        assert (await raw_post(session, service.url, garbage, {}))[0] == 400
        await asyncio.gather(*backlog)
    assert service.sample("governor_admission_rejections_total",
                          {"reason": "deadline", "class": "interactive"}) == 1


def test_a_class_that_depends_on_the_prompt_length_has_every_candidate() -> None:
    classes = RequestClasses((
        RequestClass("short", (Match(max_prompt_tokens=99),)),
        RequestClass("long", (Match(min_prompt_tokens=5000, max_prompt_tokens=6000),)),
        RequestClass("default")), declared=True)
    assert classes.candidates("/v1/completions", {}) == ("short", "long", "default")
    assert CLASSES.candidates("/v1/completions", INTERACTIVE) == ("interactive",)
    assert CLASSES.candidates("/v1/completions", {}) == ("default",)
