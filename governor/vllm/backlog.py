"""What this API server's requests are doing inside vLLM, read from vLLM's own bookkeeping.

vLLM's API server keeps a state per request it sent to the engine, in its output processor
(``engine_client.output_processor.request_states``): the prompt's length once tokenized, and
whether its first token has come back (``is_prefilling``). vLLM's own ``max_num_queued_tokens``
bound reads the same states (``AsyncLLM.get_num_queued_tokens``). They are not part of vLLM's
public ``EngineClient`` interface, so they are detected, never assumed: :func:`read_states`
answers None where this vLLM has none, and the gate then refuses nothing.

Each API server process (``--api-server-count``) has its own output processor holding the
requests it sent, to whichever data-parallel engine: this is that process's share.

A request's id in vLLM is made from the id the gate gives it (the ``X-Request-Id`` header, or
the body's ``request_id``): ``chatcmpl-{id}`` for a chat, ``cmpl-{id}-{n}`` for each prompt of a
completion (``vllm/entrypoints/openai/*/serving.py``)::

    >>> gate_key("chatcmpl-gov-1f2e"), gate_key("cmpl-gov-1f2e-0"), gate_key("embd-7")
    ('gov-1f2e', 'gov-1f2e', None)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

CHAT_PREFIX: Final = "chatcmpl-"
COMPLETION_PREFIX: Final = "cmpl-"


@dataclass(frozen=True, slots=True)
class EngineRequest:
    """One request as vLLM's API server follows it."""

    key: str  # the gate's key: the id the gate gave it
    prompt_tokens: int
    prefilling: bool  # no first token yet


def gate_key(external_id: str) -> str | None:
    """The gate's key of a vLLM request id; None for a request of another route."""
    if external_id.startswith(CHAT_PREFIX):
        return external_id.removeprefix(CHAT_PREFIX)
    if external_id.startswith(COMPLETION_PREFIX):
        base, _, index = external_id.removeprefix(COMPLETION_PREFIX).rpartition("-")
        return base if base and index.isdigit() else None
    return None


def read_states(engine_client: Any) -> list[EngineRequest] | None:
    """Every generation request this API server has in vLLM; None where vLLM keeps no such
    states (another release, or no engine client yet)."""
    processor = getattr(engine_client, "output_processor", None)
    states = getattr(processor, "request_states", None)
    if not isinstance(states, dict):
        return None
    # A snapshot: the dict changes between two awaits of vLLM's output handler, never during
    # this loop, which does not await.
    return list(_requests(list(states.values())))


def _requests(states: list[Any]) -> Iterator[EngineRequest]:
    for state in states:
        external = getattr(state, "external_req_id", None)
        key = gate_key(external) if isinstance(external, str) else None
        tokens = getattr(state, "prompt_len", None)
        if key is None or not isinstance(tokens, int):
            continue
        yield EngineRequest(key, tokens, bool(getattr(state, "is_prefilling", False)))
