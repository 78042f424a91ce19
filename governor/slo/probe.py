"""The ``probe`` section of ``slo.yaml``: what ``governor probe`` sends, to whom, how often.

Without the section the probe sends to the stack's own inference service, once every 15 s::

    >>> settings = ProbeSettings()
    >>> [(t.name, t.url) for t in settings.targets], settings.interval_seconds
    ([('inference', 'http://inference:8000')], 15.0)

The probe sends only to the targets named here; a deployment may move a named target (``governor
probe --target inference=http://127.0.0.1:8000``), never add one. The rate is bounded twice:
each replica gets at most one request per interval (never two at once), and a spec whose
replicas would need more than :data:`MAX_REQUESTS_PER_SECOND` in all is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from governor.contracts.endpoints import INFERENCE

DEFAULT_TARGET: Final = "inference"
MIN_INTERVAL_SECONDS: Final = 1.0
MAX_INTERVAL_SECONDS: Final = 3600.0
MAX_JITTER: Final = 0.5  # a share of the interval: consecutive requests stay half one apart
MAX_TOKENS_LIMIT: Final = 64  # a probe is small: a few tokens show the ITL without costing much
MAX_TARGETS: Final = 16
MAX_REPLICAS: Final = 64  # URLs of all targets together
MAX_REQUESTS_PER_SECOND: Final = 10.0
DEFAULT_PROMPT: Final = "Reply with one word: ok."


@dataclass(frozen=True)
class ProbeTarget:
    """A service the probe checks: its name (the ``target`` label) and the base URL of each
    replica; ``model`` as the request names it (``None``: the first of ``GET /v1/models``);
    ``api_key_file``: a file holding the key a server that requires one (vLLM's ``--api-key``)
    is sent as a bearer token."""

    name: str
    urls: tuple[str, ...]
    model: str | None = None
    api_key_file: str | None = None

    @property
    def url(self) -> str:
        return self.urls[0]


@dataclass(frozen=True)
class ProbeSettings:
    interval_seconds: float = 15.0
    timeout_seconds: float = 10.0  # below the interval: a replica never has two in flight
    jitter: float = 0.1  # each wait is the interval times a factor in [1 - jitter, 1 + jitter]
    max_tokens: int = 8
    prompt: str = DEFAULT_PROMPT
    targets: tuple[ProbeTarget, ...] = field(
        default_factory=lambda: (ProbeTarget(DEFAULT_TARGET, (INFERENCE.url(),)),))

    @property
    def replicas(self) -> int:
        return sum(len(target.urls) for target in self.targets)

    @property
    def peak_requests_per_second(self) -> float:
        """The most requests per second the probe can send: every replica at the shortest
        jittered interval."""
        return self.replicas / (self.interval_seconds * (1 - self.jitter))
