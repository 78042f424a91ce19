"""Text in English, Chinese and Japanese, and mixed as a translation request mixes them.

The tokenizer benchmark needs prompts in each language of the same size in bytes, many of them
(a tokenizer caches the words it has seen, and real prompts repeat words but not sentences), and
a separate corpus to train a BPE tokenizer on. Both come from here: sentences of words drawn by
their rank's Zipf weight from a lexicon per language (common words written for this project,
then a long tail generated: English-like words from syllables, Chinese words of characters of
the CJK block, Japanese kanji compounds and katakana words), by a seeded generator, so the same
seed gives the same text on every machine::

    texts = Texts(seed=1)
    texts.prompt("ja", 16384)              # about 16 KiB of Japanese sentences
    texts.corpus(2_000_000)                # training text, every language, ~2 MB

Chinese and Japanese are written without spaces, as they are; a mixed prompt alternates
sentences of the three, as a request to translate Chinese and Japanese text with English
instructions does.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from typing import Final

Language = str  # "en", "zh", "ja", "mixed"
LANGUAGES: Final = ("en", "zh", "ja", "mixed")
NAMES: Final = {"en": "English", "zh": "Chinese", "ja": "Japanese",
                "mixed": "mixed (zh + en + ja)"}

_EN: Final = (
    "the", "a", "request", "translation", "service", "model", "token", "latency", "user",
    "answer", "document", "contract", "shipment", "customer", "invoice", "delivery", "meeting",
    "schedule", "report", "quarter", "revenue", "market", "price", "order", "warehouse",
    "support", "team", "engineer", "release", "version", "update", "server", "network",
    "please", "translate", "summarize", "explain", "review", "confirm", "send", "check",
    "arrives", "changes", "includes", "requires", "remains", "follows", "reaches", "waits",
    "quickly", "carefully", "today", "tomorrow", "again", "before", "after", "while", "because",
    "and", "or", "but", "with", "without", "for", "from", "into", "about", "of", "to", "in",
    "new", "late", "final", "short", "long", "clear", "formal", "polite", "Japanese", "Chinese",
    "Tokyo", "Shanghai", "Monday", "March", "2024", "15", "three", "twelve", "percent",
)
_ZH: Final = (
    "我们", "你们", "他们", "公司", "客户", "合同", "发票", "订单", "仓库", "货物", "运输",
    "会议", "时间", "计划", "报告", "季度", "收入", "市场", "价格", "服务", "系统", "网络",
    "工程师", "团队", "版本", "更新", "问题", "答案", "文件", "翻译", "请", "需要", "已经",
    "正在", "可以", "应该", "必须", "确认", "发送", "检查", "安排", "讨论", "完成", "开始",
    "结束", "增加", "减少", "明天", "今天", "下周", "上个月", "三月", "星期一", "上海", "东京",
    "北京", "非常", "比较", "特别", "重要", "紧急", "正式", "简单", "详细", "的", "了", "在",
    "和", "与", "但是", "因为", "所以", "如果", "关于", "对于", "这个", "那个", "一些", "所有",
    "百分之", "十二", "三个", "每天", "延迟", "数据", "模型", "用户", "请求",
)
_JA: Final = (
    "私たち", "お客様", "会社", "契約書", "請求書", "注文", "倉庫", "荷物", "配送", "会議",
    "時間", "予定", "報告書", "四半期", "売上", "市場", "価格", "サービス", "システム",
    "ネットワーク", "エンジニア", "チーム", "バージョン", "アップデート", "問題", "回答",
    "資料", "翻訳", "確認", "送信", "調整", "検討", "完了", "開始", "終了", "増加", "減少",
    "明日", "今日", "来週", "先月", "三月", "月曜日", "東京", "上海", "大阪", "とても",
    "かなり", "特に", "重要な", "緊急の", "正式な", "簡単な", "詳しい", "は", "が", "を", "に",
    "で", "と", "の", "も", "から", "まで", "について", "ため", "しかし", "そして", "もし",
    "します", "しました", "してください", "お願いします", "いたします", "です", "でした",
    "ます", "ません", "こちら", "あちら", "すべて", "いくつか", "十二", "三つ", "毎日", "遅延",
    "データ", "モデル", "ユーザー", "リクエスト",
)
# Full-width punctuation, as Chinese and Japanese are written.
_ENDINGS: Final = {"en": (".", ".", "?", "!", ","),
                   "zh": ("。", "。", "？", "！", "，"),  # noqa: RUF001
                   "ja": ("。", "。", "？", "、", "！")}  # noqa: RUF001
_SEPARATOR: Final = {"en": " ", "zh": "", "ja": ""}
# The lexicon is the languages' (the same for every text); only the sentences vary by seed.
_LEXICON_SEED: Final = 7
# Each language's long tail: English-like words from syllables, Chinese words of one to three
# characters of the CJK block, Japanese kanji compounds and katakana loanwords.
_TAIL_WORDS: Final = 6000
_CJK_CHARACTERS: Final = 3500  # about what a reader of Chinese knows
_ONSETS: Final = ("", "b", "c", "d", "f", "g", "h", "l", "m", "n", "p", "r", "s", "t", "v", "w",
                  "br", "ch", "cl", "cr", "dr", "fl", "gr", "pl", "pr", "sh", "sp", "st", "th",
                  "tr")
_NUCLEI: Final = ("a", "e", "i", "o", "u", "ai", "ea", "ee", "ie", "io", "ou", "y")
_CODAS: Final = ("", "", "n", "r", "s", "t", "l", "m", "nd", "ng", "nt", "rd", "st", "ck", "ss")
_KATAKANA: Final = tuple(chr(c) for c in range(0x30A1, 0x30F7))
_CJK_BLOCK: Final = (0x4E00, 0x9FA5)


def _zipf_weights(size: int) -> list[float]:
    """Cumulative weights of rank ``1 / (rank + 1)``: a few words common, most rare."""
    total, cumulative = 0.0, []
    for rank in range(size):
        total += 1.0 / (rank + 1)
        cumulative.append(total)
    return cumulative


class _Lexicon:
    """Each language's words, most common first: the written pool, then the long tail."""

    def __init__(self) -> None:
        rng = random.Random(_LEXICON_SEED)
        characters = [chr(c) for c in rng.sample(range(*_CJK_BLOCK), _CJK_CHARACTERS)]
        kanji = characters[:2000]

        def syllable() -> str:
            return rng.choice(_ONSETS) + rng.choice(_NUCLEI) + rng.choice(_CODAS)

        english = [("".join(syllable() for _ in range(rng.choice((1, 1, 2, 2, 3)))))
                   for _ in range(_TAIL_WORDS)]
        chinese = ["".join(rng.choices(characters, k=rng.choice((1, 2, 2, 2, 3))))
                   for _ in range(_TAIL_WORDS)]
        japanese = ["".join(rng.choices(kanji, k=2)) if rng.random() < 0.7 else
                    "".join(rng.choices(_KATAKANA, k=rng.randint(3, 6)))
                    for _ in range(_TAIL_WORDS)]
        self.words = {"en": (*_EN, *english), "zh": (*_ZH, *chinese), "ja": (*_JA, *japanese)}
        self.weights = {language: _zipf_weights(len(words))
                        for language, words in self.words.items()}


class Texts:
    """Sentences and prompts from one seeded generator."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)
        self._lexicon = _Lexicon()

    def sentence(self, language: Language) -> str:
        """One sentence of 6 to 16 words; a mixed sentence is one of the three languages."""
        if language == "mixed":
            language = self._rng.choice(("zh", "en", "ja"))
        lexicon = self._lexicon
        words = self._rng.choices(lexicon.words[language], cum_weights=lexicon.weights[language],
                                  k=self._rng.randint(6, 16))
        text = _SEPARATOR[language].join(words)
        ending = self._rng.choice(_ENDINGS[language])
        if language == "en":
            return text[:1].upper() + text[1:] + ending + " "
        return text + ending

    def prompt(self, language: Language, size_bytes: int) -> str:
        """Sentences until the text holds ``size_bytes`` bytes of UTF-8, cut to that size on a
        character boundary."""
        return _fill(functools.partial(self.sentence, language), size_bytes)

    def corpus(self, size_bytes: int) -> list[str]:
        """Training text: a line per paragraph, the languages in equal shares by bytes."""
        lines, share = [], size_bytes // len(LANGUAGES)
        for language in LANGUAGES:
            lines += [_fill(functools.partial(self.sentence, language), 512)
                      for _ in range(max(1, share // 512))]
        self._rng.shuffle(lines)
        return lines


def _fill(sentence: Callable[[], str], size_bytes: int) -> str:
    parts, size = [], 0
    while size < size_bytes:
        text = sentence()
        parts.append(text)
        size += len(text.encode())
    return "".join(parts).encode()[:size_bytes].decode("utf-8", "ignore")
