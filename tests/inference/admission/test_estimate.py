"""A prompt's length bounded from its text's bytes, by the prompts tokenized before it."""

from __future__ import annotations

import math

import pytest

from governor.inference.admission.estimate import (
    MARGIN,
    MIN_SAMPLES,
    MIN_TEXT_BYTES,
    WINDOW,
    PromptSizes,
)
from governor.inference.openai.prompts import text_bytes


def learnt(ratios: list[float], size: int = 4000) -> PromptSizes:
    sizes = PromptSizes()
    for ratio in ratios:
        sizes.learn(size, round(size * ratio))
    return sizes


def test_nothing_is_bounded_before_enough_prompts_are_learnt() -> None:
    assert learnt([0.25] * (MIN_SAMPLES - 1)).bounds(8000) is None
    assert learnt([0.25] * MIN_SAMPLES).bounds(8000) is not None


def test_the_bounds_are_the_fewest_and_most_tokens_per_byte_widened_by_the_margin() -> None:
    sizes = learnt([0.2] * MIN_SAMPLES + [0.3])
    tokens_per_byte = (800 / 4000, 1200 / 4000)  # as learnt
    assert sizes.bounds(10_000) == (math.floor(10_000 * tokens_per_byte[0] / MARGIN),
                                    math.ceil(10_000 * tokens_per_byte[1] * MARGIN))


def test_a_short_text_is_neither_learnt_nor_bounded() -> None:
    sizes = learnt([0.25] * MIN_SAMPLES)
    sizes.learn(MIN_TEXT_BYTES - 1, 1)  # a ratio of almost nothing: ignored
    low, _ = sizes.bounds(8000) or (0, 0)
    assert low == int(8000 * 0.25 / MARGIN)
    assert sizes.bounds(MIN_TEXT_BYTES - 1) is None and sizes.bounds(None) is None


def test_a_prompt_of_an_old_kind_is_forgotten_after_a_window_of_others() -> None:
    sizes = learnt([0.1] + [0.25] * (WINDOW - 1))
    assert (sizes.bounds(8000) or (0, 0))[0] == int(8000 * 0.1 / MARGIN)
    sizes.learn(4000, 1000)
    assert (sizes.bounds(8000) or (0, 0))[0] == int(8000 * 0.25 / MARGIN)


def test_an_empty_prompt_or_no_tokens_teaches_nothing() -> None:
    sizes = learnt([0.25] * (MIN_SAMPLES - 1))
    sizes.learn(5000, 0)
    sizes.learn(None, 100)
    assert sizes.bounds(8000) is None


@pytest.mark.parametrize(("decoded", "kind", "expected"), [
    ({"messages": [{"role": "user", "content": "héllo"}]}, "chat", 6),
    ({"messages": [{"role": "system", "content": "ab"},
                   {"role": "user", "content": [{"type": "text", "text": "cd"},
                                                {"type": "text", "text": "€"}]}]}, "chat", 7),
    ({"prompt": "hello"}, "completion", 5),
    ({"prompt": ["hello"]}, "completion", 5),
    ({"prompt": ["a", "b"]}, "completion", None),
    ({"prompt": [1, 2, 3]}, "completion", None),
    ({"messages": "hello"}, "chat", None),
    ({"messages": [{"role": "user"}]}, "chat", None),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "chat", None),
    ({"messages": [["not", "a", "message"]]}, "chat", None),
    ([{"messages": []}], "chat", None),
    ("a string", "completion", None),
    (None, "chat", None),
])
def test_the_text_of_a_decoded_body_is_counted_in_utf8_bytes(
    decoded: object, kind: str, expected: int | None
) -> None:
    assert text_bytes(decoded, kind) == expected  # type: ignore[arg-type]
