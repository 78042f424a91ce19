"""Where each part of the stack listens and how Prometheus names its scrape jobs.

Defaults only: every component takes ``--host``/``--port`` and every generator takes addresses.
A component's ``host`` is its service name in ``compose.yaml``, so the compose defaults and the
local ones (``governor up``, ``--local``) come from the same entry::

    >>> INFERENCE.address(), INFERENCE.url(LOCAL_HOST)
    ('inference:8000', 'http://127.0.0.1:8000')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

LISTEN_HOST: Final = "0.0.0.0"  # a component listens on every interface unless told otherwise
LOCAL_HOST: Final = "127.0.0.1"  # the whole stack on one machine


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A component's default port, and its host name in ``compose.yaml``."""

    host: str
    port: int

    def address(self, host: str | None = None) -> str:
        """``host:port``, as Prometheus names a target (the compose host unless given)."""
        return f"{self.host if host is None else host}:{self.port}"

    def url(self, host: str | None = None) -> str:
        return f"http://{self.address(host)}"


INFERENCE: Final = Endpoint("inference", 8000)
EXPORTER: Final = Endpoint("exporter", 9400)
CONTROLLER: Final = Endpoint("controller", 9500)
PROMETHEUS: Final = Endpoint("prometheus", 9090)
ALERTMANAGER: Final = Endpoint("alertmanager", 9093)
JAEGER_UI: Final = Endpoint("jaeger", 16686)
JAEGER_OTLP: Final = Endpoint("jaeger", 4318)  # OTLP over HTTP: the service's --otlp-endpoint
GRAFANA: Final = Endpoint("grafana", 3000)
PROBE: Final = Endpoint("probe", 9600)  # governor probe: its /metrics

# Scrape job names in the generated prometheus.yml; boards, rules and the controller select on them.
JOB_INFERENCE: Final = "inference"
JOB_GPU: Final = "gpu"
JOB_CONTROLLER: Final = "controller"
JOB_PROBE: Final = "probe"

# The Prometheus a controller started by hand asks by default.
PROMETHEUS_URL: Final = PROMETHEUS.url("localhost")

# Paths one part calls on another: Prometheus scrapes METRICS_PATH (its default), Alertmanager
# posts to the controller's WEBHOOK_PATH, the controller sets limits on the service's
# ADMIN_BATCHING_PATH; HEALTH_PATH answers 200 while a component is ready.
METRICS_PATH: Final = "/metrics"
HEALTH_PATH: Final = "/health"
WEBHOOK_PATH: Final = "/alerts"
ADMIN_BATCHING_PATH: Final = "/admin/batching"
# governor serve's admission bound (governor.contracts.admission).
ADMIN_ADMISSION_PATH: Final = "/admin/admission"

# The service's generation routes, as its ``route`` label names them; a request class of
# slo.yaml may match on them.
CHAT_COMPLETIONS_PATH: Final = "/v1/chat/completions"
COMPLETIONS_PATH: Final = "/v1/completions"
GENERATION_PATHS: Final = (CHAT_COMPLETIONS_PATH, COMPLETIONS_PATH)
# The header a client names its request class with, where slo.yaml's classes match on it (the
# README's example; a class may match any header).
CLASS_HEADER: Final = "x-governor-class"
# The header that marks a request as the synthetic probe's (``governor probe``); its value is the
# probe token (governor.contracts.tokens), a secret the probe and the service share. governor
# serve answers a marked request as any other, but when the token matches counts it in
# governor_probe_requests_served_total instead of its request and latency series, so that the
# probe never counts in the SLIs it is meant to check, and no other client can leave them.
PROBE_HEADER: Final = "x-governor-probe"
