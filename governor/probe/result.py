"""What one probe request saw, as plain data: the client reads it, the metrics shape it."""

from __future__ import annotations

from dataclasses import dataclass

from governor.contracts.metrics.probe import RESULT_SUCCESS


@dataclass(frozen=True)
class Replica:
    """One URL of one target of ``slo.yaml``'s ``probe.targets``."""

    target: str
    url: str
    model: str | None = None
    api_key_file: str | None = None


@dataclass(frozen=True)
class ProbeResult:
    """``result``: one of :data:`governor.contracts.metrics.probe.RESULTS`; the latencies of a
    successful probe (first token from the request's start, then the gaps between tokens)."""

    result: str
    ttft_seconds: float | None = None
    itl_seconds: tuple[float, ...] = ()
    detail: str = ""  # why it failed, for the log (never a credential)

    @property
    def ok(self) -> bool:
        return self.result == RESULT_SUCCESS
