"""Where the stack's parts live and how fast the alert pipeline runs: the generator's inputs
besides the spec.

The defaults are production-sensible and address the compose services (``inference:8000`` …);
``governor up`` passes localhost addresses, and the integration test shrinks every interval so
that an alert travels from a scrape to the controller's webhook in seconds::

    params = RenderParams(scrape_interval_seconds=1, evaluation_interval_seconds=1,
                          fast_window_seconds=5, fast_for_seconds=2, ...)
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Final

from governor.contracts.alerting import CONTROL_REPEAT_INTERVAL_SECONDS
from governor.contracts.endpoints import (
    ALERTMANAGER,
    CONTROLLER,
    EXPORTER,
    INFERENCE,
    LOCAL_HOST,
    PROBE,
)

DAY: Final = 86400


@dataclass(frozen=True)
class Endpoints:
    """``host:port`` addresses, as Prometheus and Alertmanager reach them."""

    inference: tuple[str, ...] = (INFERENCE.address(),)
    exporter: tuple[str, ...] = (EXPORTER.address(),)
    controller: tuple[str, ...] = (CONTROLLER.address(),)
    alertmanager: tuple[str, ...] = (ALERTMANAGER.address(),)
    # The synthetic probe's /metrics (governor probe); none: no probe job.
    probe: tuple[str, ...] = (PROBE.address(),)

    def __post_init__(self) -> None:
        for item in fields(self):
            addresses = getattr(self, item.name)
            if isinstance(addresses, str) or not all(_is_address(a) for a in addresses):
                raise ValueError(f"{item.name}: expected host:port addresses, got {addresses!r}")
        if not self.controller:
            raise ValueError("controller: at least one address is needed for its webhook")

    @classmethod
    def local(cls, host: str = LOCAL_HOST) -> Endpoints:
        """Everything on one machine at the default ports (``governor up``)."""
        return cls((INFERENCE.address(host),), (EXPORTER.address(host),),
                   (CONTROLLER.address(host),), (ALERTMANAGER.address(host),),
                   (PROBE.address(host),))


def _is_address(address: object) -> bool:
    if not isinstance(address, str):
        return False
    host, _, port = address.rpartition(":")
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_[]:")
    return bool(host) and set(host) <= allowed and port.isdigit() and 0 < int(port) < 65536


@dataclass(frozen=True)
class RenderParams:
    """Intervals (whole seconds) and paths that are not part of the SLO spec."""

    scrape_interval_seconds: int = 15
    evaluation_interval_seconds: int = 30
    # The fast P99 alert: histogram_quantile over this window, firing after `for`.
    fast_window_seconds: int = 60
    fast_for_seconds: int = 60
    # Alertmanager: page/ticket routes, and the controller's route (faster, repeats sooner).
    group_wait_seconds: int = 30
    group_interval_seconds: int = 300
    repeat_interval_seconds: int = 4 * 3600
    ticket_repeat_interval_seconds: int = 24 * 3600
    control_group_wait_seconds: int = 10
    control_group_interval_seconds: int = 60
    control_repeat_interval_seconds: int = CONTROL_REPEAT_INTERVAL_SECONDS
    # Prometheus keeps the SLO period plus this margin, so the [period] queries are always full.
    retention_margin_seconds: int = 5 * DAY
    # Where Alertmanager reads the controller's bearer token (a Docker secret in compose).
    controller_token_file: str = "/run/secrets/controller_token"
    # The health alerts' `for`, scaled down by tests; never above each alert's own default.
    health_for_cap_seconds: int = 3600

    @classmethod
    def fast(cls, controller_token_file: str) -> RenderParams:
        """The short intervals of ``governor up`` and the live benchmark: 5 s scrapes and
        evaluations, a 30 s fast-alert window firing after 15 s, the controller's route
        repeating every minute, so a breach reaches the controller within a minute."""
        return cls(scrape_interval_seconds=5, evaluation_interval_seconds=5,
                   fast_window_seconds=30, fast_for_seconds=15, control_group_wait_seconds=5,
                   control_group_interval_seconds=30, control_repeat_interval_seconds=60,
                   controller_token_file=controller_token_file)

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name.endswith("_seconds") and (not isinstance(value, int) or value <= 0):
                raise ValueError(f"{item.name} must be a positive whole number: got {value!r}")
        if self.fast_window_seconds < 2 * self.scrape_interval_seconds:
            raise ValueError("fast_window_seconds must cover at least two scrapes "
                             f"({2 * self.scrape_interval_seconds}s) for rate() to see a change")
        if not self.controller_token_file or "\n" in self.controller_token_file:
            raise ValueError("controller_token_file must be a path")
