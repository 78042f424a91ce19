"""Shaping between the engine interface and vLLM's objects, on stand-ins (no vLLM needed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from governor.inference.engines.base import (
    EngineError,
    EngineErrorKind,
    EngineTimes,
    FinishReason,
    GenerateRequest,
    SamplingOptions,
)
from governor.inference.engines.vllm import convert


@dataclass
class Completion:
    text: str
    token_ids: list[int]
    finish_reason: str | None = None


@dataclass
class Metrics:
    queued_ts: float = 10.0
    scheduled_ts: float = 10.25
    first_token_ts: float = 10.5
    last_token_ts: float = 11.0
    num_generation_tokens: int = 4


@dataclass
class Output:
    outputs: list[Completion]
    finished: bool = False
    metrics: Any = field(default_factory=Metrics)
    num_cached_tokens: int = 16


def test_sampling_options_map_to_vllm_keywords_and_defaults_stay_vllms() -> None:
    plain = convert.sampling_kwargs(GenerateRequest("r", "", (1, 2), 7))
    assert plain["max_tokens"] == 7
    assert {"top_k", "seed", "stop"}.isdisjoint(plain)
    tuned = convert.sampling_kwargs(GenerateRequest(
        "r", "", (1,), 3,
        SamplingOptions(temperature=0.2, top_k=40, seed=5, stop=("\n", "END"), min_tokens=2,
                        presence_penalty=0.5, ignore_eos=True),
    ))
    assert tuned["top_k"] == 40 and tuned["seed"] == 5 and tuned["stop"] == ["\n", "END"]
    assert tuned["temperature"] == 0.2 and tuned["min_tokens"] == 2
    assert tuned["presence_penalty"] == 0.5 and tuned["ignore_eos"] is True


def test_the_first_delta_carries_queue_and_prefill_and_the_last_decode_and_cached_tokens(
) -> None:
    first = convert.delta(Output([Completion("Hel", [5, 6])]), first=True)
    assert (first.text, first.num_tokens, first.finish_reason) == ("Hel", 2, None)
    assert first.times is not None and first.cached_prompt_tokens is None
    assert first.times.queued_seconds == pytest.approx(0.25)
    assert first.times.prefill_seconds == pytest.approx(0.25)
    assert first.times.decode_seconds is None
    middle = convert.delta(Output([Completion("l", [7])]), first=False)
    assert middle.times is None
    last = convert.delta(Output([Completion("lo", [7], "length")], finished=True), first=False)
    assert last.finish_reason is FinishReason.LENGTH and last.times is not None
    assert last.times.queued_seconds is None and last.times.prefill_seconds is None
    assert last.times.decode_seconds == pytest.approx(0.5) and last.cached_prompt_tokens == 16


def test_an_engine_time_is_unknown_while_either_of_its_timestamps_is_unset() -> None:
    first = convert.delta(Output([Completion("a", [1])], metrics=Metrics(first_token_ts=0.0)),
                          first=True)
    assert first.times is not None
    assert first.times.queued_seconds == pytest.approx(0.25)
    assert first.times.prefill_seconds is None


@pytest.mark.parametrize(
    ("reason", "expected"),
    [("stop", FinishReason.STOP), ("length", FinishReason.LENGTH),
     ("abort", FinishReason.ABORT), ("error", FinishReason.ABORT), (None, None)],
)
def test_finish_reasons(reason: str | None, expected: FinishReason | None) -> None:
    assert convert.finish_reason(reason) is expected


def test_a_finished_output_without_a_reason_still_ends_the_stream() -> None:
    delta = convert.delta(Output([], finished=True, metrics=None), first=True)
    assert delta.finish_reason is FinishReason.ABORT and delta.num_tokens == 0
    assert delta.times == EngineTimes()  # no stats: nothing known


def test_timings_need_stat_logging() -> None:
    assert convert.request_timing("r", None) is None
    assert convert.request_timing("r", Metrics(scheduled_ts=0.0)) is None
    timing = convert.request_timing("r", Metrics())
    assert timing is not None and timing.scheduled_ts == 10.25 and timing.num_generation_tokens == 4


# Stand-ins named like vLLM's exception classes: classification is by name along the MRO.
class VLLMError(Exception):
    pass


class VLLMClientError(VLLMError):
    pass


class VLLMValidationError(VLLMClientError):
    def __init__(self, message: str, parameter: str | None = None) -> None:
        super().__init__(message)
        self.parameter = parameter


class VLLMServerError(VLLMError):
    pass


class EngineDeadError(VLLMServerError):
    pass


class EngineGenerateError(VLLMServerError):
    pass


class GracefulHTTPError(VLLMError):
    pass


class QueueOverflowError(GracefulHTTPError):
    pass


@pytest.mark.parametrize(
    ("error", "kind", "param"),
    [
        (VLLMValidationError("temperature must be non-negative", "temperature"),
         EngineErrorKind.INVALID_REQUEST, "temperature"),
        (VLLMClientError("bad"), EngineErrorKind.INVALID_REQUEST, None),
        (ValueError("prompt too long"), EngineErrorKind.INVALID_REQUEST, None),
        (EngineDeadError(), EngineErrorKind.DEAD, None),
        (QueueOverflowError("queue full"), EngineErrorKind.OVERLOADED, None),
    ],
    ids=["validation", "client", "plain ValueError (older vLLM)", "dead", "queue overflow"],
)
def test_vllm_errors_map_to_engine_error_kinds(
    error: Exception, kind: EngineErrorKind, param: str | None
) -> None:
    mapped = convert.classify_error(error)
    assert mapped is not None and mapped.kind is kind and mapped.param == param
    assert mapped.message


def test_unexpected_errors_are_not_disguised_as_the_clients_mistake() -> None:
    assert convert.classify_error(EngineGenerateError()) is None
    assert convert.classify_error(RuntimeError("boom")) is None
    already = EngineError(EngineErrorKind.DEAD, "gone")
    assert convert.classify_error(already) is already


def test_requests_that_cannot_fit_the_context_are_refused_with_the_right_param() -> None:
    assert convert.context_error(100, 28, 128) is None
    too_long = convert.context_error(128, 1, 128)
    assert too_long is not None and too_long.param == "messages" and "128" in too_long.message
    too_many = convert.context_error(100, 29, 128)
    assert too_many is not None and too_many.param == "max_tokens"


class Vocabulary:
    def __init__(self, *spellings: str) -> None:
        self._vocabulary = {spelling: index for index, spelling in enumerate(spellings)}

    def get_vocab(self) -> dict[str, int]:
        return self._vocabulary


@pytest.mark.parametrize(
    ("tokenizer", "expected"),
    [
        pytest.param(Vocabulary("a", "ĠĠĠĠ", "<|begin_of_text|>"), 17 * 4,
                     id="byte-level BPE: the longest spelling, a special token, four bytes each"),
        pytest.param(Vocabulary("▁the", "<0x0A>"), 6 * 4, id="SentencePiece"),
        pytest.param(Vocabulary(), convert.NO_BYTE_BOUND, id="an empty vocabulary"),
        pytest.param(object(), convert.NO_BYTE_BOUND, id="no vocabulary to read"),
    ],
)
def test_the_bound_on_bytes_per_token_comes_from_the_longest_spelling(
    tokenizer: object, expected: int
) -> None:
    assert convert.max_token_bytes(tokenizer) == expected
