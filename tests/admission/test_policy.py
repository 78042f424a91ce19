"""The pure admission policy: run, wait, shed or refuse by class, and hand slots over by rank."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from governor.admission.policy import (
    AdmissionPolicy,
    ClassLimit,
    Ledger,
    Verdict,
)
from governor.inference.admission.queue import AdmissionQueue, QueueFull, Shed
from governor.slo.classes import Match, RequestClass, RequestClasses

CHAT, DOC = ClassLimit("chat", 0), ClassLimit("doc", 10, max_in_flight=2)


def ledger(max_in_flight: int = 4, max_queue: int = 4,
           *classes: ClassLimit) -> Ledger[str]:
    return Ledger(AdmissionPolicy(max_in_flight, max_queue, classes or (CHAT, DOC)))


def test_one_class_is_a_bounded_fifo() -> None:
    book = ledger(1, 2, ClassLimit("default"))
    verdicts = [book.arrive("default", r).verdict for r in ("a", "b", "c", "d")]
    assert verdicts == [Verdict.RUN, Verdict.WAIT, Verdict.WAIT, Verdict.REJECT]
    assert book.release("default") == [("default", "b")]
    assert book.release("default") == [("default", "c")]
    assert book.release("default") == [] and book.in_flight == 0


def test_a_class_at_its_limit_waits_while_others_run() -> None:
    book = ledger()
    assert [book.arrive("doc", d).verdict for d in ("d1", "d2", "d3")] == [
        Verdict.RUN, Verdict.RUN, Verdict.WAIT]
    assert book.arrive("chat", "c1").verdict is Verdict.RUN  # the service has room
    assert (book.in_flight, book.in_flight_of("doc"), book.waiting_of("doc")) == (3, 2, 1)
    assert book.release("chat") == []  # a chat's slot is no use to a doc at its limit
    assert book.release("doc") == [("doc", "d3")]


def test_a_freed_slot_goes_to_the_highest_class_then_the_oldest() -> None:
    book = ledger(1, 8, ClassLimit("chat", 0), ClassLimit("doc", 10), ClassLimit("mail", 0))
    book.arrive("doc", "running")
    for kind, token in (("doc", "d1"), ("chat", "c1"), ("mail", "m1"), ("chat", "c2")):
        assert book.arrive(kind, token).verdict is Verdict.WAIT
    order = [book.release(kind)[0] for kind in ("doc", "chat", "mail", "chat")]
    # Priority first; between chat and mail (both 0) the order of arrival.
    assert order == [("chat", "c1"), ("mail", "m1"), ("chat", "c2"), ("doc", "d1")]


def test_a_full_queue_sheds_the_newest_of_the_lowest_class_for_a_higher_one() -> None:
    book = ledger(1, 2)
    book.arrive("chat", "running")
    book.arrive("doc", "d1")
    book.arrive("doc", "d2")
    decision = book.arrive("chat", "c1")
    assert decision.verdict is Verdict.WAIT and decision.shed == ("d2",)
    assert book.arrive("doc", "d3").verdict is Verdict.REJECT  # nothing ranks below a doc
    assert book.arrive("chat", "c2").shed == ("d1",)
    assert book.arrive("chat", "c3").verdict is Verdict.REJECT  # equals are not shed
    assert book.waiting == 2 and book.waiting_of("doc") == 0


def test_a_class_with_its_queue_full_is_refused_at_once_not_left_to_wait() -> None:
    book = ledger(1, 8, CHAT, ClassLimit("doc", 10, max_in_flight=1, max_queue=1))
    book.arrive("doc", "d1")
    assert book.arrive("doc", "d2").verdict is Verdict.WAIT
    assert book.arrive("doc", "d3").verdict is Verdict.REJECT  # the service's queue has room
    assert book.arrive("chat", "c1").verdict is Verdict.WAIT
    never = ledger(1, 8, CHAT, ClassLimit("doc", 10, max_queue=0))
    never.arrive("chat", "c1")
    assert never.arrive("doc", "d1").verdict is Verdict.REJECT


def test_without_a_queue_a_full_service_refuses_everyone() -> None:
    book = ledger(1, 0)
    book.arrive("doc", "d1")
    assert book.arrive("chat", "c1").verdict is Verdict.REJECT


def test_a_waiter_that_leaves_frees_its_place() -> None:
    book = ledger(1, 1)
    book.arrive("chat", "a")
    book.arrive("chat", "b")
    assert book.withdraw("chat", "b") and not book.withdraw("chat", "b")
    assert book.arrive("doc", "d").verdict is Verdict.WAIT
    assert book.release("chat") == [("doc", "d")]


def test_mistakes_are_refused() -> None:
    with pytest.raises(ValueError, match="no request class 'x'"):
        ledger().arrive("x", "r")
    with pytest.raises(ValueError, match="no request in flight"):
        ledger().release("chat")
    with pytest.raises(ValueError, match="uniquely"):
        AdmissionPolicy(1, 1, (CHAT, CHAT))
    with pytest.raises(ValueError, match="positive"):
        AdmissionPolicy(0, 1)


def test_the_policy_of_a_spec_keeps_its_classes() -> None:
    classes = RequestClasses((RequestClass("doc", (Match(min_prompt_tokens=3000),), 10, 8),
                              RequestClass("chat")), declared=True)
    policy = AdmissionPolicy.of(classes, 512, 1024)
    assert policy.classes == (ClassLimit("doc", 10, 8), ClassLimit("chat", 0, None))
    with pytest.raises(ValueError, match="max_queue"):
        AdmissionPolicy(1, 1, (ClassLimit("doc", max_queue=-1),))


# ---- invariants over any sequence of events ---------------------------------------------------

LIMITS = (ClassLimit("a", 0, 2), ClassLimit("b", 0), ClassLimit("c", 5, 1, max_queue=1),
          ClassLimit("d", 9))
RANK = {c.name: c.priority for c in LIMITS}


@dataclass
class Model:
    """What the ledger must be doing, tracked from the outside."""

    running: dict[str, str] = field(default_factory=dict)  # token → class
    waiting: dict[str, str] = field(default_factory=dict)
    ended: set[str] = field(default_factory=set)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 4), st.integers(0, 4),
       st.lists(st.tuples(st.sampled_from(["arrive", "release", "withdraw"]),
                          st.sampled_from([c.name for c in LIMITS]), st.integers(0, 50)),
                max_size=80))
def test_no_admitted_request_is_lost_and_no_slot_idles(
        max_in_flight: int, max_queue: int, events: list[tuple[str, str, int]]) -> None:
    book: Ledger[str] = Ledger(AdmissionPolicy(max_in_flight, max_queue, LIMITS))
    model = Model()
    for n, (kind, name, pick) in enumerate(events):
        if kind == "arrive":
            token = f"{name}{n}"
            decision = book.arrive(name, token)
            for shed in decision.shed:
                assert shed in model.waiting and RANK[model.waiting[shed]] > RANK[name]
                del model.waiting[shed]
            {Verdict.RUN: model.running, Verdict.WAIT: model.waiting}.get(
                decision.verdict, {})[token] = name
        elif kind == "release" and model.running:
            token = sorted(model.running)[pick % len(model.running)]
            granted = book.release(model.running.pop(token))
            for owner, waiter in granted:
                assert model.waiting.pop(waiter) == owner
                model.running[waiter] = owner
        elif kind == "withdraw" and model.waiting:
            token = sorted(model.waiting)[pick % len(model.waiting)]
            assert book.withdraw(model.waiting.pop(token), token)
        assert book.in_flight == len(model.running) <= max_in_flight
        assert book.waiting == len(model.waiting) <= max_queue
        for limit in LIMITS:
            count = sum(1 for c in model.running.values() if c == limit.name)
            assert book.in_flight_of(limit.name) == count
            assert limit.max_in_flight is None or count <= limit.max_in_flight
            assert limit.max_queue is None or book.waiting_of(limit.name) <= limit.max_queue
            # Work-conserving: nobody waits who could run.
            if book.waiting_of(limit.name):
                assert book.in_flight == max_in_flight or count == limit.max_in_flight


# ---- the service's asyncio queue over it --------------------------------------------------------


async def test_a_waiter_pushed_out_by_a_higher_class_is_told_so() -> None:
    queue = AdmissionQueue(1, 1, classes=(CHAT, DOC))
    await queue.acquire(1, "chat")
    doc = asyncio.create_task(queue.acquire(5, "doc"))
    await asyncio.sleep(0)
    chat = asyncio.create_task(queue.acquire(5, "chat"))
    with pytest.raises(Shed):
        await doc
    with pytest.raises(QueueFull):
        await queue.acquire(1, "doc")
    queue.release("chat")
    await asyncio.wait_for(chat, 1)
    assert queue.in_flight_of("chat") == 1 and queue.waiting == 0


async def test_a_class_limit_defers_its_requests_only() -> None:
    queue = AdmissionQueue(8, 8, classes=(CHAT, DOC))
    await queue.acquire(1, "doc")
    await queue.acquire(1, "doc")
    third = asyncio.create_task(queue.acquire(5, "doc"))
    await queue.acquire(1, "chat")  # runs at once, past the waiting doc
    await asyncio.sleep(0)
    assert not third.done() and queue.waiting == 1
    queue.release("doc")
    await asyncio.wait_for(third, 1)


async def test_a_slot_granted_to_a_cancelled_waiter_passes_to_the_next_class() -> None:
    queue = AdmissionQueue(1, 4, classes=(CHAT, DOC))
    await queue.acquire(1, "doc")
    doomed = asyncio.create_task(queue.acquire(5, "chat"))
    survivor = asyncio.create_task(queue.acquire(5, "doc"))
    await asyncio.sleep(0)
    doomed.cancel()  # cancels its future at once; its task withdraws it only when it runs
    queue.release("doc")
    with pytest.raises(asyncio.CancelledError):
        await doomed
    await asyncio.wait_for(survivor, 1)
    assert queue.in_flight_of("doc") == 1 and queue.in_flight_of("chat") == 0
