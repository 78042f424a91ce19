"""The bounded admission queue: FIFO hand-over, rejection when full, timeouts, cancellation."""

from __future__ import annotations

import asyncio

import pytest

from governor.admission.deadline import Judgement
from governor.admission.policy import ClassLimit
from governor.inference.admission.queue import (
    AdmissionQueue,
    DeadlinePassed,
    QueueFull,
    QueueTimeout,
    Shed,
    Ticket,
)


async def test_slots_are_taken_then_waiters_queue_in_order() -> None:
    queue = AdmissionQueue(max_in_flight=1, max_queue=2)
    await queue.acquire(1)
    order: list[str] = []

    async def wait(name: str) -> None:
        await queue.acquire(5)
        order.append(name)

    first = asyncio.create_task(wait("first"))
    await asyncio.sleep(0)
    second = asyncio.create_task(wait("second"))
    await asyncio.sleep(0)
    assert queue.waiting == 2
    queue.release()
    await first
    queue.release()
    await second
    assert order == ["first", "second"]
    assert queue.in_flight == 1 and queue.waiting == 0


async def test_a_full_queue_rejects_at_once() -> None:
    queue = AdmissionQueue(max_in_flight=1, max_queue=0)
    await queue.acquire(1)
    with pytest.raises(QueueFull):
        await queue.acquire(1)


async def test_a_waiter_times_out_and_leaves_the_queue() -> None:
    queue = AdmissionQueue(max_in_flight=1, max_queue=1)
    await queue.acquire(1)
    with pytest.raises(QueueTimeout):
        await queue.acquire(0.01)
    assert queue.waiting == 0
    queue.release()
    assert queue.in_flight == 0


async def test_a_cancelled_waiter_takes_no_slot() -> None:
    queue = AdmissionQueue(max_in_flight=1, max_queue=4)
    await queue.acquire(1)
    waiter = asyncio.create_task(queue.acquire(5))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert queue.waiting == 0
    queue.release()
    assert queue.in_flight == 0


async def test_a_slot_handed_to_a_waiter_cancelled_at_that_moment_is_passed_on() -> None:
    queue = AdmissionQueue(max_in_flight=1, max_queue=4)
    await queue.acquire(1)
    doomed = asyncio.create_task(queue.acquire(5))
    survivor = asyncio.create_task(queue.acquire(5))
    await asyncio.sleep(0)
    queue.release()  # hands the slot to `doomed`…
    doomed.cancel()  # …which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await doomed
    await asyncio.wait_for(survivor, 1)
    assert queue.in_flight == 1 and queue.waiting == 0


async def test_nothing_is_lost_under_a_burst() -> None:
    queue = AdmissionQueue(max_in_flight=4, max_queue=16)
    done = 0
    rejected = 0

    async def request() -> None:
        nonlocal done, rejected
        try:
            async with queue.slot(5):
                await asyncio.sleep(0.001)
                done += 1
        except QueueFull:
            rejected += 1

    await asyncio.gather(*(request() for _ in range(100)))
    assert done + rejected == 100
    assert done >= 20
    assert queue.in_flight == 0 and queue.waiting == 0


async def test_a_waiter_is_shed_when_its_deadline_passes_and_leaves_the_backlog() -> None:
    queue = AdmissionQueue(max_in_flight=1, max_queue=4, first_token_targets={"default": 0.05})
    running = await queue.acquire(1, tokens=100)
    with pytest.raises(DeadlinePassed) as shed:
        await queue.acquire(5, tokens=300)  # the queue timeout is longer: the deadline decides
    assert shed.value.retry_after_seconds >= 1
    assert queue.waiting == 0 and queue.gate.queued_tokens == 0
    assert queue.gate.pending_tokens == 100
    queue.release(ticket=running)
    assert queue.in_flight == 0 and queue.gate.pending_tokens == 0


async def test_a_deadline_longer_than_the_queue_timeout_leaves_it_a_timeout() -> None:
    queue = AdmissionQueue(max_in_flight=1, max_queue=4, first_token_targets={"default": 30.0})
    await queue.acquire(1)
    with pytest.raises(QueueTimeout):
        await queue.acquire(0.01)


async def test_a_waiter_shed_for_a_higher_class_leaves_the_backlog() -> None:
    queue = AdmissionQueue(max_in_flight=1, max_queue=1,
                           classes=(ClassLimit("chat", 0), ClassLimit("doc", 10)))
    await queue.acquire(1, "doc", tokens=10)
    doc = asyncio.create_task(queue.acquire(5, "doc", tokens=5000))
    await asyncio.sleep(0)
    assert queue.gate.queued_tokens == 5000
    chat = asyncio.create_task(queue.acquire(5, "chat", tokens=200))
    with pytest.raises(Shed):
        await doc
    assert queue.gate.queued_tokens == 200
    queue.release("doc")
    ticket = await chat
    assert queue.gate.pending_tokens == 210
    queue.first_token(ticket)
    assert queue.gate.pending_tokens == 10


def test_a_request_is_judged_before_its_count_by_the_fewest_and_most_tokens_it_may_have() -> None:
    now = [0.0]
    queue = AdmissionQueue(max_in_flight=8, max_queue=8, first_token_targets={"default": 1.0},
                           clock=lambda: now[0])
    first, second = Ticket("default", Judgement(True)), Ticket("default", Judgement(True))
    queue.gate.track(first, "default", 1000, 0.0, waiting=False)
    now[0] = 1.0
    queue.gate.first_token(first, 1.0)  # 1 000 tokens a second
    queue.gate.track(second, "default", 600, 1.0, waiting=False)  # 0.6 s ahead
    names = ("default",)
    assert queue.refused_with_at_least(names, 300, waited=0.0) is None
    refused = queue.refused_with_at_least(names, 500, waited=0.0)
    assert refused is not None and refused["default"].reason == "deadline"
    assert not queue.may_refuse(names, 300, waited=0.0)
    assert queue.may_refuse(names, 500, waited=0.0)
    assert queue.may_refuse(names, 300, waited=0.2)  # less of its deadline left
