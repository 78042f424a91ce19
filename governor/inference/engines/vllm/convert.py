"""Shaping between the engine interface and vLLM's objects, without importing vLLM.

Requests become ``SamplingParams`` keyword arguments; ``RequestOutput`` deltas become
:class:`TokenDelta`; vLLM's exceptions become :class:`EngineError` kinds. vLLM objects are read
by attribute and its exceptions by class name, so this module is tested with plain stand-ins and
keeps working when a vLLM release moves a class.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from governor.inference.engines.base import (
    EngineError,
    EngineErrorKind,
    EngineTimes,
    FinishReason,
    GenerateRequest,
    TokenDelta,
)

# A token's spelling has a character for each byte of text it stands for (byte-level BPE) or
# more (SentencePiece's "▁" for a space, "<0x0A>" for a byte). What a normalizer takes in per
# character it hands the model is at most four bytes: NFKC folds U+1D400 (a bold A, four
# bytes) into "A", NFC folds three Hangul jamo (nine bytes) into one syllable (three).
BYTES_PER_SPELLED_CHARACTER = 4
# When the vocabulary cannot be read, no bound: prompts are measured after tokenizing only.
NO_BYTE_BOUND = 2**31

_FINISH = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH, "abort": FinishReason.ABORT}

# vLLM exception class names (any class in the MRO) → the kind the HTTP layer maps to a status.
_KINDS_BY_CLASS = {
    "EngineDeadError": EngineErrorKind.DEAD,
    "QueueOverflowError": EngineErrorKind.OVERLOADED,
    "MaxQueuedTokensError": EngineErrorKind.OVERLOADED,
    "GracefulHTTPError": EngineErrorKind.OVERLOADED,
    "VLLMValidationError": EngineErrorKind.INVALID_REQUEST,
    "VLLMUnprocessableEntityError": EngineErrorKind.INVALID_REQUEST,
    "VLLMClientError": EngineErrorKind.INVALID_REQUEST,
    # Releases before the VLLMError hierarchy raised plain ValueError/TypeError for a request
    # they could not take (prompt too long, bad sampling parameter).
    "ValueError": EngineErrorKind.INVALID_REQUEST,
    "TypeError": EngineErrorKind.INVALID_REQUEST,
}


def sampling_kwargs(request: GenerateRequest) -> dict[str, Any]:
    """Keyword arguments for ``SamplingParams`` (without ``output_kind``, which needs vLLM)."""
    options = request.sampling
    kwargs: dict[str, Any] = {
        "max_tokens": request.max_tokens,
        "temperature": options.temperature,
        "top_p": options.top_p,
        "min_p": options.min_p,
        "presence_penalty": options.presence_penalty,
        "frequency_penalty": options.frequency_penalty,
        "repetition_penalty": options.repetition_penalty,
        "ignore_eos": options.ignore_eos,
        "min_tokens": options.min_tokens,
    }
    # ``None`` means "vLLM's default", whose spelling differs between releases (0 or -1).
    if options.top_k is not None:
        kwargs["top_k"] = options.top_k
    if options.seed is not None:
        kwargs["seed"] = options.seed
    if options.stop:
        kwargs["stop"] = list(options.stop)
    return kwargs


def context_error(
    num_prompt_tokens: int, max_tokens: int, max_model_len: int
) -> EngineError | None:
    """The 400 for a request that cannot fit the model's context, before vLLM sees it."""
    if num_prompt_tokens >= max_model_len:
        return EngineError(
            EngineErrorKind.INVALID_REQUEST,
            f"this model's maximum context length is {max_model_len} tokens, but the prompt "
            f"has {num_prompt_tokens} tokens",
            param="messages",
        )
    if num_prompt_tokens + max_tokens > max_model_len:
        return EngineError(
            EngineErrorKind.INVALID_REQUEST,
            f"max_tokens {max_tokens} plus the prompt's {num_prompt_tokens} tokens exceeds this "
            f"model's maximum context length of {max_model_len} tokens",
            param="max_tokens",
        )
    return None


def max_token_bytes(tokenizer: Any) -> int:
    """An upper bound on the UTF-8 bytes of prompt text one token of ``tokenizer`` covers: its
    longest vocabulary entry (special tokens included), in characters, times
    :data:`BYTES_PER_SPELLED_CHARACTER`. ``NO_BYTE_BOUND`` when the tokenizer has no vocabulary
    to read.

    The bound assumes a normalizer never deletes text (BERT's accent stripping does; the
    tokenizers of the models vLLM serves for chat do not)."""
    try:
        vocabulary = tokenizer.get_vocab()
        longest = max(len(spelling) for spelling in vocabulary)
    except (AttributeError, TypeError, ValueError):
        return NO_BYTE_BOUND
    return max(longest, 1) * BYTES_PER_SPELLED_CHARACTER


def finish_reason(text: str | None) -> FinishReason | None:
    """vLLM's ``finish_reason`` → ours; anything else that ends a request (``error``) aborts it."""
    if text is None:
        return None
    return _FINISH.get(text, FinishReason.ABORT)


@dataclass(frozen=True, slots=True)
class RequestTiming:
    """One finished request's engine-side timestamps (engine-core monotonic seconds)."""

    request_id: str
    queued_ts: float
    scheduled_ts: float
    first_token_ts: float
    last_token_ts: float
    num_generation_tokens: int


def _between(metrics: Any, earlier: str, later: str) -> float | None:
    """``later - earlier`` of two engine-core timestamps of a ``RequestStateStats`` (``None``
    while either is unset, or without stats)."""
    start = getattr(metrics, earlier, 0.0) or 0.0
    end = getattr(metrics, later, 0.0) or 0.0
    if start <= 0.0 or end <= 0.0:
        return None
    return max(0.0, end - start)


def queued_seconds(metrics: Any) -> float | None:
    """Engine-side queue time from a ``RequestStateStats`` (``None`` while unknown)."""
    return _between(metrics, "queued_ts", "scheduled_ts")


def prefill_seconds(metrics: Any) -> float | None:
    """Scheduled to first token; set once the first token is out (preemptions included)."""
    return _between(metrics, "scheduled_ts", "first_token_ts")


def decode_seconds(metrics: Any) -> float | None:
    """First token to last token; final once the request has finished."""
    return _between(metrics, "first_token_ts", "last_token_ts")


def request_timing(request_id: str, metrics: Any) -> RequestTiming | None:
    """The timestamps of a finished request, when vLLM recorded them (stat logging on)."""
    if metrics is None or not getattr(metrics, "scheduled_ts", 0.0):
        return None
    return RequestTiming(
        request_id=request_id,
        queued_ts=float(metrics.queued_ts),
        scheduled_ts=float(metrics.scheduled_ts),
        first_token_ts=float(metrics.first_token_ts),
        last_token_ts=float(metrics.last_token_ts),
        num_generation_tokens=int(metrics.num_generation_tokens),
    )


def delta(output: Any, *, first: bool) -> TokenDelta:
    """A ``RequestOutput`` in DELTA mode → the interface's :class:`TokenDelta`."""
    completion = output.outputs[0] if output.outputs else None
    text = completion.text if completion is not None else ""
    num_tokens = len(completion.token_ids) if completion is not None else 0
    reason = finish_reason(completion.finish_reason if completion is not None else None)
    if output.finished and reason is None:
        reason = FinishReason.ABORT
    cached = getattr(output, "num_cached_tokens", None) if output.finished else None
    return TokenDelta(
        text=text,
        num_tokens=num_tokens,
        finish_reason=reason,
        times=times(output.metrics, first=first, last=output.finished)
        if first or output.finished else None,
        cached_prompt_tokens=cached,
    )


def times(metrics: Any, *, first: bool, last: bool) -> EngineTimes:
    """What a ``RequestStateStats`` says of a request: its queue and prefill (for the first
    delta), its decode (for the last)."""
    return EngineTimes(queued_seconds(metrics) if first else None,
                       prefill_seconds(metrics) if first else None,
                       decode_seconds(metrics) if last else None)


def _message(error: BaseException) -> str:
    text = str(error).strip()
    return text or type(error).__name__


def classify_error(error: BaseException) -> EngineError | None:
    """The :class:`EngineError` for a vLLM exception, or ``None`` for an unexpected one."""
    if isinstance(error, EngineError):
        return error
    for cls in type(error).__mro__:
        kind = _KINDS_BY_CLASS.get(cls.__name__)
        if kind is None:
            continue
        if kind is EngineErrorKind.DEAD:
            return EngineError(kind, "the vLLM engine has died; the service must be restarted")
        param = getattr(error, "parameter", None)
        return EngineError(kind, _message(error), param=param if isinstance(param, str) else None)
    return None
