"""Who holds the service's connections, and whether a client may open one more (no sockets).

A client address has a share of the connections (``max_connections_per_client``), so that one
client cannot take them all; past its share, or past ``max_connections`` in all, a connection
gets no regular place. It may still take one of a few reserved places, which the listener gives
only to a whole ``/health`` or ``/metrics`` request, once its head has arrived
(:mod:`governor.inference.http.listener`): at most :data:`RESERVED_CONNECTIONS` at once,
:data:`RESERVED_PER_CLIENT` per address, so that one client cannot take them all for the time
its requests are answered either::

    book = ConnectionBook(total=4, per_client=2)
    book.refusal("10.0.0.7")                  # None: it may open one
    place = book.take("10.0.0.7")
    book.take("10.0.0.7"); book.refusal("10.0.0.7")   # 'max_connections_per_client'
    book.may_reserve("10.0.0.7")              # True: a reserved place is free
    book.give_back(place)

Memory is bounded by the connections open: an address is forgotten when it holds none.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Final

from governor.contracts.metrics.service import (
    REASON_MAX_CONNECTIONS,
    REASON_MAX_CONNECTIONS_PER_CLIENT,
)

# Places past the limits for /health and /metrics: probes and one or two Prometheus servers.
RESERVED_CONNECTIONS: Final = 16
# Liveness and readiness probes from one node, or a scrape and a probe, at the same moment.
RESERVED_PER_CLIENT: Final = 2


@dataclass(frozen=True, slots=True)
class Place:
    """One open connection's place: its client's address, and whether it is a reserved one."""

    peer: str
    reserved: bool = False


class ConnectionBook:
    def __init__(self, total: int, per_client: int, *, reserved: int = RESERVED_CONNECTIONS,
                 reserved_per_client: int = RESERVED_PER_CLIENT) -> None:
        self._total, self._per_client = total, per_client
        self._reserved, self._reserved_per_client = reserved, reserved_per_client
        self._regular: Counter[str] = Counter()
        self._spare: Counter[str] = Counter()
        self.open = 0  # connections holding a regular place
        self.reserved_open = 0

    @property
    def clients(self) -> int:
        """Addresses remembered: those holding a place."""
        return len(self._regular.keys() | self._spare.keys())

    def refusal(self, peer: str) -> str | None:
        """Why ``peer`` may not open one more regular connection (a ``reason`` of
        ``governor_connections_refused_total``); ``None`` when it may."""
        if self.open >= self._total:
            return REASON_MAX_CONNECTIONS
        if self._regular[peer] >= self._per_client:
            return REASON_MAX_CONNECTIONS_PER_CLIENT
        return None

    def may_reserve(self, peer: str) -> bool:
        return (self.reserved_open < self._reserved
                and self._spare[peer] < self._reserved_per_client)

    def take(self, peer: str, *, reserved: bool = False) -> Place:
        """A place for ``peer``; the caller asked :meth:`refusal` or :meth:`may_reserve`."""
        if reserved:
            self._spare[peer] += 1
            self.reserved_open += 1
        else:
            self._regular[peer] += 1
            self.open += 1
        return Place(peer, reserved)

    def give_back(self, place: Place) -> None:
        if place.reserved:
            self.reserved_open -= 1
            _forget_one(self._spare, place.peer)
        else:
            self.open -= 1
            _forget_one(self._regular, place.peer)


def _forget_one(held: Counter[str], peer: str) -> None:
    held[peer] -= 1
    if held[peer] <= 0:
        del held[peer]
