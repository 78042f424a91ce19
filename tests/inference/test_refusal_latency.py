"""A request the deadline gate refuses for its own prompt's length is answered on the event
loop, on the prompt's estimated length, without waiting for a text thread: a refusal is not
queued behind the tokenizing of the requests being admitted. One the estimate cannot decide
goes the exact way: its turn in a text thread, its tokens counted."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Sequence

import aiohttp

from governor.inference.admission.estimate import MIN_SAMPLES
from governor.inference.config import AdmissionSettings
from governor.inference.engines.base import GenerateRequest, TokenDelta
from governor.slo.classes import Match, RequestClass, RequestClasses
from tests.inference.conftest import Service, ServiceFactory
from tests.inference.test_deadlines import INTERACTIVE, PrefillLane, body, post

RATE = 20_000.0  # prompt tokens per second the lane prefills, at most
# The scripted tokenizer makes a token of each word: "w " is two bytes a token.
WARM = " ".join(["w"] * 600)  # 1.2 kB of text, 600 tokens: 30 ms of prefill
AHEAD = " ".join(["w"] * 600)
# 3 200 tokens: estimated at 2 911 to 3 522 from its bytes. With the 600 ahead, 3 511 at least,
# more than the 0.15 s deadline's worth of prefill at any rate the lane can show (3 000), so it
# is refused on the estimate; the 600 ahead alone are not, so it is not refused unread.
LATE = " ".join(["w"] * 3200)
BLOCK = "block " + " ".join(["w"] * 300)  # a tokenization that holds the only text thread
TARGET_SECONDS = 0.15
# What post() returns: status, Retry-After, the error, seconds.
Answer = tuple[int, str | None, dict[str, object], float]


class HeldLane(PrefillLane):
    """Prefills at ``RATE`` while open; holds every prompt while ``open`` is clear. Its
    tokenizer holds the text thread on a prompt starting ``block`` until ``unblock`` is set,
    and records the length of every prompt it tokenized."""

    def __init__(self) -> None:
        super().__init__()
        self.open = asyncio.Event()
        self.open.set()
        self.blocking = threading.Event()
        self.unblock = threading.Event()
        self.tokenized: list[int] = []

    def tokenize(self, text: str) -> Sequence[int]:
        if text.startswith("block"):
            self.blocking.set()
            self.unblock.wait(30)
        ids = super().tokenize(text)
        self.tokenized.append(len(ids))
        return ids

    async def generate(self, request: GenerateRequest) -> AsyncIterator[TokenDelta]:
        self.started.append(request.request_id)
        self.one_more.set()
        await self.open.wait()
        async with self._lane:
            await asyncio.sleep(len(request.prompt_token_ids) / RATE)
        yield TokenDelta(" w", 1, None)
        yield TokenDelta(" w", 1, None)


CLASSES = RequestClasses((
    RequestClass("interactive", (Match(headers=(("x-governor-class", ("interactive",)),)),)),
    RequestClass("default")), declared=True)


async def warmed_service(make_service: ServiceFactory, engine: HeldLane,
                         classes: RequestClasses = CLASSES) -> Service:
    """A service whose gate has measured the lane's rate and learnt its prompts' sizes."""
    service = await make_service(engine=engine, classes=classes, admission=AdmissionSettings(
        first_token_targets=(("interactive", TARGET_SECONDS),)))
    async with aiohttp.ClientSession() as session:
        for _ in range(MIN_SAMPLES + 8):  # 1.2 s of prefill, one after another
            assert (await post(session, service.url, body(prompt=WARM)))[0] == 200
    return service


async def ahead_and_thread_held(session: aiohttp.ClientSession, service: Service,
                                engine: HeldLane) -> list[asyncio.Task[Answer]]:
    """One prompt held in the engine without its first token, and the text thread held by a
    long tokenization; the tasks of both requests."""
    engine.open.clear()
    waiting = [
        asyncio.create_task(post(session, service.url, body(prompt=AHEAD)))]
    async with asyncio.timeout(10):
        while len(engine.started) < MIN_SAMPLES + 8 + 1:
            engine.one_more.clear()
            await engine.one_more.wait()
    waiting.append(asyncio.create_task(post(session, service.url, body(prompt=BLOCK))))
    assert await asyncio.to_thread(engine.blocking.wait, 10)
    return waiting


async def test_a_refusal_is_answered_while_the_text_thread_tokenizes_another_prompt(
    make_service: ServiceFactory,
) -> None:
    engine = HeldLane()
    service = await warmed_service(make_service, engine)
    async with aiohttp.ClientSession() as session:
        waiting = await ahead_and_thread_held(session, service, engine)
        try:
            async with asyncio.timeout(10):  # without the estimate: until the thread is free
                status, retry_after, error, _ = await post(
                    session, service.url, body(prompt=LATE), INTERACTIVE)
            # Answered while the only text thread was still held.
            assert not engine.unblock.is_set()
        finally:
            engine.unblock.set()
            engine.open.set()
        answers = await asyncio.gather(*waiting)
    assert [answer[0] for answer in answers] == [200, 200]
    assert (status, retry_after, error["code"]) == (429, "1", "deadline")
    assert "first-token deadline" in str(error["message"])
    assert 3200 not in engine.tokenized  # its prompt was never tokenized
    assert service.sample("governor_admission_rejections_total",
                          {"reason": "deadline", "class": "interactive"}) == 1
    assert service.sample("governor_admitted_requests_total", {"class": "interactive"}) in (
        None, 0)


async def test_a_class_the_estimate_cannot_tell_waits_for_its_exact_count(
    make_service: ServiceFactory,
) -> None:
    # A prompt of 3 000 tokens or more is a document, with no deadline: LATE's estimate (2 911
    # to 3 522 tokens) may be either, so it is tokenized before it is judged, and it is a
    # document (3 200 tokens), admitted.
    classes = RequestClasses((
        RequestClass("doc", (Match(min_prompt_tokens=3000),)),
        RequestClass("interactive", (Match(headers=(("x-governor-class", ("interactive",)),)),)),
        RequestClass("default")), declared=True)
    engine = HeldLane()
    service = await warmed_service(make_service, engine, classes)
    async with aiohttp.ClientSession() as session:
        waiting = await ahead_and_thread_held(session, service, engine)
        late = asyncio.create_task(post(session, service.url, body(prompt=LATE), INTERACTIVE))
        await asyncio.sleep(0.2)
        assert not late.done()  # waiting for the text thread
        engine.unblock.set()
        engine.open.set()
        status, *_ = await late
        await asyncio.gather(*waiting)
    assert status == 200 and 3200 in engine.tokenized
    assert service.sample("governor_admitted_requests_total", {"class": "doc"}) == 1


async def test_a_malformed_body_decoded_on_the_event_loop_gets_the_same_400(
    make_service: ServiceFactory,
) -> None:
    engine = HeldLane()
    service = await warmed_service(make_service, engine)
    url = f"{service.url}/v1/chat/completions"
    # 12 kB: as many tokens as could be refused, so decoded on the loop (a body that decodes is
    # validated in the text thread, as before).
    pad = b" " * 12_000
    async with aiohttp.ClientSession() as session:
        waiting = await ahead_and_thread_held(session, service, engine)
        try:
            for data, fault in ((b'{"messages": [' + pad, "not valid JSON"),
                                (b'"\\ud800"' + pad, "not valid Unicode"),
                                (b"[" * 10_000 + b"]" * 10_000, "nested too deeply")):
                async with asyncio.timeout(10), session.post(url, data=data, headers={
                        "content-type": "application/json", **INTERACTIVE}) as response:
                    answer = await response.json()
                assert not engine.unblock.is_set()  # answered while the text thread was held
                assert response.status == 400, data[:40]
                assert answer["error"]["type"] == "invalid_request_error"
                assert fault in answer["error"]["message"]
        finally:
            engine.unblock.set()
            engine.open.set()
        await asyncio.gather(*waiting)
