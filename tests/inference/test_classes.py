"""Request classes in the service: classification, vLLM priority, class labels, per-class admission
and shedding the lowest class first (on the sim engine; the real engine is in
``tests/inference/engines/vllm/test_priority.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from governor.contracts.endpoints import CHAT_COMPLETIONS_PATH, CLASS_HEADER
from governor.contracts.metrics import service as svc
from governor.inference import keys
from governor.inference.cli import build_parser, config_from_args
from governor.inference.config import AdmissionSettings
from governor.inference.engines.base import Engine, GenerateRequest, TokenDelta
from governor.inference.engines.registry import create_engine
from governor.inference.engines.settings import SchedulingPolicy
from governor.inference.engines.sim.engine import SimEngine
from governor.slo.classes import Match, RequestClass, RequestClasses
from tests.inference.conftest import SIM, Service, ServiceFactory

ROOT = Path(__file__).resolve().parents[2]
LONG = 200  # prompt tokens from which a request is a document


def classes(doc_limit: int | None = None) -> RequestClasses:
    doc = RequestClass("doc", (Match(min_prompt_tokens=LONG),
                               Match(headers=((CLASS_HEADER, ("doc",)),))),
                       priority=10, max_in_flight=doc_limit)
    return RequestClasses((doc, RequestClass("chat")), declared=True)


class Recording:
    """The sim engine, keeping every request the service hands it."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.requests: list[GenerateRequest] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    def generate(self, request: GenerateRequest) -> AsyncIterator[TokenDelta]:
        self.requests.append(request)
        return self.engine.generate(request)


async def classed(make_service: ServiceFactory, **overrides: Any) -> tuple[Service, Recording]:
    # The engine's own vllm:* series go to a registry of their own: not what these tests read.
    policy: SchedulingPolicy = "priority" if overrides.get("classes", classes()).declared \
        else "fcfs"
    engine = Recording(create_engine(replace(SIM, scheduling_policy=policy), CollectorRegistry()))
    overrides.setdefault("classes", classes())
    service = await make_service(engine=engine, **overrides)
    return service, engine


def body(service: Service, words: int = 5, max_tokens: int = 8, **extra: Any) -> dict[str, Any]:
    return {"model": service.engine.model_name, "max_tokens": max_tokens, "messages": [
        {"role": "user", "content": " ".join(["word"] * words)}], **extra}


async def post(session: aiohttp.ClientSession, service: Service, payload: dict[str, Any],
               headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    async with session.post(f"{service.url}{CHAT_COMPLETIONS_PATH}", json=payload,
                            headers=headers) as response:
        return response.status, dict(response.headers), await response.text()


async def until(condition: Callable[[], bool], limit_seconds: float = 10.0) -> None:
    for _ in range(int(limit_seconds / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the service never got there")


async def test_a_request_carries_its_class_priority_and_label(
        make_service: ServiceFactory) -> None:
    service, engine = await classed(make_service)
    async with aiohttp.ClientSession() as session:
        for payload, headers in ((body(service, words=LONG * 2), None),
                                 (body(service), {"X-Governor-Class": "doc"}),
                                 (body(service), {CLASS_HEADER: "chat"}), (body(service), None)):
            status, _, _ = await post(session, service, payload, headers)
            assert status == 200
    assert [r.priority for r in engine.requests] == [10, 10, 0, 0]
    sim = engine.engine
    assert isinstance(sim, SimEngine)
    assert sim._core.scheduler.policy == "priority"  # what `serve --slo` starts
    model = service.engine.model_name
    for name, count in (("doc", 2.0), ("chat", 2.0)):
        assert service.sample(svc.TIME_TO_FIRST_TOKEN.count,
                              {"model": model, "class": name}) == count
        assert service.sample(svc.REQUESTS.total, {"route": CHAT_COMPLETIONS_PATH,
                                                   "code": "200", "class": name}) == count
        assert service.sample(svc.REQUEST_DURATION.count,
                              {"route": CHAT_COMPLETIONS_PATH, "class": name}) == count
    assert service.sample(svc.INTER_TOKEN_LATENCY.count, {"model": model, "class": "doc"})


async def test_without_classes_the_engine_gets_priority_zero(
        make_service: ServiceFactory) -> None:
    service, engine = await classed(make_service, classes=RequestClasses())
    async with aiohttp.ClientSession() as session:
        await post(session, service, body(service, words=LONG * 2), {CLASS_HEADER: "doc"})
    assert [r.priority for r in engine.requests] == [0]
    assert service.sample(svc.REQUESTS.total, {"route": CHAT_COMPLETIONS_PATH, "code": "200",
                                               "class": svc.DEFAULT_CLASS}) == 1.0


SLOW = {"max_tokens": 150, "ignore_eos": True}


async def test_a_class_at_its_limit_waits_while_chats_run(make_service: ServiceFactory) -> None:
    service, _ = await classed(make_service, classes=classes(doc_limit=1))
    admission = service.app[keys.ADMISSION]
    doc = body(service, **SLOW)
    async with aiohttp.ClientSession() as session:
        docs = [asyncio.create_task(post(session, service, doc, {CLASS_HEADER: "doc"}))
                for _ in range(2)]
        await until(lambda: admission.waiting == 1)
        assert admission.in_flight_of("doc") == 1
        status, _, _ = await post(session, service, body(service))  # a chat runs meanwhile
        assert status == 200 and admission.waiting == 1
        results = await asyncio.gather(*docs)
    assert [status for status, _, _ in results] == [200, 200]  # deferred, not refused


async def test_under_overload_documents_are_shed_first_and_no_accepted_request_is_lost(
        make_service: ServiceFactory) -> None:
    service, _ = await classed(make_service, admission=AdmissionSettings(
        max_in_flight=1, max_queue=2))
    admission = service.app[keys.ADMISSION]

    async def send(session: aiohttp.ClientSession, kind: str, payload: dict[str, Any]
                   ) -> tuple[int, dict[str, str], str]:
        return await post(session, service, payload, {CLASS_HEADER: kind})

    async with aiohttp.ClientSession() as session:
        running = asyncio.create_task(send(session, "chat", body(service, stream=True, **SLOW)))
        await until(lambda: admission.in_flight == 1)
        docs = [asyncio.create_task(send(session, "doc", body(service))) for _ in range(2)]
        await until(lambda: admission.waiting == 2)
        chats = [asyncio.create_task(send(session, "chat", body(service))) for _ in range(2)]
        late_doc = await send(session, "doc", body(service))  # the queue holds two chats now
        shed = await asyncio.gather(*docs)
        served = await asyncio.gather(running, *chats)
    assert [status for status, _, _ in shed] == [429, 429]
    assert all(h["Retry-After"] == "1" and '"code": "shed"' in text for _, h, text in shed)
    assert late_doc[0] == 429 and '"code": "queue_full"' in late_doc[2]
    assert [status for status, _, _ in served] == [200, 200, 200]
    assert "[DONE]" in served[0][2]
    assert service.sample(svc.ADMISSION_REJECTIONS.total,
                          {"reason": svc.REASON_SHED, "class": "doc"}) == 2.0
    assert service.sample(svc.ADMISSION_REJECTIONS.total,
                          {"reason": svc.REASON_QUEUE_FULL, "class": "doc"}) == 1.0
    assert admission.in_flight == 0 and admission.waiting == 0


def serve_config(argv: Sequence[str]) -> Any:
    return config_from_args(build_parser({}).parse_args(list(argv)), {})


def test_serve_reads_the_classes_of_the_spec() -> None:
    plain = serve_config([])
    assert not plain.classes.declared and plain.engine.scheduling_policy == "fcfs"
    spec = serve_config(["--slo", str(ROOT / "slo.yaml")])
    assert spec.classes.names == ("doc", "chat")
    assert spec.engine.scheduling_policy == "priority"


def test_serve_refuses_a_bad_spec_in_one_message(tmp_path: Path) -> None:
    bad = tmp_path / "slo.yaml"
    bad.write_text((ROOT / "slo.yaml").read_text().replace("max_in_flight: 4",
                                                           "max_in_flight: -4"))
    with pytest.raises(SystemExit, match=r"(?s)--slo: 1 problem .*max_in_flight"):
        serve_config(["--slo", str(bad)])
