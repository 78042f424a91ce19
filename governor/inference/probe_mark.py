"""Whether a request is the synthetic probe's: its ``X-Governor-Probe`` header carries the probe
token, a secret ``governor probe`` and this service share.

A request the probe sends is left out of the service's request and latency series (the SLIs), so
the mark must not be something any client can send: only the token, compared in constant time,
marks a request. A header with anything else (a guess, an empty value, the header given twice)
or a service without a probe token makes an ordinary request, counted where every request is and
in ``governor_probe_mark_rejected_total`` by reason; the header's value is never logged::

    >>> token = Secret("t0ken")
    >>> probe_mark(["t0ken"], token), probe_mark([], token)
    (Mark(probe=True, rejected=None), Mark(probe=False, rejected=None))
    >>> probe_mark(["1"], token).rejected, probe_mark(["t0ken"], None).rejected
    ('wrong_token', 'no_token_configured')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from governor.common.secrets import Secret
from governor.contracts.metrics.service import REASON_NO_TOKEN, REASON_WRONG_TOKEN


@dataclass(frozen=True, slots=True)
class Mark:
    """``probe``: the request is the probe's; ``rejected``: why a mark was refused, or
    ``None`` when there was none to refuse."""

    probe: bool
    rejected: str | None = None


UNMARKED = Mark(probe=False)
PROBE = Mark(probe=True)


def probe_mark(values: Sequence[str], token: Secret | None) -> Mark:
    """What the request's ``X-Governor-Probe`` header values (every one it sent) say."""
    if not values:
        return UNMARKED
    if token is None:
        return Mark(probe=False, rejected=REASON_NO_TOKEN)
    # One header, its value the token. Two headers are refused even if one matches: a proxy
    # that appends its own would otherwise let a client's guess ride along.
    matches = token.matches(values[0].strip())
    if matches and len(values) == 1:
        return PROBE
    return Mark(probe=False, rejected=REASON_WRONG_TOKEN)
