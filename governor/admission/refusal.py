"""What a client is told when the deadline gate refuses its request, whichever server refused it.

``governor serve`` and the gate in front of stock ``vllm serve`` answer a refusal alike: 429,
``Retry-After``, OpenAI's error body with ``type: rate_limit_error`` (the ``openai`` client's
``RateLimitError``) and the reason as its ``code``; the message says what was ahead::

    >>> from governor.admission.deadline import Judgement
    >>> judged = Judgement(False, "deadline", 24000, 0.9, 3.0, 3.06, 3)
    >>> refusal_message("chat", judged)  # doctest: +NORMALIZE_WHITESPACE
    'the server is at capacity: the 24000 prompt tokens ahead of this chat request would take
     ~3.0 s to prefill, past the 0.9 s left of its first-token deadline; retry later'
"""

from __future__ import annotations

from governor.admission.deadline import Judgement
from governor.contracts.metrics.service import REASON_TOKENS_AHEAD


def refusal_message(request_class: str, judgement: Judgement) -> str:
    """The refusal's message: what is ahead, and how long it would take."""
    if judgement.reason == REASON_TOKENS_AHEAD:
        return (f"the server is at capacity: {judgement.tokens_ahead} prompt tokens are ahead of "
                "this request, more than its admission bound; retry later")
    wait = judgement.wait_seconds or 0.0
    left = judgement.deadline_seconds or 0.0
    return (f"the server is at capacity: the {judgement.tokens_ahead} prompt tokens ahead of this "
            f"{request_class} request would take ~{wait:.1f} s to prefill, past the {left:.1f} s "
            "left of its first-token deadline; retry later")
