"""Where the stack lives in a fleet: scrape jobs and selectors, alert routing, Kubernetes.

Three optional sections of ``slo.yaml``; without them the generated files are those of
Governor's own stack (jobs ``inference``, ``gpu``, ``controller``; severities ``page``,
``ticket``, ``control``)::

    >>> targets = Targets(inference=Target("vllm", Labels({"namespace": "llm"})))
    >>> [m.render() for m in targets.inference.matchers()]
    ['job="vllm"', 'namespace="llm"']
    >>> Alerting().runbook("GpuLost")
    'docs/runbooks.md#gpulost'

The GPUs' series come from Governor's exporter unless the spec says they come from NVIDIA's
dcgm-exporter (``targets.gpu.source: dcgm``)::

    >>> GpuTarget("nvidia-dcgm-exporter", source=SOURCE_DCGM).dcgm
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from governor.contracts.endpoints import (
    CONTROLLER,
    INFERENCE,
    JOB_CONTROLLER,
    JOB_GPU,
    JOB_INFERENCE,
)
from governor.contracts.promql import Matcher, eq
from governor.slo.autoscaling import Autoscaling
from governor.slo.labels import Labels

SEVERITIES: Final = ("page", "ticket", "control")
# Where the GPUs' series come from: Governor's exporter (``gpu_*``) or NVIDIA's dcgm-exporter
# (``DCGM_FI_*``), which the GPU board and the GPU health alerts then read instead.
SOURCE_GOVERNOR: Final = "governor"
SOURCE_DCGM: Final = "dcgm"
GPU_SOURCES: Final = (SOURCE_GOVERNOR, SOURCE_DCGM)
DEFAULT_RUNBOOKS: Final = "docs/runbooks.md"
# prometheus-operator as kube-prometheus-stack installs it, in namespace "monitoring".
DEFAULT_PROMETHEUS_URL: Final = "http://prometheus-operated.monitoring.svc:9090"
DEFAULT_MODEL: Final = "meta-llama/Meta-Llama-3-8B-Instruct"


@dataclass(frozen=True)
class Target:
    """One component's series: its scrape job and any extra equality matchers (a namespace)."""

    job: str
    selector: Mapping[str, str] = field(default_factory=Labels)

    def matchers(self) -> tuple[Matcher, ...]:
        """``job="…"`` first, then the extra matchers by label name."""
        return (eq("job", self.job), *(eq(k, v) for k, v in self.selector.items()))


@dataclass(frozen=True)
class GpuTarget(Target):
    """The GPUs' target, and which exporter it is: Governor's or NVIDIA's dcgm-exporter."""

    source: str = SOURCE_GOVERNOR

    @property
    def dcgm(self) -> bool:
        return self.source == SOURCE_DCGM


@dataclass(frozen=True)
class Targets:
    """The ``targets`` section: the scrape jobs of the three components."""

    inference: Target = Target(JOB_INFERENCE)
    gpu: GpuTarget = GpuTarget(JOB_GPU)
    controller: Target = Target(JOB_CONTROLLER)

    def jobs(self) -> tuple[str, str, str]:
        return self.inference.job, self.gpu.job, self.controller.job


@dataclass(frozen=True)
class PrefixCacheAlert:
    """``alerting.prefix_cache``: when vLLM's prefix-cache hit ratio is low enough for a ticket.

    By default relative to the ratio's own recent past: below ``below_baseline`` times its median
    over ``baseline_seconds`` (while busy), so a fleet whose prompts share little never fires and
    one that loses its shared prefixes does; ``below`` sets a fixed floor instead. Either way an
    engine looking up fewer than ``min_queried_tokens_per_second`` prompt tokens stays quiet.
    """

    below_baseline: float | None = 0.5  # a share of the baseline, in (0, 1)
    baseline_seconds: int = 6 * 3600
    below: float | None = None  # a fixed hit ratio in (0, 1); replaces below_baseline
    min_queried_tokens_per_second: float = 50.0
    for_seconds: int = 15 * 60

    @property
    def relative(self) -> bool:
        return self.below is None


PREFIX_CACHE_BASELINES: Final = (3600, 7 * 86400)  # the baseline's bounds, in seconds
# The baseline is the median of the ratio taken this often (a subquery's step), by the alert and
# by the board's line of its threshold alike. A minute, not five: a stack minutes old has a
# baseline (and the board a line) after its first minute.
PREFIX_CACHE_BASELINE_STEP: Final = "1m"


@dataclass(frozen=True)
class GpuHealth:
    """``alerting.gpu_health``: what makes a GPU's process count high and its memory a leak.

    A GPU running more than ``max_processes`` compute processes for ``processes_seconds`` (a
    leaked context that never exits, a second tenant) is WARN; so is one where a process's
    memory grew by more than ``idle_growth_bytes`` over ``idle_seconds`` while the engine beside
    it ran no request (an engine serving nothing should hold still).
    """

    max_processes: int = 1
    processes_seconds: int = 15 * 60
    idle_growth_bytes: int = 512 * 1024 * 1024
    idle_seconds: int = 30 * 60


GPU_HEALTH_WINDOWS: Final = (60, 86400)  # the bounds of both durations, in seconds
MAX_GPU_PROCESSES: Final = 64


@dataclass(frozen=True)
class Alerting:
    """The ``alerting`` section: the fleet's names for the three severities, the runbooks, and
    the options of the alerts that have any."""

    page: str = "page"
    ticket: str = "ticket"
    control: str = "control"  # routed to the controller's webhook
    runbooks: str = DEFAULT_RUNBOOKS  # a URL or path of docs/runbooks.md
    prefix_cache: PrefixCacheAlert = field(default_factory=PrefixCacheAlert)
    gpu_health: GpuHealth = field(default_factory=GpuHealth)

    def severity(self, name: str) -> str:
        """Governor's severity name (``page``, ``ticket``, ``control``) → the fleet's."""
        mapped: str = getattr(self, name)
        return mapped

    def runbook(self, alert: str) -> str:
        """The ``runbook_url`` of an alert: its section of the runbooks (a GitHub anchor)."""
        return f"{self.runbooks}#{alert.lower()}"


@dataclass(frozen=True)
class Cost:
    """The ``cost`` section: what one GPU costs an hour, in the fleet's currency. Without it the
    energy rules are recorded and the cost rules are not."""

    gpu_hour_price: float | None = None


MAX_GPU_HOUR_PRICE: Final = 10_000.0


# The containers whose CPU and memory ``kubernetes.resources`` may set, and what it may set.
CONTAINERS: Final = ("inference", "controller", "exporter", "probe")
RESOURCE_NAMES: Final = ("cpu", "memory")


@dataclass(frozen=True)
class Resources:
    """What a container asks for (``requests``: the scheduler places it by them) and may not
    pass (``limits``): resource name → Kubernetes quantity (``500m``, ``4``, ``16Gi``)."""

    requests: Mapping[str, str] = field(default_factory=Labels)
    limits: Mapping[str, str] = field(default_factory=Labels)

    def over(self, defaults: Resources) -> Resources:
        """These values over ``defaults``, resource by resource."""
        return Resources(Labels({**defaults.requests, **self.requests}),
                         Labels({**defaults.limits, **self.limits}))


def default_resources(container: str, gpus: int) -> Resources:
    """Each container's defaults, in one place. No CPU limit: a throttled server stalls every
    stream it decodes. The inference server's scale with its GPUs (a worker each): vLLM's
    processes, its tokenizers, and /dev/shm (memory-backed, 8 GiB at most) within the limit."""
    if container == "inference":
        return Resources(Labels({"cpu": str(4 * gpus), "memory": f"{16 * gpus}Gi"}),
                         Labels({"memory": f"{32 * gpus}Gi"}))
    if container == "controller":
        return Resources(Labels({"cpu": "50m", "memory": "128Mi"}), Labels({"memory": "512Mi"}))
    if container == "exporter":
        return Resources(Labels({"cpu": "50m", "memory": "64Mi"}), Labels({"memory": "256Mi"}))
    if container == "probe":  # a request every few seconds at most
        return Resources(Labels({"cpu": "20m", "memory": "64Mi"}), Labels({"memory": "256Mi"}))
    raise KeyError(f"no container named {container!r} (known: {', '.join(CONTAINERS)})")


# The user and group Governor's images run as (the Dockerfiles' ``governor``), and every
# unprivileged container's by default: stock vLLM's image has no user of its own but root.
GOVERNOR_UID: Final = 10001
# The containers whose user, group and root filesystem ``kubernetes.security`` may set: all but
# the exporter, which runs privileged as root (GPM profiling answers NO_PERMISSION otherwise).
UNPRIVILEGED: Final = ("inference", "controller", "probe")
MAX_ID: Final = 2**31 - 1  # the largest user or group id Kubernetes takes


@dataclass(frozen=True)
class Security:
    """How an unprivileged container runs: as this user and group (never root: the kubelet
    checks ``runAsNonRoot`` against the number), its root filesystem read-only or not. It never
    gains a privilege or holds a capability, whatever the spec says."""

    run_as_user: int = GOVERNOR_UID
    run_as_group: int = GOVERNOR_UID
    read_only_root_filesystem: bool = True


@dataclass(frozen=True)
class Kubernetes:
    """The ``kubernetes`` section: what the manifests under ``deploy/kubernetes/`` say."""

    namespace: str = "governor"
    # The labels the cluster's Prometheus Operator selects rules, monitors and Alertmanager
    # configurations by; kube-prometheus-stack selects on its Helm release's name.
    labels: Mapping[str, str] = field(
        default_factory=lambda: Labels({"release": "kube-prometheus-stack"}))
    prometheus: str = DEFAULT_PROMETHEUS_URL
    image: str = "governor:latest"  # the Dockerfile's: exporter and controller
    vllm_image: str = "governor-vllm:latest"  # Dockerfile.vllm's: the inference service
    model: str = DEFAULT_MODEL
    replicas: int = 1
    gpus_per_replica: int = 1
    # A MIG profile ("1g.10gb"): each replica then asks for gpus_per_replica MIG devices of it
    # (nvidia.com/mig-<profile>, the GPU Operator's "mixed" MIG strategy) instead of whole GPUs.
    mig_profile: str | None = None
    # What the inference pods run: "governor" (governor serve --engine vllm, from vllm_image) or
    # "vllm" (stock vllm serve with Governor's admin middleware; vllm_image is then the team's
    # own vLLM image with Governor installed into it: docs/stock-vllm.md).
    server: str = "governor"
    # CPU and memory by container, over :func:`default_resources` resource by resource.
    resources: tuple[tuple[str, Resources], ...] = ()
    # User, group and read-only root by container (UNPRIVILEGED), over Security's defaults.
    security: tuple[tuple[str, Security], ...] = ()
    # The example autoscalers' bounds and extra triggers (governor.slo.autoscaling).
    autoscaling: Autoscaling = field(default_factory=Autoscaling)

    def resources_of(self, container: str) -> Resources:
        """The container's requests and limits: the spec's values over the defaults."""
        given = dict(self.resources).get(container, Resources())
        return given.over(default_resources(container, self.gpus_per_replica))

    def security_of(self, container: str) -> Security:
        """How the container runs: the spec's values over :class:`Security`'s defaults."""
        if container not in UNPRIVILEGED:
            raise KeyError(f"{container!r} takes no security settings "
                           f"(those that do: {', '.join(UNPRIVILEGED)})")
        return dict(self.security).get(container, Security())

    @property
    def inference_port(self) -> int:
        return INFERENCE.port

    @property
    def controller_port(self) -> int:
        return CONTROLLER.port
