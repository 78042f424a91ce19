"""A scripted engine for the HTTP layer's failure paths that a healthy engine never takes.

It streams a fixed word list and can be told to fail before the first delta, mid-stream, or on
retuning, so tests can check how each failure reaches the client. The happy paths are tested on
the real simulated engine.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from governor.inference.engines.base import (
    BatchingLimits,
    EngineError,
    EngineErrorKind,
    EngineStats,
    EngineTimes,
    FinishReason,
    GenerateRequest,
    TokenDelta,
)


@dataclass
class Script:
    fail_before_first: EngineError | None = None
    fail_after_tokens: int | None = None
    fail_with: EngineError = field(
        default_factory=lambda: EngineError(EngineErrorKind.DEAD, "engine core died")
    )
    retune_error: EngineError | None = None
    token_delay_seconds: float = 0.0
    ready: bool = True
    fail_start: BaseException | None = None  # engine.start() raises it


# Words of up to 16 characters with up to 16 characters of whitespace before them: a token
# covers at most 16 * 3 + 16 * 4 bytes of UTF-8.
_WORDS = re.compile(r"\s{0,16}\S{1,16}|\s{1,16}")


class ScriptedEngine:
    system = "vllm"
    model_name = "scripted"
    max_model_len = 64
    max_token_bytes = 112

    def __init__(self, script: Script | None = None) -> None:
        self.script = script or Script()
        self._limits = BatchingLimits(8, 512)
        self.aborted: list[str] = []
        self.running = 0

    @property
    def ready(self) -> bool:
        return self.script.ready

    @property
    def limits(self) -> BatchingLimits:
        return self._limits

    @property
    def floor(self) -> BatchingLimits:
        return BatchingLimits(1, 64)

    @property
    def ceiling(self) -> BatchingLimits:
        return BatchingLimits(8, 512)

    async def start(self) -> None:
        if self.script.fail_start is not None:
            self.script.ready = False
            raise self.script.fail_start

    async def close(self) -> None:
        return None

    def tokenize(self, text: str) -> Sequence[int]:
        return [len(word) for word in _WORDS.findall(text)]

    def render_chat(self, messages: Sequence[Mapping[str, str]]) -> str:
        return " ".join(m["content"] for m in messages)

    async def generate(self, request: GenerateRequest) -> AsyncIterator[TokenDelta]:
        if self.script.fail_before_first is not None:
            raise self.script.fail_before_first
        self.running += 1
        try:
            for index in range(request.max_tokens):
                limit = self.script.fail_after_tokens
                if limit is not None and index >= limit:
                    raise self.script.fail_with
                await asyncio.sleep(self.script.token_delay_seconds)
                last = index == request.max_tokens - 1
                yield TokenDelta(f" w{index}", 1, FinishReason.LENGTH if last else None,
                                 times=EngineTimes(queued_seconds=0.0) if index == 0 else None)
        except GeneratorExit:
            self.aborted.append(request.request_id)
            raise
        except asyncio.CancelledError:
            self.aborted.append(request.request_id)
            raise
        finally:
            self.running -= 1

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)

    async def set_limits(self, limits: BatchingLimits) -> BatchingLimits:
        if self.script.retune_error is not None:
            raise self.script.retune_error
        self._limits = limits
        return limits

    async def ranks(self) -> list[dict[str, Any]] | None:
        return None

    def stats(self) -> EngineStats:
        return EngineStats(self.running, 0, 0.0)
