"""Grafana provisioning: the Prometheus and Jaeger datasources, and the dashboard file provider.

Exemplars on the service's latency histograms carry ``trace_id``; the Prometheus datasource
turns that label into a link to the trace in Jaeger (``exemplarTraceIdDestinations``)::

    datasources(GrafanaParams())["datasources"][0]["jsonData"]["exemplarTraceIdDestinations"]
    # [{'name': 'trace_id', 'datasourceUid': 'jaeger'}]
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Final
from urllib.parse import urlsplit

from governor.contracts.endpoints import JAEGER_UI, LOCAL_HOST, PROMETHEUS
from governor.contracts.metrics.service import EXEMPLAR_TRACE_ID
from governor.contracts.promql import format_duration
from governor.dashboards.board import PROMETHEUS_UID, TAG

JAEGER_UID: Final = "jaeger"
# compose.yaml mounts the generated boards here.
DASHBOARDS_PATH: Final = "/var/lib/grafana/dashboards"
FOLDER: Final = "Governor"


@dataclass(frozen=True)
class GrafanaParams:
    """Where Grafana reaches its datasources (compose hostnames by default)."""

    prometheus_url: str = PROMETHEUS.url()
    jaeger_url: str = JAEGER_UI.url()
    # Grafana's $__rate_interval is four times this, so it must match Prometheus's.
    scrape_interval_seconds: int = 15

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name.endswith("_url"):
                parts = urlsplit(value) if isinstance(value, str) else None
                if parts is None or parts.scheme not in {"http", "https"} or not parts.netloc:
                    raise ValueError(f"{item.name} must be an http(s) URL: got {value!r}")
            elif not isinstance(value, int) or value <= 0:
                raise ValueError(f"{item.name} must be a positive whole number: got {value!r}")

    @classmethod
    def local(cls, scrape_interval_seconds: int = 15, host: str = LOCAL_HOST) -> GrafanaParams:
        """A Grafana on the same machine as ``governor up``'s Prometheus."""
        return cls(PROMETHEUS.url(host), JAEGER_UI.url(host), scrape_interval_seconds)


def datasources(params: GrafanaParams) -> dict[str, Any]:
    return {
        "apiVersion": 1,
        "datasources": [
            {
                "name": "Prometheus",
                "type": "prometheus",
                "uid": PROMETHEUS_UID,
                "access": "proxy",
                "url": params.prometheus_url,
                "isDefault": True,
                "editable": False,
                "jsonData": {
                    "httpMethod": "POST",
                    "prometheusType": "Prometheus",
                    "timeInterval": format_duration(params.scrape_interval_seconds),
                    "exemplarTraceIdDestinations": [
                        {"name": EXEMPLAR_TRACE_ID, "datasourceUid": JAEGER_UID},
                    ],
                },
            },
            {
                "name": "Jaeger",
                "type": "jaeger",
                "uid": JAEGER_UID,
                "access": "proxy",
                "url": params.jaeger_url,
                "editable": False,
            },
        ],
    }


def dashboard_providers() -> dict[str, Any]:
    return {
        "apiVersion": 1,
        "providers": [
            {
                "name": TAG,
                "orgId": 1,
                "folder": FOLDER,
                "type": "file",
                # The files are generated: edits in the UI would be lost at the next reload.
                "disableDeletion": True,
                "allowUiUpdates": False,
                "updateIntervalSeconds": 30,
                "options": {"path": DASHBOARDS_PATH, "foldersFromFilesStructure": False},
            },
        ],
    }
