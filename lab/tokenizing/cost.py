"""What tokenizing costs per byte and per token, by language (``python -m lab.tokenizing.cost``).

The same number of bytes of English, Chinese, Japanese and mixed text (:mod:`.multilingual`)
is tokenized by two tokenizers, English the baseline of each, side by side:

* ``sim``: the simulated engine's tokenizer (``--engine sim``), word pieces found by a regex;
* ``bpe``: a byte-level BPE tokenizer built here (the ``tokenizers`` library, no download): the
  pre-tokenizer of Llama 3 (a regex that keeps a run of letters together, so a Chinese or
  Japanese clause is one pre-token), byte-level merges trained on a multilingual corpus from
  another seed than the prompts'.

Each prompt is tokenized once, after a warm-up on others, the languages taking turns, so that
the tokenizers' word caches hold what real traffic leaves there: common words, not whole
sentences. Reported per language: bytes, characters and tokens of a prompt, the median time per
prompt, nanoseconds per byte, per character and per token, and each ratio to English::

    python -m lab.tokenizing.cost                      # 16 KiB prompts, about a minute
    python -m lab.tokenizing.cost --bytes 4096 --prompts 100
    python -m lab.tokenizing.cost --json
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from governor.bench.api import Progress
from governor.common.cli import EnvArgumentParser, positive_int
from governor.inference.engines.sim.tokenizer import SimTokenizer
from lab.tokenizing.multilingual import LANGUAGES, NAMES, Language, Texts

PROG = "python -m lab.tokenizing.cost"
Encode = Callable[[str], Sequence[int]]
BASELINE: Language = "en"
# Llama 3's pre-tokenizer pattern: contractions, a run of letters (with one leading non-letter),
# up to three digits, punctuation runs, newlines, whitespace.
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SIM_VOCABULARY = 128_256  # Llama 3's
TRAIN_SEED, PROMPT_SEED = 101, 202


@dataclass(frozen=True)
class Cost:
    """What tokenizing prompts of one language cost one tokenizer (medians per prompt)."""

    language: Language
    prompts: int
    bytes: int
    chars: int
    tokens: int
    seconds: float
    ns_per_byte: float
    ns_per_char: float
    ns_per_token: float


def build_bpe(vocab_size: int, corpus_bytes: int) -> Encode:
    """A byte-level BPE tokenizer with Llama 3's pre-tokenizer, trained here on
    ``corpus_bytes`` of multilingual text."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(Texts(TRAIN_SEED).corpus(corpus_bytes), trainer)

    def encode(text: str) -> Sequence[int]:
        ids: list[int] = tokenizer.encode(text, add_special_tokens=False).ids
        return ids

    return encode


def measure(encode: Encode, prompts: Mapping[Language, Sequence[str]],
            warmup: Mapping[Language, Sequence[str]]) -> dict[Language, Cost]:
    """Tokenize every prompt once, the languages taking turns, after the warm-up ones."""
    for index in range(max(len(w) for w in warmup.values())):
        for texts in warmup.values():
            if index < len(texts):
                encode(texts[index])
    seconds: dict[Language, list[float]] = {language: [] for language in prompts}
    tokens: dict[Language, list[int]] = {language: [] for language in prompts}
    for index in range(max(len(p) for p in prompts.values())):
        for language, texts in prompts.items():
            started = time.perf_counter()
            ids = encode(texts[index])
            seconds[language].append(time.perf_counter() - started)
            tokens[language].append(len(ids))
    return {language: _cost(language, texts, seconds[language], tokens[language])
            for language, texts in prompts.items()}


def _cost(language: Language, texts: Sequence[str], seconds: list[float],
          tokens: list[int]) -> Cost:
    size = statistics.median(len(t.encode()) for t in texts)
    chars = statistics.median(len(t) for t in texts)
    count = statistics.median(tokens)
    median = statistics.median(seconds)
    return Cost(language, len(texts), int(size), int(chars), int(count), median,
                median / size * 1e9, median / chars * 1e9, median / count * 1e9)


def run(size_bytes: int, count: int, vocab_size: int, corpus_bytes: int) -> dict[str, Any]:
    progress = Progress(PROG, 3)
    texts = Texts(PROMPT_SEED)
    warmup = {language: [texts.prompt(language, size_bytes) for _ in range(max(3, count // 5))]
              for language in LANGUAGES}
    prompts = {language: [texts.prompt(language, size_bytes) for _ in range(count)]
               for language in LANGUAGES}
    bpe = build_bpe(vocab_size, corpus_bytes)
    progress.done(f"BPE trained ({vocab_size} tokens, {corpus_bytes / 1e6:.1f} MB of text)")
    report: dict[str, Any] = {"bytes_per_prompt": size_bytes, "prompts": count,
                              "bpe_vocab_size": vocab_size, "bpe_corpus_bytes": corpus_bytes,
                              "tokenizers": {}}
    for name, encode in (("sim", SimTokenizer(SIM_VOCABULARY).encode), ("bpe", bpe)):
        costs = measure(encode, prompts, warmup)
        report["tokenizers"][name] = {language: asdict(cost) for language, cost in costs.items()}
        progress.done(f"{name} measured")
    return report


def ratios(costs: Mapping[str, Mapping[str, Any]], language: Language) -> dict[str, float]:
    """A language's costs over English's: per prompt of equal bytes, per character, per
    token."""
    ours, base = costs[language], costs[BASELINE]
    return {"per_byte": ours["ns_per_byte"] / base["ns_per_byte"],
            "per_char": ours["ns_per_char"] / base["ns_per_char"],
            "per_token": ours["ns_per_token"] / base["ns_per_token"]}


def render(report: Mapping[str, Any]) -> str:
    lines = [f"{report['prompts']} prompts of {report['bytes_per_prompt']} bytes per language; "
             f"ratios to English (same bytes, characters, tokens)"]
    header = (f"{'tokenizer':<9} {'language':<20} {'chars':>6} {'tokens':>6} {'B/token':>7} "
              f"{'µs/prompt':>9} {'ns/B':>6} {'ns/char':>7} {'ns/token':>8} "
              f"{'x/B':>5} {'x/char':>6} {'x/token':>7}")
    lines.append(header)
    for name, costs in report["tokenizers"].items():
        for language in LANGUAGES:
            cost, x = costs[language], ratios(costs, language)
            lines.append(
                f"{name:<9} {NAMES[language]:<20} {cost['chars']:>6} {cost['tokens']:>6} "
                f"{cost['bytes'] / cost['tokens']:>7.2f} {cost['seconds'] * 1e6:>9.0f} "
                f"{cost['ns_per_byte']:>6.1f} {cost['ns_per_char']:>7.1f} "
                f"{cost['ns_per_token']:>8.0f} {x['per_byte']:>5.2f} {x['per_char']:>6.2f} "
                f"{x['per_token']:>7.2f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = EnvArgumentParser(prog=PROG, description=__doc__)
    parser.add_argument("--bytes", type=positive_int, default=16384, dest="size_bytes",
                        help="UTF-8 bytes of each prompt (default 16384)")
    parser.add_argument("--prompts", type=positive_int, default=60,
                        help="prompts measured per language (default 60)")
    parser.add_argument("--vocab-size", type=positive_int, default=8000,
                        help="the BPE tokenizer's vocabulary (default 8000: on the 2 MB corpus, "
                             "more merges make whole generated words tokens)")
    parser.add_argument("--corpus-bytes", type=positive_int, default=2_000_000,
                        help="text the BPE tokenizer is trained on (default 2 MB)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON only")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if importlib.util.find_spec("tokenizers") is None:
        print(f"{PROG}: the BPE tokenizer needs the tokenizers library "
              "(pip install tokenizers)", file=sys.stderr)
        return 2
    report = run(args.size_bytes, args.prompts, args.vocab_size, args.corpus_bytes)
    if not args.json:
        print(render(report))
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
