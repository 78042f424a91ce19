"""The tokenizer cost by language: prompts of equal bytes by language, a BPE tokenizer built here,
and each language's cost against English's."""

from __future__ import annotations

import json

import pytest

from lab.tokenizing.cost import build_bpe, main, measure, ratios, render
from lab.tokenizing.multilingual import LANGUAGES, Texts


def test_prompts_have_the_size_asked_for_and_the_same_seed_writes_the_same_text() -> None:
    texts = Texts(seed=3)
    prompts = {language: texts.prompt(language, 4096) for language in LANGUAGES}
    for language, text in prompts.items():
        assert 4093 <= len(text.encode()) <= 4096, language  # cut on a character boundary
    assert len(prompts["en"]) == len(prompts["en"].encode())  # ASCII
    assert len(prompts["zh"].encode()) >= 2.9 * len(prompts["zh"])  # three bytes a character
    assert any("\u3040" <= c <= "\u30ff" for c in prompts["ja"])  # kana
    assert any(c.isascii() and c.isalpha() for c in prompts["mixed"]) and any(
        "\u4e00" <= c <= "\u9fff" for c in prompts["mixed"])
    again = Texts(seed=3)
    assert [again.prompt(language, 4096) for language in LANGUAGES] == list(prompts.values())
    assert Texts(seed=4).prompt("en", 4096) != prompts["en"]


def test_the_training_corpus_holds_every_language_and_not_the_prompts() -> None:
    corpus = Texts(seed=1).corpus(64_000)
    joined = "".join(corpus)
    assert 60_000 <= len(joined.encode()) <= 66_000
    assert any("\u4e00" <= c <= "\u9fff" for c in joined)
    assert Texts(seed=2).prompt("en", 512)[:200] not in joined


def test_the_bpe_tokenizer_round_trips_and_compresses_every_language() -> None:
    encode = build_bpe(vocab_size=2000, corpus_bytes=200_000)
    texts = Texts(seed=9)
    for language in LANGUAGES:
        text = texts.prompt(language, 2048)
        ids = encode(text)
        assert 1 < len(ids) < len(text.encode()), language  # merges, fewer tokens than bytes


def test_each_language_is_measured_against_english_side_by_side() -> None:
    texts = Texts(seed=5)
    prompts = {language: [texts.prompt(language, 1024) for _ in range(3)]
               for language in LANGUAGES}
    warmup = {language: [texts.prompt(language, 1024)] for language in LANGUAGES}
    seen: list[str] = []

    def encode(text: str) -> list[int]:
        seen.append(text)
        return list(range(len(text.encode()) // 4))  # a token per four bytes

    costs = measure(encode, prompts, warmup)
    # The warm-up first, then the languages taking turns, each prompt once.
    assert seen[:4] == [warmup[language][0] for language in LANGUAGES]
    assert seen[4:8] == [prompts[language][0] for language in LANGUAGES]
    assert len(seen) == 4 + 12
    assert costs["zh"].tokens == costs["zh"].bytes // 4
    assert costs["zh"].chars < costs["en"].chars == costs["en"].bytes
    table = {language: {"ns_per_byte": 2.0 * (language != "en") + 1.0, "ns_per_char": 1.0,
                        "ns_per_token": 1.0} for language in LANGUAGES}
    assert ratios(table, "en") == {"per_byte": 1.0, "per_char": 1.0, "per_token": 1.0}
    assert ratios(table, "mixed")["per_byte"] == 3.0


@pytest.mark.slow
def test_the_command_prints_a_table_and_one_json_report(capsys: pytest.CaptureFixture[str],
                                                        ) -> None:
    assert main(["--bytes", "1024", "--prompts", "3", "--vocab-size", "1000",
                 "--corpus-bytes", "100000"]) == 0
    out = capsys.readouterr().out.splitlines()
    report = json.loads(out[-1])
    assert set(report["tokenizers"]) == {"sim", "bpe"}
    for costs in report["tokenizers"].values():
        assert set(costs) == set(LANGUAGES)
        assert all(cost["ns_per_byte"] > 0 for cost in costs.values())
    assert render(report).splitlines()[0] == out[0]
