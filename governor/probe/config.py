"""The probe's configuration: the spec's ``probe`` section, where each target is reached from
here, and where the probe listens.

``--target NAME=URL[,URL]`` moves a target the spec names (``governor up`` runs the stack on
127.0.0.1, compose and Kubernetes by service name); it cannot add one, so the probe sends only
to the targets the spec names::

    >>> settings = relocate(ProbeSettings(), {"inference": ("http://127.0.0.1:8000",)})
    >>> settings.targets[0].urls
    ('http://127.0.0.1:8000',)
    >>> relocate(ProbeSettings(), {"other": ("http://x:1",)})
    Traceback (most recent call last):
    ...
    governor.probe.config.ConfigError: --target other: the spec's probe names no such target \
(it names: inference)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from governor.common.secrets import Secret
from governor.contracts.endpoints import LOCAL_HOST, PROBE
from governor.probe.result import Replica
from governor.slo.probe import (
    MAX_REPLICAS,
    MAX_REQUESTS_PER_SECOND,
    ProbeSettings,
)
from governor.slo.probe_fields import check_url


class ConfigError(ValueError):
    """A configuration the probe cannot run with; the message says which option and why."""


@dataclass(frozen=True)
class ProbeConfig:
    settings: ProbeSettings = field(default_factory=ProbeSettings)
    host: str = LOCAL_HOST  # /metrics on this machine only unless told otherwise
    port: int = PROBE.port
    log_level: str = "info"
    log_format: str = "text"
    # Sent as the X-Governor-Probe header, so that governor serve leaves the probe's requests out
    # of its SLIs; None: no mark (the requests count as any client's).
    token: Secret | None = None

    def replicas(self) -> tuple[Replica, ...]:
        return tuple(Replica(t.name, url, t.model, t.api_key_file)
                     for t in self.settings.targets for url in t.urls)


def relocate(settings: ProbeSettings, moved: Mapping[str, tuple[str, ...]]) -> ProbeSettings:
    """``settings`` with the named targets at the given URLs; the rate bound is checked again
    (more URLs are more requests)."""
    names = [t.name for t in settings.targets]
    for name, urls in moved.items():
        if name not in names:
            raise ConfigError(f"--target {name[:80]}: the spec's probe names no such target "
                              f"(it names: {', '.join(names)})")
        for url in urls:
            why = check_url(url)
            if why is not None:
                raise ConfigError(f"--target {name}: {url[:80]!r}: {why}")
        if not urls or len(set(urls)) != len(urls):
            raise ConfigError(f"--target {name}: give one URL or more, each once")
    targets = tuple(dataclasses.replace(t, urls=tuple(u.rstrip("/") for u in moved[t.name]))
                    if t.name in moved else t for t in settings.targets)
    out = dataclasses.replace(settings, targets=targets)
    if out.replicas > MAX_REPLICAS or out.peak_requests_per_second > MAX_REQUESTS_PER_SECOND:
        raise ConfigError(f"--target: {out.replicas} URLs every {out.interval_seconds:g}s "
                          f"would pass the probe's bound ({MAX_REPLICAS} URLs, "
                          f"{MAX_REQUESTS_PER_SECOND:g} requests per second)")
    return out
