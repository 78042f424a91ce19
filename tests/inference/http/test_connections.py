"""The book of connection places: a share per client address, a few reserved places, no leaks."""

from __future__ import annotations

from governor.contracts.metrics import service as svc
from governor.inference.http.connections import ConnectionBook


def test_a_client_past_its_share_is_refused_while_others_still_get_in() -> None:
    book = ConnectionBook(total=4, per_client=2)
    places = [book.take("a"), book.take("a")]
    assert book.refusal("a") == svc.REASON_MAX_CONNECTIONS_PER_CLIENT
    assert book.refusal("b") is None
    places += [book.take("b"), book.take("c")]
    assert book.refusal("d") == svc.REASON_MAX_CONNECTIONS  # the cap first: nobody gets in
    book.give_back(places[0])
    assert book.refusal("a") is None


def test_reserved_places_are_few_and_shared_out_by_address() -> None:
    book = ConnectionBook(total=1, per_client=1, reserved=3, reserved_per_client=2)
    held = [book.take("a", reserved=True), book.take("a", reserved=True)]
    assert not book.may_reserve("a")
    assert book.may_reserve("b")
    book.take("b", reserved=True)
    assert not book.may_reserve("c")  # all three taken
    book.give_back(held[0])
    assert book.may_reserve("c") and book.may_reserve("a")
    assert (book.open, book.reserved_open) == (0, 2)


def test_an_address_is_forgotten_when_it_holds_nothing() -> None:
    book = ConnectionBook(total=10_000, per_client=10_000)
    places = [book.take(f"10.0.{n // 256}.{n % 256}") for n in range(5000)]
    places += [book.take("10.0.0.1", reserved=True)]
    assert book.clients == 5000
    for place in places:
        book.give_back(place)
    assert (book.clients, book.open, book.reserved_open) == (0, 0, 0)
