"""What the inference servers export, as the inference board reads it: governor serve's own
``governor_*`` series, or stock ``vllm serve``'s (``kubernetes.server: vllm``).

Stock vLLM has no ``governor_*`` series. The board then reads vLLM's equivalent of each (its
latency histograms, its HTTP counter), the controller's gauges for the limits in force, or says
in the panel that a thing does not exist there — never a panel left empty::

    >>> from governor.slo.spec import SloSpec
    >>> series_of(SloSpec("governor/v1", "s", 2592000, ())).itl.name
    'governor_inter_token_latency_seconds'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from governor.contracts.declaration import Metric
from governor.contracts.metrics import service as m
from governor.contracts.metrics import vllm
from governor.slo.spec import SloSpec

NOT_ON_STOCK_VLLM: Final = "Not on stock vLLM"


@dataclass(frozen=True)
class ServerSeries:
    """The series behind the inference board's client-facing panels, and how to read them."""

    ttft: Metric
    itl: Metric
    duration: Metric
    duration_by: tuple[str, ...]  # the label of the duration's route, where it has one
    requests: Metric  # finished HTTP requests
    requests_by: tuple[str, str]  # their route and status labels
    ready: Metric  # a gauge every server exports: the board's $job and $instance list it
    exemplars: bool  # latency observations carry trace ids
    stock_vllm: bool


GOVERNOR_SERVE: Final = ServerSeries(
    m.TIME_TO_FIRST_TOKEN, m.INTER_TOKEN_LATENCY, m.REQUEST_DURATION, (m.LABEL_ROUTE,),
    m.REQUESTS, (m.LABEL_ROUTE, m.LABEL_CODE), m.ENGINE_READY, exemplars=True, stock_vllm=False)
STOCK_VLLM: Final = ServerSeries(
    vllm.TIME_TO_FIRST_TOKEN, vllm.INTER_TOKEN_LATENCY, vllm.E2E_REQUEST_LATENCY, (),
    vllm.HTTP_REQUESTS, (vllm.LABEL_HANDLER, vllm.LABEL_STATUS), vllm.NUM_REQUESTS_RUNNING,
    exemplars=False, stock_vllm=True)


def series_of(spec: SloSpec) -> ServerSeries:
    return STOCK_VLLM if spec.stock_vllm else GOVERNOR_SERVE
