"""The stages of one API request, from its first byte read to its last byte written.

A request's life is cut into contiguous intervals of one monotonic clock, each named by the
stage the request was in, so the stages of one request add up to its duration by construction.
Whatever no named stage explains (the event loop's lag, the hop to the engine's process, the
code between stages) is the stage :data:`Stage.OTHER`, reported like the others::

    >>> [stage.value for stage in Stage][:5]
    ['read', 'text_queue', 'parse', 'render', 'tokenize']
    >>> [stage.value for stage in FIRST_TOKEN.engine]
    ['admission', 'engine_queue', 'prefill']

Each latency a client sees lies on some of the stages (:class:`Path`): the time to the first
token on the stages up to the prefill, the gaps between tokens on decoding and writing. Of
those, the *engine* stages are the ones the batching limits move (the admission queue in front
of the engine fills when the engine is slow to finish requests); the *service* stages are the
service's own work, which no batching limit changes. A latency SLO that burns while its
service stages grew and its engine stages did not is not fixed by batching.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final


class Stage(enum.StrEnum):
    """A request's stages, in the order a request passes them (the ``stage`` label's values).

    The JSON body's decoding and validation is ``parse``: ``decode`` is the engine's, as vLLM
    names the phase after the prefill.
    """

    READ = "read"  # first byte to the body in hand: headers, then the body (its turn apart)
    TEXT_QUEUE = "text_queue"  # waiting for the text threads: a large body's turn, the pool
    PARSE = "parse"  # decoding the JSON body, validating the request
    RENDER = "render"  # the chat template; the prompt's size checked
    TOKENIZE = "tokenize"  # the engine's tokenizer, in a text thread
    ADMISSION = "admission"  # the admission queue: waiting for an engine slot
    ENGINE_QUEUE = "engine_queue"  # the engine's waiting queue (its own timestamps)
    PREFILL = "prefill"  # scheduled to first token (the engine's timestamps)
    DECODE = "decode"  # waiting for the later tokens, at most the engine's own decode time
    STREAM_WRITE = "stream_write"  # encoding and writing the response, the client's pace
    OTHER = "other"  # the remainder: inside no named stage


@dataclass(frozen=True, slots=True)
class Path:
    """The stages a latency lies on: those the batching limits move, and the service's own."""

    engine: tuple[Stage, ...]
    service: tuple[Stage, ...]


# Before the first token: everything up to the prefill.
FIRST_TOKEN: Final = Path(
    engine=(Stage.ADMISSION, Stage.ENGINE_QUEUE, Stage.PREFILL),
    service=(Stage.READ, Stage.TEXT_QUEUE, Stage.PARSE, Stage.RENDER, Stage.TOKENIZE))
# The stages before the first token in the order a request passes them: the first of Stage's,
# so a request's record begins with them (the service observes them at its first token).
BEFORE_FIRST_TOKEN: Final = tuple(stage for stage in Stage
                                  if stage in (*FIRST_TOKEN.engine, *FIRST_TOKEN.service))
# Between tokens: the engine's next token, and writing the last one to the client.
BETWEEN_TOKENS: Final = Path(engine=(Stage.DECODE,), service=(Stage.STREAM_WRITE,))
# The whole request.
WHOLE_REQUEST: Final = Path(engine=(*FIRST_TOKEN.engine, *BETWEEN_TOKENS.engine),
                            service=(*FIRST_TOKEN.service, *BETWEEN_TOKENS.service))


# A service stage's growth counts when it is at least this share of the latency's time per
# request: smaller changes are noise, whatever the engine did.
MATERIAL_SHARE: Final = 0.1


@dataclass(frozen=True, slots=True)
class Shift:
    """How the stages of one latency moved between two windows, in mean seconds per request:
    the stage that grew most (``None`` when none grew), and each side's growth and time now."""

    stage: Stage | None
    stage_growth_seconds: float
    engine_growth_seconds: float
    service_growth_seconds: float
    engine_seconds: float
    service_seconds: float

    @property
    def outside_engine(self) -> bool:
        """The service's own stages grew, materially, and more than the engine's: the time
        went where no batching limit reaches."""
        service = self.service_growth_seconds
        return service > self.engine_growth_seconds and \
            service > MATERIAL_SHARE * (self.engine_seconds + self.service_seconds)


def shift(path: Path, now: Mapping[str, float], before: Mapping[str, float]) -> Shift | None:
    """The :class:`Shift` of ``path``'s stages from ``before`` to ``now`` (mean seconds per
    request by stage label value); ``None`` without a reading of every one of its stages.

    >>> now = {s.value: 0.01 for s in Stage} | {"tokenize": 0.5}
    >>> moved = shift(FIRST_TOKEN, now, {s.value: 0.01 for s in Stage})
    >>> moved.stage.value, round(moved.service_growth_seconds, 2), moved.outside_engine
    ('tokenize', 0.49, True)
    """
    stages = (*path.engine, *path.service)
    if any(stage.value not in now or stage.value not in before for stage in stages):
        return None
    growth = {stage: now[stage.value] - before[stage.value] for stage in stages}
    top = max(stages, key=lambda stage: growth[stage])
    return Shift(top if growth[top] > 0 else None, max(growth[top], 0.0),
                 sum(growth[s] for s in path.engine), sum(growth[s] for s in path.service),
                 sum(now[s.value] for s in path.engine), sum(now[s.value] for s in path.service))
