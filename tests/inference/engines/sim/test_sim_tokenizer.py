"""The simulated tokenizer and answers: exact counts, determinism, stop conditions, odd input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from governor.inference.engines.base import FinishReason, SamplingOptions
from governor.inference.engines.sim.tokenizer import (
    MAX_TOKEN_BYTES,
    SimTokenizer,
    echo_source,
    pieces,
    plan_output,
    render_chat,
    translate,
)

VOCAB = 32000


def streamed(prompt: str, max_tokens: int, sampling: SamplingOptions) -> str:
    plan = plan_output(prompt, max_tokens, sampling)
    text = plan.text(0, plan.num_tokens)
    return text if plan.text_limit is None else text[: plan.text_limit]


def test_pieces_cover_the_text_exactly() -> None:
    text = "Hello,  wonderful world!\n12345 héllo_x 😀 "
    assert "".join(pieces(text)) == text
    assert pieces("internationalisation") == ["intern", "ationa", "lisati", "on"]


def test_ids_are_deterministic_and_in_the_vocabulary() -> None:
    a, b = SimTokenizer(VOCAB), SimTokenizer(VOCAB)
    ids = a.encode("The same words, the same ids.")
    assert ids == b.encode("The same words, the same ids.")
    assert all(3 <= i < VOCAB for i in ids)
    assert a.encode("shared prefix then A")[:3] == a.encode("shared prefix then B")[:3]


def test_the_answer_echoes_the_last_user_turn_translated() -> None:
    prompt = render_chat(
        [
            {"role": "system", "content": "You translate."},
            {"role": "user", "content": "First question"},
            {"role": "assistant", "content": "Answer"},
            {"role": "user", "content": "Translate this sentence"},
        ]
    )
    assert echo_source(prompt) == "Translate this sentence"
    plan = plan_output(prompt, 100)
    assert plan.text(0, plan.num_tokens) == translate("Translate this sentence")
    assert plan.finish_reason is FinishReason.STOP
    assert plan.num_tokens == len(pieces(translate("Translate this sentence")))


def test_max_tokens_cuts_the_answer_with_length() -> None:
    plan = plan_output("one two three four five six", 3)
    assert (plan.num_tokens, plan.finish_reason) == (3, FinishReason.LENGTH)


def test_ignore_eos_repeats_the_echo_up_to_max_tokens() -> None:
    plan = plan_output("hello", 7, SamplingOptions(ignore_eos=True))
    assert (plan.num_tokens, plan.finish_reason) == (7, FinishReason.LENGTH)
    assert plan.text(0, 7) == " ".join([translate("hello")] * 7)


def test_min_tokens_keeps_going_then_stops() -> None:
    plan = plan_output("hello", 50, SamplingOptions(min_tokens=5))
    assert (plan.num_tokens, plan.finish_reason) == (5, FinishReason.STOP)


def test_a_stop_string_ends_the_answer_and_is_cut_from_the_text() -> None:
    sampling = SamplingOptions(stop=("thos",))
    assert streamed("Translate this sentence", 50, sampling) == "Trensleti "
    plan = plan_output("Translate this sentence", 50, sampling)
    assert plan.finish_reason is FinishReason.STOP
    assert plan.num_tokens == 3  # "Trensl", "eti", " thos"


def test_a_stop_string_before_min_tokens_is_ignored() -> None:
    sampling = SamplingOptions(stop=("Trensl",), min_tokens=2, ignore_eos=True)
    plan = plan_output("Translate", 10, sampling)
    assert plan.num_tokens > 2
    assert plan.finish_reason is FinishReason.STOP


def test_unmatched_and_empty_stop_strings_change_nothing() -> None:
    plain = plan_output("abc def", 10)
    assert plan_output("abc def", 10, SamplingOptions(stop=("", "zzz"))) == plain


def test_an_empty_prompt_gets_filler() -> None:
    assert plan_output("   ", 5).num_tokens == 5


@settings(max_examples=200, deadline=None)
@given(
    prompt=st.text(max_size=300),
    max_tokens=st.integers(min_value=1, max_value=400),
    ignore_eos=st.booleans(),
)
def test_streamed_text_retokenizes_to_the_streamed_count(
    prompt: str, max_tokens: int, ignore_eos: bool
) -> None:
    plan = plan_output(prompt, max_tokens, SamplingOptions(ignore_eos=ignore_eos))
    tokenizer = SimTokenizer(VOCAB)
    for stop in {1, plan.num_tokens // 2, plan.num_tokens}:
        if stop >= 1:
            assert len(tokenizer.encode(plan.text(0, stop))) == stop
    assert 1 <= plan.num_tokens <= max_tokens


@pytest.mark.parametrize(
    "text",
    ["", "\x00\x01\x02", "\ud800 lone surrogate", "a" * 100_000, "🙂" * 1000, "\n" * 50],
)
def test_hostile_text_tokenizes_without_error(text: str) -> None:
    ids = SimTokenizer(VOCAB).encode(text)
    assert len(ids) == len(pieces(text))


WHITESPACE = st.sampled_from([" ", "\t", "\n", "\u3000", "\u2028", "\x85", "\xa0"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.characters(exclude_categories=()) | WHITESPACE | st.just(" " * 40),
                max_size=60).map("".join))
def test_no_token_covers_more_than_max_token_bytes(text: str) -> None:
    """What lets the service refuse a prompt by its bytes before tokenizing it."""
    found = pieces(text)
    assert "".join(found) == text
    for piece in found:
        assert len(piece.encode("utf-8", "surrogatepass")) <= MAX_TOKEN_BYTES, repr(piece)
    assert len(text.encode("utf-8", "surrogatepass")) <= MAX_TOKEN_BYTES * len(found)


def test_a_long_run_of_whitespace_is_many_tokens() -> None:
    assert len(pieces(" " * 1000 + "x")) == 63  # 62 runs of 16 spaces, then 8 spaces and "x"
