"""The simulated model's tokenizer, chat template and text: deterministic, with exact counts.

Tokens are word pieces: up to 16 characters of leading whitespace plus a run of up to 6
letters, up to 3 digits, or one other character, or a run of up to 16 whitespace characters
(about 4 characters per token on English, like a BPE tokenizer). A token therefore never covers
more than :data:`MAX_TOKEN_BYTES` bytes of UTF-8, as a BPE token never covers more than its
longest vocabulary entry. A token's id is a stable hash of its text, so equal texts give equal
ids and prompts that share a prefix share the ids of that prefix (what prefix caching keys on).

The model "answers" with a translation-like echo of the last user message: every word with its
vowels rotated (``Translate this`` → ``Trensleti thos``), tokenized by the same rules. Any prefix
of the answer's tokens re-tokenizes to exactly those tokens, so a client that counts the streamed
text's tokens gets the count the engine reported. The answer ends (``stop``) when the echo is
complete, at ``max_tokens`` (``length``), or at a stop string, which is cut from the text as
vLLM does; with ``ignore_eos`` or ``min_tokens`` the echo repeats, separated by a space.
"""

from __future__ import annotations

import re
import zlib
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from governor.inference.engines.base import FinishReason, SamplingOptions

# Whitespace attaches to the token that follows it; a run of whitespace with nothing after it
# is a token of its own. Runs are capped, so that one token covers a bounded text.
_MAX_SPACES, _MAX_LETTERS, _MAX_DIGITS = 16, 6, 3
_TOKEN = re.compile(
    rf"\s{{0,{_MAX_SPACES}}}(?:[^\W\d_]{{1,{_MAX_LETTERS}}}|\d{{1,{_MAX_DIGITS}}}|\S)"
    rf"|\s{{1,{_MAX_SPACES}}}"
)
# Every character \s matches is below U+3000 (three bytes of UTF-8); any other takes four at most.
MAX_TOKEN_BYTES = _MAX_SPACES * 3 + max(_MAX_LETTERS, _MAX_DIGITS) * 4
_RESERVED_IDS = 3  # <unk>, <s>, </s>
_VOWELS = "aeiouAEIOU"
_TRANSLATION = str.maketrans(_VOWELS, "eiouaEIOUA")
_FILLER = "The quick brown fox jumps over the lazy dog."
_ROLE_MARK = "<|{role}|>\n"
_USER_MARK = "<|user|>\n"
_CACHE_LIMIT = 65536


def pieces(text: str) -> list[str]:
    """Split ``text`` into token pieces; ``"".join(pieces(text)) == text``."""
    return _TOKEN.findall(text)


def render_chat(messages: Sequence[Mapping[str, str]]) -> str:
    """A minimal chat template: each turn as ``<|role|>\\n{content}\\n``, then the cue."""
    turns = [_ROLE_MARK.format(role=m["role"]) + m["content"] + "\n" for m in messages]
    return "".join(turns) + _ROLE_MARK.format(role="assistant")


def echo_source(prompt: str) -> str:
    """What the model answers to: the last user turn of a chat prompt, else the whole prompt."""
    start = prompt.rfind(_USER_MARK)
    if start >= 0:
        body = prompt[start + len(_USER_MARK) :]
        end = body.find("\n<|")
        prompt = body if end < 0 else body[:end]
    return prompt.strip() or _FILLER


def translate(text: str) -> str:
    return text.translate(_TRANSLATION)


class SimTokenizer:
    """Text → token ids with a bounded memo of piece ids (prompts repeat their words)."""

    def __init__(self, vocab_size: int) -> None:
        if vocab_size <= _RESERVED_IDS:
            raise ValueError(f"vocabulary too small: {vocab_size}")
        self.vocab_size = vocab_size
        self._ids: dict[str, int] = {}

    def token_id(self, piece: str) -> int:
        ids = self._ids
        token = ids.get(piece)
        if token is None:
            span = self.vocab_size - _RESERVED_IDS
            token = zlib.crc32(piece.encode("utf-8", "surrogatepass")) % span + _RESERVED_IDS
            if len(ids) >= _CACHE_LIMIT:
                ids.clear()
            ids[piece] = token
        return token

    def encode(self, text: str) -> list[int]:
        token_id = self.token_id
        # finditer, not findall: one match per call, so that a thread tokenizing a long prompt
        # hands the GIL back to the event loop every switch interval instead of holding it for
        # the whole text.
        return [token_id(match.group()) for match in _TOKEN.finditer(text)]

    def count(self, text: str) -> int:
        return len(_TOKEN.findall(text))


@dataclass(frozen=True, slots=True)
class OutputPlan:
    """The whole answer to one request, decided up front: its pieces, length and ending.

    Piece ``i`` is ``head[i]`` and then ``cycle`` repeated (the echo again, after a space).
    ``text_limit`` cuts the text where a stop string began (``None``: no cut).
    """

    head: tuple[str, ...]
    cycle: tuple[str, ...]
    num_tokens: int
    finish_reason: FinishReason
    text_limit: int | None = None

    def piece(self, index: int) -> str:
        head = self.head
        if index < len(head):
            return head[index]
        return self.cycle[(index - len(head)) % len(self.cycle)]

    def text(self, start: int, stop: int) -> str:
        """The text of tokens ``start..stop`` (not cut by ``text_limit``)."""
        head = self.head
        if stop <= len(head):
            return "".join(head[start:stop])
        if stop - start == 1:  # the common case: one token per step
            return self.piece(start)
        return "".join([self.piece(i) for i in range(start, stop)])


_DEFAULT_SAMPLING = SamplingOptions()


def plan_output(
    prompt: str, max_tokens: int, sampling: SamplingOptions = _DEFAULT_SAMPLING
) -> OutputPlan:
    """Decide the answer to ``prompt``: which tokens, how many, and why it ends."""
    answer = translate(echo_source(prompt))
    head = tuple(pieces(answer))
    cycle = tuple(pieces(" " + answer))
    natural = len(head)
    if sampling.ignore_eos:
        length, reason = max_tokens, FinishReason.LENGTH
    else:
        natural = max(natural, sampling.min_tokens)
        if natural >= max_tokens:
            length, reason = max_tokens, FinishReason.LENGTH
        else:
            length, reason = natural, FinishReason.STOP
    plan = OutputPlan(head, cycle, length, reason)
    if sampling.stop:
        plan = _apply_stop_strings(plan, sampling.stop, sampling.min_tokens)
    return plan


def _apply_stop_strings(plan: OutputPlan, stops: Sequence[str], min_tokens: int) -> OutputPlan:
    """End at the first token that completes a stop string, from ``min_tokens`` on."""
    ends: list[int] = []  # character offset where each token ends
    total = 0
    for i in range(plan.num_tokens):
        total += len(plan.piece(i))
        ends.append(total)
    text = plan.text(0, plan.num_tokens)
    best: tuple[int, int] | None = None  # (token index completing the stop, cut offset)
    for stop in stops:
        if not stop:
            continue
        found = text.find(stop)
        while found >= 0:
            last_char = found + len(stop) - 1
            token = bisect_right(ends, last_char)  # the token holding that character
            if token + 1 >= min_tokens:
                if best is None or token < best[0]:
                    best = (token, found)
                break
            found = text.find(stop, found + 1)
    if best is None:
        return plan
    token, cut = best
    return OutputPlan(plan.head, plan.cycle, token + 1, FinishReason.STOP, cut)
