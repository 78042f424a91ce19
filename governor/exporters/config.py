r"""The exporter's configuration: one frozen dataclass, validated once with every error reported.

>>> try:
...     ExporterConfig(interval_seconds=0.05, fake_gpus=-1)
... except ConfigError as exc:
...     print(str(exc).replace("; ", "\n"))
interval must be at least 0.1 s (GPM needs >100 ms between samples): got 0.05
fake GPUs must be between 0 and 64: got -1
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from governor.contracts.endpoints import EXPORTER, LISTEN_HOST
from governor.contracts.package import version
from governor.exporters.gpu.miglayout import Layout
from governor.exporters.gpu.sampler import SamplerConfig

MAX_FAKE_GPUS = 64  # NVML enumerates at most 64 devices per node in practice; more is a typo
MIN_INTERVAL_SECONDS = 0.1
MAX_INTERVAL_SECONDS = 3600.0
# Series names: Governor's gpu_* series, or dcgm-exporter's (the fake GPUs only).
NAMES_GOVERNOR = "governor"
NAMES_DCGM = "dcgm"
NAMES = (NAMES_GOVERNOR, NAMES_DCGM)


class ConfigError(ValueError):
    """Every problem with a configuration, in one message."""


def package_version() -> str:
    return version()


@dataclass(frozen=True, slots=True)
class ExporterConfig:
    host: str = LISTEN_HOST
    port: int = EXPORTER.port
    interval_seconds: float = 1.0
    # dcgm-exporter's own collection interval; energy alone costs 3.3 ms a read on an H200.
    slow_interval_seconds: float = 60.0
    # Readings older than this are withheld (gpu_up 0). None: five intervals, at least 5 s.
    staleness_seconds: float | None = None
    fake_gpus: int = 0  # 0: the real GPUs through NVML
    # Fake GPUs in MIG mode: (index, the profile of each GPU instance), from --fake-mig.
    fake_mig: tuple[tuple[int, tuple[str, ...]], ...] = ()
    # governor serve URLs whose simulated engines the fake GPUs follow (their /sim/device).
    follow: tuple[str, ...] = ()
    names: str = NAMES_GOVERNOR
    gpm: bool = True
    xid: bool = True
    processes: bool = True
    nvml_retry_seconds: float = 30.0
    log_level: str = "info"
    log_format: str = "text"

    def __post_init__(self) -> None:
        problems = self._problems()
        if problems:
            raise ConfigError("; ".join(problems))

    def _problems(self) -> list[str]:
        problems = []
        if not 0 <= self.port <= 65535:
            problems.append(f"port must be between 0 and 65535: got {self.port}")
        if self.interval_seconds < MIN_INTERVAL_SECONDS:
            problems.append(f"interval must be at least {MIN_INTERVAL_SECONDS:g} s (GPM needs "
                            f">100 ms between samples): got {self.interval_seconds:g}")
        if self.interval_seconds > MAX_INTERVAL_SECONDS:
            problems.append(f"interval must be at most {MAX_INTERVAL_SECONDS:g} s: "
                            f"got {self.interval_seconds:g}")
        if self.slow_interval_seconds < self.interval_seconds:
            problems.append(f"slow interval ({self.slow_interval_seconds:g} s) must not be shorter "
                            f"than the interval ({self.interval_seconds:g} s)")
        if self.staleness_seconds is not None and self.staleness_seconds <= self.interval_seconds:
            problems.append(f"staleness ({self.staleness_seconds:g} s) must be longer than the "
                            f"interval ({self.interval_seconds:g} s)")
        if not 0 <= self.fake_gpus <= MAX_FAKE_GPUS:
            problems.append(f"fake GPUs must be between 0 and {MAX_FAKE_GPUS}: "
                            f"got {self.fake_gpus}")
        problems += self._fake_problems()
        if self.nvml_retry_seconds <= 0:
            problems.append(f"NVML retry must be positive: got {self.nvml_retry_seconds:g}")
        return problems

    def _fake_problems(self) -> list[str]:
        problems = []
        if self.follow and not self.fake_gpus:
            problems.append("follow needs fake GPUs (--fake-gpus N): real GPUs show what runs "
                            "on them")
        for url in self.follow:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                problems.append(f"follow: not an http(s) URL of governor serve: {url[:80]!r}")
        if self.fake_mig and not self.fake_gpus:
            problems.append("fake MIG needs fake GPUs (--fake-gpus N): real GPUs are split "
                            "with nvidia-smi mig")
        outside = sorted(gpu for gpu, _ in self.fake_mig if not 0 <= gpu < self.fake_gpus)
        if self.fake_gpus and outside:
            problems.append(f"fake MIG: no fake GPU {', '.join(map(str, outside))} "
                            f"(the fake GPUs are 0 to {self.fake_gpus - 1})")
        if self.names not in NAMES:
            problems.append(f"names must be one of {', '.join(NAMES)}: got {self.names[:40]!r}")
        elif self.names == NAMES_DCGM and not self.fake_gpus:
            problems.append("dcgm-exporter's names are for fake GPUs (--fake-gpus N); real GPUs "
                            "run NVIDIA's dcgm-exporter itself")
        return problems

    @property
    def mig_layout(self) -> Layout:
        return dict(self.fake_mig)

    @property
    def staleness_limit_seconds(self) -> float:
        if self.staleness_seconds is not None:
            return self.staleness_seconds
        return max(5 * self.interval_seconds, 5.0)

    @property
    def sampler(self) -> SamplerConfig:
        return SamplerConfig(
            interval_seconds=self.interval_seconds,
            slow_interval_seconds=self.slow_interval_seconds,
            gpm=self.gpm, xid=self.xid, processes=self.processes,
            nvml_retry_seconds=self.nvml_retry_seconds,
            source="fake" if self.fake_gpus else "nvml",
        )
