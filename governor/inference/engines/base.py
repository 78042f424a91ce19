"""The one small interface every engine implements, and the plain data it speaks.

The HTTP layer never sees vLLM or the simulator directly: it tokenizes through the engine,
asks it to ``generate`` (an async stream of token deltas), aborts on disconnect, and moves the
batching limits. Engines register their own ``vllm:*`` series into the registry they are given.
Rendering and tokenizing are plain functions: the service runs them in threads of its own, so
that a long prompt never stalls the event loop that streams everyone's tokens.

Use::

    engine = create_engine(...)                  # see inference.engines.registry
    await engine.start()
    ids = engine.tokenize("hello world")         # in a worker thread, in the service
    request = GenerateRequest("r1", "hello world", tuple(ids), max_tokens=16)
    async for delta in engine.generate(request):
        print(delta.text, delta.finish_reason)
    await engine.close()
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, runtime_checkable

from governor.contracts.batching import BatchingLimits

__all__ = ["BatchingLimits"]  # the admin contract's, re-exported for the engines that speak it


@dataclass(frozen=True, slots=True)
class SamplingOptions:
    """The OpenAI sampling parameters an engine may honour (vLLM honours all of them)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int | None = None
    min_p: float = 0.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    ignore_eos: bool = False
    min_tokens: int = 0


@dataclass(frozen=True, slots=True)
class GenerateRequest:
    request_id: str
    prompt: str
    prompt_token_ids: tuple[int, ...]
    max_tokens: int
    sampling: SamplingOptions = SamplingOptions()
    # W3C trace context (``traceparent``/``tracestate``) for engines that emit their own spans.
    trace_headers: Mapping[str, str] = field(default_factory=dict)
    priority: int = 0


class FinishReason(enum.StrEnum):
    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"


class EngineTimes(NamedTuple):
    """One request's phases as the engine measured them, on its own clock (``None``: not
    known): its queue (scheduled - queued), prefill (first token - scheduled) and decode (last
    token - first token). A named tuple: one is made for every request."""

    queued_seconds: float | None = None
    prefill_seconds: float | None = None
    decode_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class TokenDelta:
    """New output since the previous delta (one or more tokens)."""

    text: str
    num_tokens: int
    finish_reason: FinishReason | None = None
    # The engine's own times for this request: on the first delta its queue and prefill, on
    # the last its decode, when the engine knows them (one field: a delta is made per token).
    times: EngineTimes | None = None
    # Prompt tokens served from the prefix cache, reported on the final delta when known.
    cached_prompt_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class EngineStats:
    num_requests_running: int
    num_requests_waiting: int
    kv_cache_usage_ratio: float


class EngineErrorKind(enum.Enum):
    INVALID_REQUEST = "invalid_request"  # the client's mistake → 400
    OVERLOADED = "overloaded"  # the engine will not take more now → 503 with Retry-After
    DEAD = "dead"  # the engine died; /health turns 503 → 503
    UNSUPPORTED = "unsupported"  # e.g. live retuning on a vLLM version without the hooks


class EngineError(Exception):
    """An engine failure with the kind the HTTP layer maps to a status code."""

    def __init__(self, kind: EngineErrorKind, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.param = param


@runtime_checkable
class Engine(Protocol):
    """What the service needs from an engine. Both ``sim`` and ``vllm`` implement it."""

    @property
    def system(self) -> str:
        """``gen_ai.provider.name`` of the spans: ``"vllm"`` (``sim`` imitates vLLM)."""

    @property
    def model_name(self) -> str: ...

    @property
    def max_model_len(self) -> int:
        """Prompt plus output tokens may not exceed this."""

    @property
    def max_token_bytes(self) -> int:
        """At most this many UTF-8 bytes of text make one token of this engine's tokenizer.

        A prompt longer than ``max_model_len * max_token_bytes`` bytes cannot fit the context
        whatever it says, so the service refuses it without tokenizing it. Meaningful once the
        engine has started (vLLM reads it from the model's vocabulary).
        """

    @property
    def ready(self) -> bool:
        """True once started and while alive; ``/health`` answers 503 otherwise."""

    @property
    def limits(self) -> BatchingLimits:
        """The limits in force now."""

    @property
    def floor(self) -> BatchingLimits:
        """The lowest limits ``set_limits`` accepts."""

    @property
    def ceiling(self) -> BatchingLimits:
        """The start-up limits; ``set_limits`` never goes above them."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def tokenize(self, text: str) -> Sequence[int]:
        """The prompt's token ids. CPU work the service runs in its text threads, several at
        once: it must be thread-safe, and must not touch the event loop."""

    def render_chat(self, messages: Sequence[Mapping[str, str]]) -> str:
        """Apply the model's chat template to ``[{"role":…, "content":…}, …]``. Called from the
        text threads, like :meth:`tokenize`."""

    def generate(self, request: GenerateRequest) -> AsyncIterator[TokenDelta]:
        """Stream deltas; the last one carries ``finish_reason``.

        Raises :class:`EngineError` (before the first delta) for a request it cannot take.
        Closing the iterator early (client gone) must abort the request in the engine.
        """

    async def abort(self, request_id: str) -> None: ...

    async def set_limits(self, limits: BatchingLimits) -> BatchingLimits:
        """Apply new limits to the running engine, without a restart; returns what is in force.

        The caller has validated ``floor <= limits <= ceiling``. Raises :class:`EngineError`
        (``UNSUPPORTED``) where the engine cannot be retuned live.
        """

    async def ranks(self) -> list[dict[str, Any]] | None:
        """Each data-parallel rank's report of itself (``governor.contracts.engine_core.
        rank_report``), for the admin API's answer; None for an engine without ranks. Raises
        :class:`EngineError` when the engine does not answer."""

    def stats(self) -> EngineStats: ...
