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
# Between tokens: the engine's next token, and writing the last one to the client.
BETWEEN_TOKENS: Final = Path(engine=(Stage.DECODE,), service=(Stage.STREAM_WRITE,))
# The whole request.
WHOLE_REQUEST: Final = Path(engine=(*FIRST_TOKEN.engine, *BETWEEN_TOKENS.engine),
                            service=(*FIRST_TOKEN.service, *BETWEEN_TOKENS.service))
