"""How many tokens a prompt makes, bounded before it is tokenized, from the prompts tokenized
before it.

Under overload the text threads are the scarce resource, and a request the deadline gate would
refuse for its own prompt's length waits its turn there, behind the requests being admitted,
only to learn its prompt's count. :class:`PromptSizes` learns, from every prompt the service
tokenizes, the tokens its text makes per byte (its messages' contents or its prompt string, in
UTF-8), and bounds a new prompt's count from its text's bytes alone: between the fewest and the
most tokens per byte among the last :data:`WINDOW` prompts, widened by :data:`MARGIN` both ways.
The gate may refuse on the low bound, on the event loop, when even that many tokens keep the
request past its deadline: a refusal the exact count would give unless the prompt makes a
tenth fewer tokens per byte than any of the last few hundred did::

    sizes = PromptSizes()
    sizes.learn(5210, 1302)            # each tokenized prompt: its text's bytes, its tokens
    bounds = sizes.bounds(8400)        # (low, high) tokens, or None

No bounds until :data:`MIN_SAMPLES` prompts are learnt, nor for a text under
:data:`MIN_TEXT_BYTES` (the template's tokens weigh too much in a short one's count).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Final

# The prompts the ratios are read from: the last few hundred, so a change of language or of
# client is followed within seconds under load.
WINDOW: Final = 256
MIN_SAMPLES: Final = 32
MIN_TEXT_BYTES: Final = 1024
# The bounds are widened by this factor: the low one divided, the high one multiplied.
MARGIN: Final = 1.1


class PromptSizes:
    """The tokens per byte of text of the last :data:`WINDOW` prompts tokenized."""

    __slots__ = ("_ratios",)

    def __init__(self) -> None:
        self._ratios: deque[float] = deque(maxlen=WINDOW)

    def learn(self, text_bytes: int | None, tokens: int) -> None:
        """A prompt whose text took ``text_bytes`` made ``tokens`` tokens."""
        if text_bytes is not None and text_bytes >= MIN_TEXT_BYTES and tokens > 0:
            self._ratios.append(tokens / text_bytes)

    def bounds(self, text_bytes: int | None) -> tuple[int, int] | None:
        """The fewest and the most tokens a prompt of ``text_bytes`` bytes of text is expected
        to make; None while too few prompts are learnt, or the text is short."""
        if (text_bytes is None or text_bytes < MIN_TEXT_BYTES
                or len(self._ratios) < MIN_SAMPLES):
            return None
        low, high = min(self._ratios), max(self._ratios)
        return (math.floor(text_bytes * low / MARGIN), math.ceil(text_bytes * high * MARGIN))

