"""The controller's configuration, validated once where it enters (the CLI)."""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from governor.contracts.alerting import ALERT_EXPIRY_REPEATS, CONTROL_REPEAT_INTERVAL_SECONDS
from governor.contracts.endpoints import CONTROLLER, LOCAL_HOST, PROMETHEUS_URL
from governor.controller.actuators import DEFAULT as DEFAULT_ACTUATOR
from governor.controller.law.tuning import LawConfig
from governor.controller.model import SloTargets, Target
from governor.controller.queries import QuerySet
from governor.controller.start_limits import StartLimits


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    slo: SloTargets
    queries: QuerySet
    law: LawConfig = field(default_factory=LawConfig)
    prometheus_url: str = PROMETHEUS_URL
    # Targets named on the command line: by default the only ones ever sent the admin token.
    # With ``discover`` (a pattern) also every instance Prometheus scrapes in the inference job
    # whose ``instance`` label matches it in full.
    static_targets: tuple[Target, ...] = ()
    discover: re.Pattern[str] | None = None
    instance_scheme: str = "http"
    # TLS towards the targets and Prometheus: a CA bundle to trust, or no verification (tests).
    ca_file: Path | None = None
    insecure_skip_verify: bool = False
    # At most this many targets are managed; state of a vanished target is kept this long.
    max_targets: int = 256
    forget_after_seconds: float = 600.0
    resync_seconds: float = 10.0
    # The most one target may take of a pass (its limits read, the law, a change applied): a
    # slow or stalling target is cut off and retried with backoff, the others' pass goes on.
    target_deadline_seconds: float = 15.0
    # After a permanent error (bad token, no live retuning) a target is retried this rarely.
    permanent_retry_seconds: float = 300.0
    max_backoff_seconds: float = 120.0
    dry_run: bool = False
    # The limits a target without state starts from (``governor recommend``'s), or ``None``:
    # it keeps what it runs with until the law moves it.
    start_limits: StartLimits | None = None
    # How limits are read and moved on every target (an entry point of governor.actuators).
    actuator: str = DEFAULT_ACTUATOR
    state_path: Path | None = None
    audit_path: Path | None = None
    grafana_url: str | None = None
    # Recent decisions kept per target for ``GET /status``.
    recent_decisions: int = 20
    # An alert Alertmanager has not re-sent for this long is forgotten (it re-sends a firing one
    # every repeat interval of the controller's route).
    alert_expiry_seconds: float = float(ALERT_EXPIRY_REPEATS * CONTROL_REPEAT_INTERVAL_SECONDS)
    # Where the webhook, /status and /metrics listen: this machine only, unless told (the
    # controller holds the admin token of every target); compose and Kubernetes pass 0.0.0.0.
    host: str = LOCAL_HOST
    port: int = CONTROLLER.port

    def target_for(self, instance: str) -> Target:
        for target in self.static_targets:
            if target.name == instance:
                return target
        if not valid_instance(instance):
            raise ValueError(f"instance {instance[:80]!r} is not host:port")
        return Target(instance, f"{self.instance_scheme}://{instance}")

    def may_discover(self, instance: str) -> bool:
        """Whether a scraped instance may be managed (and so receive the admin token)."""
        return (self.discover is not None and valid_instance(instance)
                and self.discover.fullmatch(instance) is not None)


_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_INSTANCE = re.compile(rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:.]{{2,45}}\]):(\d{{1,5}})")


def without_credentials(url: str) -> str:
    """A URL as it may be shown (logs, ``/status``): any ``user:password@`` dropped."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


def ssl_context(config: ControllerConfig) -> ssl.SSLContext | bool:
    """How the controller checks TLS: a CA bundle, the system's (``True``), or not at all."""
    if config.insecure_skip_verify:
        return False
    if config.ca_file is not None:
        return ssl.create_default_context(cafile=str(config.ca_file))
    return True


def valid_instance(instance: str) -> bool:
    """``host:port`` as Prometheus labels a target, and nothing that could bend a URL: no
    credentials, path, query, spaces or control characters.

    >>> [valid_instance(x) for x in ("a:8000", "10.0.0.7:8000", "[::1]:8000", "a:8000/x",
    ...                              "u:p@a:8000", "a:99999", "a")]
    [True, True, True, False, False, False, False]
    """
    match = _INSTANCE.fullmatch(instance) if len(instance) <= 300 else None
    return match is not None and 0 < int(match.group(1)) < 65536
