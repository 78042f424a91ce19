"""Where one request's time goes: a clock that cuts its life into stages that add up.

A :class:`StageClock` starts at the request's first byte and is moved forward by whoever knows
which stage just ended: the reading of the body, the text threads (their timestamps, applied on
the event loop), the admission queue, the engine (split by the engine's own timestamps), each
write. Each mark gives the time since the previous mark to one stage, so the stages are
contiguous intervals of one monotonic clock and add up to the request's duration exactly; time
no mark named goes to ``other``::

    clock = StageClock(first_byte_at)
    clock.reach(Stage.READ)                        # the body is in hand
    clock.reach_all(((Stage.PARSE, t1), (Stage.TOKENIZE, t2)))   # stamped in a thread
    clock.split(((Stage.ENGINE_QUEUE, 0.02), (Stage.PREFILL, 0.1)))  # at the first token
    before_first = clock.first_token()             # the stages before it, final: observe them
    stages = clock.finish()                        # a RequestStages; sum == duration

A mark costs a clock read and a dict update, a dozen per request; the tokens of a stream cost
no mark each (:mod:`governor.inference.openai.generation` sums their writes and splits the stream
once).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from math import inf
from time import perf_counter
from types import MappingProxyType
from typing import Final, NamedTuple

from governor.contracts.stages import BEFORE_FIRST_TOKEN, Stage


class RequestStages(NamedTuple):
    """One request's seconds in each stage (every stage, in order), which add up to
    ``duration_seconds``; ``reached_engine``: it was handed to the engine;
    ``reached_first_token``: its stages before the first token were taken at the first token
    (:meth:`StageClock.first_token`), so whoever observed them then observes only the rest at
    the end. The one record of a request's stages: metrics, the span and a request log all take
    it as it is."""

    seconds: Mapping[Stage, float]
    duration_seconds: float
    reached_engine: bool
    reached_first_token: bool = False

    def as_dict(self) -> dict[str, float]:
        """``{"read": 0.0001, …}``: the stages by their label values (for a log line)."""
        return {stage.value: seconds for stage, seconds in self.seconds.items()}


# Every stage at zero, in order: each clock starts from a copy.
_ZERO: Final = dict.fromkeys(Stage, 0.0)


class StageClock:
    """The stages of one request, from ``start`` (``time.perf_counter`` seconds) onwards; the
    time up to ``read`` (default: none) was spent reading it."""

    __slots__ = ("_at", "_seconds", "reached_engine", "reached_first_token", "start")

    def __init__(self, start: float, read: float | None = None) -> None:
        self.start = self._at = start
        self._seconds = _ZERO.copy()
        self.reached_engine = self.reached_first_token = False
        if read is not None and read > start:
            self._seconds[Stage.READ] = read - start
            self._at = read

    @property
    def at(self) -> float:
        """The last mark: everything before it has a stage (infinite once finished)."""
        return self._at

    def reach(self, stage: Stage, at: float | None = None) -> float:
        """The time since the last mark, up to ``at`` (default now), was spent in ``stage``.
        A mark earlier than the last (a thread's stamp read late) counts nothing, and so does
        any mark once the clock has finished. Returns the last mark."""
        now = perf_counter() if at is None else at
        last = self._at
        if now > last:
            self._seconds[stage] += now - last
            self._at = last = now
        return last

    def reach_all(self, marks: Iterable[tuple[Stage, float]]) -> None:
        """Several marks in order, each ``(stage, when it ended)`` (as :meth:`reach`, inline:
        a call per mark cost more than the mark)."""
        seconds, last = self._seconds, self._at
        for stage, at in marks:
            if at > last:
                seconds[stage] += at - last
                last = at
        self._at = last

    def split(self, parts: Iterable[tuple[Stage, float | None]], at: float | None = None,
              rest: Stage = Stage.OTHER) -> None:
        """The time since the last mark, up to ``at`` (default now), shared in order: each part
        takes at most its seconds (``None``: unknown, nothing), ``rest`` the remainder. How the
        engine's own durations (another clock's) are placed inside the wait for it."""
        now = perf_counter() if at is None else at
        seconds, left = self._seconds, now - self._at
        if left > 0.0:
            for stage, part in parts:
                if part is not None and part > 0.0:
                    share = part if part < left else left
                    seconds[stage] += share
                    left -= share
            seconds[rest] += left
            self._at = now

    def first_token(self) -> tuple[float, ...]:
        """At the first token, its wait split (:meth:`split`): the seconds of each stage before
        it (:data:`~governor.contracts.stages.BEFORE_FIRST_TOKEN`, the record's first values).
        No mark after the first token names them, so they are final here, and the first-token
        latency's parts can be observed with it rather than when the stream ends (seconds or
        minutes later)."""
        self.reached_first_token = True
        seconds = self._seconds
        return tuple(seconds[stage] for stage in BEFORE_FIRST_TOKEN)

    def finish(self, at: float | None = None) -> RequestStages:
        """Close the last stage as ``other`` at ``at`` (default now) and return the record.
        The clock stops there: a mark after this (on some error path) counts nothing, so the
        record reads the clock's own counts, uncopied."""
        end = self.reach(Stage.OTHER, at)
        self._at = inf
        return RequestStages(MappingProxyType(self._seconds), end - self.start,
                             self.reached_engine, self.reached_first_token)
