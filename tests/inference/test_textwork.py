"""Turns for large requests go round the clients; none is lost, none held twice."""

from __future__ import annotations

import asyncio
import random

import pytest

from governor.inference.textwork import FairTurns


async def waiter(turns: FairTurns, peer: str, name: str, order: list[str]) -> None:
    await turns.acquire(peer)
    order.append(name)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_freed_turn_goes_to_the_peer_holding_fewest_then_served_longest_ago() -> None:
    turns, order = FairTurns(1), list[str]()
    await turns.acquire("a")  # a's first request holds the turn
    tasks = [asyncio.create_task(waiter(turns, peer, name, order))
             for peer, name in [("a", "a2"), ("a", "a3"), ("a", "a4"), ("b", "b1"),
                                ("c", "c1"), ("b", "b2")]]
    await settle()
    assert order == [] and turns.waiting == 6
    holder = "a"
    for _ in tasks:
        turns.release(holder)
        await settle()
        holder = order[-1][0]
    assert order == ["b1", "c1", "a2", "b2", "a3", "a4"]
    await asyncio.gather(*tasks)
    turns.release(holder)
    assert turns.remembered == 0  # nobody holds or waits: nobody is remembered


async def test_with_two_slots_a_peer_holding_one_waits_behind_a_peer_holding_none() -> None:
    turns, order = FairTurns(2), list[str]()
    await turns.acquire("a")
    await turns.acquire("b")
    tasks = [asyncio.create_task(waiter(turns, "b", "b2", order)),
             asyncio.create_task(waiter(turns, "c", "c1", order))]
    await settle()
    turns.release("a")  # b still holds one, c none
    await settle()
    assert order == ["c1"]
    turns.release("b")
    await asyncio.gather(*tasks)
    assert order == ["c1", "b2"]


async def test_a_waiter_that_gives_up_leaves_its_place() -> None:
    turns, order = FairTurns(1), list[str]()
    await turns.acquire("a")
    gone = asyncio.create_task(waiter(turns, "b", "b1", order))
    stays = asyncio.create_task(waiter(turns, "c", "c1", order))
    await settle()
    gone.cancel()
    await settle()
    assert turns.waiting == 1
    turns.release("a")
    await stays
    assert order == ["c1"] and gone.cancelled()


async def test_a_turn_handed_to_a_waiter_as_it_is_cancelled_goes_on_to_the_next() -> None:
    turns, order = FairTurns(1), list[str]()
    await turns.acquire("a")
    unlucky = asyncio.create_task(waiter(turns, "b", "b1", order))
    next_one = asyncio.create_task(waiter(turns, "c", "c1", order))
    await settle()
    turns.release("a")  # b1's turn is set...
    unlucky.cancel()  # ...and b1 is cancelled before it runs
    await asyncio.wait_for(next_one, 1)
    assert order == ["c1"] and unlucky.cancelled()


async def test_a_turn_with_nobody_waiting_is_kept_for_the_next_comer() -> None:
    turns = FairTurns(2)
    await turns.acquire("a")
    await turns.acquire("a")
    turns.release("a")
    await asyncio.wait_for(turns.acquire("b"), 1)  # at once: a slot was free


@pytest.mark.parametrize("seed", range(5))
async def test_never_more_holders_than_slots_and_every_waiter_served(seed: int) -> None:
    rng = random.Random(seed)
    slots = rng.randint(1, 3)
    turns, holders, most, served = FairTurns(slots), 0, 0, 0

    async def one(peer: str) -> None:
        nonlocal holders, most, served
        try:
            await asyncio.wait_for(turns.acquire(peer), rng.choice([0.001, 0.05, 5.0]))
        except TimeoutError:
            return
        holders += 1
        most = max(most, holders)
        await asyncio.sleep(rng.random() / 500)
        holders -= 1
        served += 1
        turns.release(peer)

    await asyncio.gather(*(one(rng.choice("abcd")) for _ in range(200)))
    assert most <= slots and served > 0
    assert turns.waiting == 0 and turns.remembered == 0
    # every slot came back: as many acquire at once as there are slots
    await asyncio.wait_for(asyncio.gather(*(turns.acquire("z") for _ in range(slots))), 1)
