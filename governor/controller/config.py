"""The controller's configuration, validated once where it enters (the CLI)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from governor.contracts.endpoints import CONTROLLER, LISTEN_HOST, PROMETHEUS_URL
from governor.controller.actuator import Target
from governor.controller.law_config import LawConfig
from governor.controller.model import SloTargets
from governor.controller.queries import QuerySet


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    slo: SloTargets
    queries: QuerySet
    law: LawConfig = field(default_factory=LawConfig)
    prometheus_url: str = PROMETHEUS_URL
    # Targets named on the command line; with ``discover`` also every instance Prometheus scrapes
    # in the inference job. Nothing else is ever sent the admin token.
    static_targets: tuple[Target, ...] = ()
    discover: bool = True
    instance_scheme: str = "http"
    resync_seconds: float = 10.0
    # After a permanent error (bad token, no live retuning) a target is retried this rarely.
    permanent_retry_seconds: float = 300.0
    max_backoff_seconds: float = 120.0
    dry_run: bool = False
    state_path: Path | None = None
    audit_path: Path | None = None
    grafana_url: str | None = None
    # Recent decisions kept per target for ``GET /status``.
    recent_decisions: int = 20
    # Where the webhook, /status and /metrics listen.
    host: str = LISTEN_HOST
    port: int = CONTROLLER.port

    def target_for(self, instance: str) -> Target:
        for target in self.static_targets:
            if target.name == instance:
                return target
        return Target(instance, f"{self.instance_scheme}://{instance}")
