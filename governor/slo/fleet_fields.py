"""Validating the fleet sections of a spec (``targets``, ``alerting``, ``kubernetes``), every
problem recorded with its place, as :mod:`governor.slo.fields` does for the SLOs."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import replace
from decimal import Decimal
from typing import Final, TypeVar

from governor.contracts.promql import LABEL_NAME, format_duration
from governor.slo.autoscaling_fields import MAX_REPLICAS, autoscaling
from governor.slo.fields import Problems, parse_mapping, parse_seconds, parse_text, type_name
from governor.slo.fleet import (
    CONTAINERS,
    GPU_HEALTH_WINDOWS,
    GPU_SOURCES,
    MAX_GPU_HOUR_PRICE,
    MAX_GPU_PROCESSES,
    MAX_ID,
    PREFIX_CACHE_BASELINES,
    RESOURCE_NAMES,
    SEVERITIES,
    UNPRIVILEGED,
    Alerting,
    Cost,
    GpuHealth,
    GpuTarget,
    Kubernetes,
    PrefixCacheAlert,
    Resources,
    Security,
    Target,
    Targets,
)
from governor.slo.labels import Labels
from governor.slo.model import MAX_LABELS
from governor.slo.yamlio import Path_

T = TypeVar("T")

# A Prometheus job name as service discovery writes them ("monitoring/vllm/0" included).
_JOB: Final = re.compile(r"[A-Za-z0-9_.:/-]{1,128}")
_SEVERITY: Final = re.compile(r"[A-Za-z0-9_.-]{1,63}")
_NAMESPACE: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # a DNS-1123 label
_K8S_NAME: Final = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_K8S_LABEL_KEY: Final = re.compile(
    rf"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_K8S_NAME}")
_K8S_LABEL_VALUE: Final = re.compile(rf"({_K8S_NAME})?")
_URL: Final = re.compile(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~%/-]*)?")
_RUNBOOKS: Final = re.compile(r"[A-Za-z0-9._~%/:+@-]{1,512}")
_IMAGE: Final = re.compile(r"[a-z0-9]([a-zA-Z0-9._/:@-]{0,254})")
# A MIG profile as NVIDIA names them (compute slices "g", memory "gb"): 1g.10gb, 3g.40gb, 7g.80gb.
MIG_PROFILE: Final = re.compile(r"[1-7]g\.[1-9][0-9]{0,2}gb")
_MODEL: Final = re.compile(r"[A-Za-z0-9._/:@+-]{1,256}")
_SELECTOR_VALUE: Final = re.compile(r"[^\x00-\x1f\x7f]{0,256}")
# A Kubernetes quantity without an exponent: 500m, 2, 0.5, 16Gi, 512M.
_QUANTITY: Final = re.compile(r"(?P<number>[0-9]{1,12}(\.[0-9]{1,6})?|\.[0-9]{1,6})"
                              r"(?P<suffix>m|k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?")
_SUFFIXES: Final = {"": Decimal(1), "m": Decimal("0.001"),
                    **{s: Decimal(1000) ** (k + 1) for k, s in enumerate("kMGTP")},
                    **{f"{s}i": Decimal(1024) ** (k + 1) for k, s in enumerate("KMGTP")}}
MAX_GPUS_PER_REPLICA: Final = 8
# Labels a target's selector may not set: the generated queries set or aggregate them.
_SELECTOR_RESERVED: Final = frozenset({"job", "instance", "le", "__name__"})


def _matching(value: object, path: Path_, problems: Problems, pattern: re.Pattern[str],
              what: str) -> str | None:
    text = parse_text(value, path, problems, what=what)
    if text is not None and not pattern.fullmatch(text):
        problems.add(path, f"{text[:80]!r} is not {what}")
        return None
    return text


def _field(fields: dict[str, object], key: str, default: T,
           parse: Callable[[object], T | None]) -> T | None:
    return parse(fields[key]) if key in fields else default


def _selector(value: object, path: Path_, problems: Problems) -> Labels | None:
    if not isinstance(value, dict):
        problems.add(path, f"must be a mapping of label names to values: got {type_name(value)}")
        return None
    if len(value) > MAX_LABELS:
        problems.add(path, f"more than {MAX_LABELS} labels")
        return None
    labels: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not LABEL_NAME.fullmatch(key) or key.startswith("__"):
            problems.add(path, f"{key!r} is not a valid label name")
        elif key in _SELECTOR_RESERVED:
            problems.add((*path, key), f"label {key!r} cannot be selected here"
                                       + (" (set 'job' beside 'selector')" if key == "job"
                                          else ""))
        elif (text := _matching(item, (*path, key), problems, _SELECTOR_VALUE,
                                "a label value (at most 256 printable characters)")) is not None:
            labels[key] = text
    return Labels(labels) if len(labels) == len(value) else None


def _source(value: object, path: Path_, problems: Problems) -> str | None:
    if isinstance(value, str) and value in GPU_SOURCES:
        return value
    close = difflib.get_close_matches(value, GPU_SOURCES, n=1) if isinstance(value, str) else []
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    problems.add(path, f"{value!r}"[:80] + f" is not a GPU source{hint}: governor (Governor's "
                       "exporter) or dcgm (NVIDIA's dcgm-exporter)")
    return None


def _target(value: object, path: Path_, problems: Problems,
            default: Target) -> tuple[str, Labels] | None:
    """A target's ``job`` and ``selector``, checked."""
    fields = parse_mapping(value, path, problems, ("job", "selector"))
    if fields is None:
        return None
    return _job_and_selector(fields, path, problems, default)


def _job_and_selector(fields: dict[str, object], path: Path_, problems: Problems,
                      default: Target) -> tuple[str, Labels] | None:
    job = _field(fields, "job", default.job, lambda v: _matching(
        v, (*path, "job"), problems, _JOB, "a job name (letters, digits, _ . : / -; at most 128)"))
    selector = _field(fields, "selector", Labels(default.selector),
                      lambda v: _selector(v, (*path, "selector"), problems))
    return None if job is None or selector is None else (job, selector)


def _gpu_target(value: object, path: Path_, problems: Problems,
                default: GpuTarget) -> GpuTarget | None:
    """The GPUs' target: a job and selector as the others, and which exporter it is."""
    fields = parse_mapping(value, path, problems, ("job", "selector", "source"))
    if fields is None:
        return None
    common = _job_and_selector(fields, path, problems, default)
    source = _field(fields, "source", default.source,
                    lambda v: _source(v, (*path, "source"), problems))
    return None if common is None or source is None else GpuTarget(*common, source=source)


def targets(value: object, path: Path_, problems: Problems) -> Targets | None:
    fields = parse_mapping(value, path, problems, ("inference", "gpu", "controller"))
    if fields is None:
        return None
    default = Targets()

    def plain(name: str, fallback: Target) -> Target | None:
        if name not in fields:
            return fallback
        read = _target(fields[name], (*path, name), problems, fallback)
        return None if read is None else Target(*read)

    inference = plain("inference", default.inference)
    controller = plain("controller", default.controller)
    gpu = (_gpu_target(fields["gpu"], (*path, "gpu"), problems, default.gpu)
           if "gpu" in fields else default.gpu)
    if inference is None or gpu is None or controller is None:
        return None
    result = Targets(inference, gpu, controller)
    jobs = result.jobs()
    if len(set(jobs)) != len(jobs):
        problems.add(path, f"the three components need different jobs: got {', '.join(jobs)}")
        return None
    return result


def _share(value: object, path: Path_, problems: Problems, what: str) -> float | None:
    """A number strictly between 0 and 1."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
        problems.add(path, f"must be {what}, a number between 0 and 1 (exclusive): got "
                           f"{value!r}"[:200])
        return None
    return float(value)


def _whole_seconds(value: object, path: Path_, problems: Problems, what: str,
                   bounds: tuple[int, int]) -> int | None:
    seconds = parse_seconds(value, path, problems, what)
    if seconds is None:
        return None
    if seconds != seconds.to_integral_value() or not bounds[0] <= seconds <= bounds[1]:
        problems.add(path, f"must be whole seconds between {format_duration(bounds[0])} and "
                           f"{format_duration(bounds[1])}: got {value!r}")
        return None
    return int(seconds)


_PREFIX_CACHE_KEYS: Final = ("below_baseline", "baseline", "below",
                             "min_queried_tokens_per_second", "for")


def prefix_cache(value: object, path: Path_, problems: Problems) -> PrefixCacheAlert | None:
    """``alerting.prefix_cache``: a share of the baseline or a fixed floor (not both)."""
    fields = parse_mapping(value, path, problems, _PREFIX_CACHE_KEYS)
    if fields is None:
        return None
    default = PrefixCacheAlert()
    if "below" in fields and "below_baseline" in fields:
        problems.add(path, "below (a fixed floor) and below_baseline (a share of the baseline) "
                           "are alternatives: set one")
        return None
    below = _field(fields, "below", None, lambda v: _share(
        v, (*path, "below"), problems, "a hit ratio"))
    relative = _field(fields, "below_baseline", default.below_baseline, lambda v: _share(
        v, (*path, "below_baseline"), problems, "a share of the baseline"))
    baseline = _field(fields, "baseline", default.baseline_seconds, lambda v: _whole_seconds(
        v, (*path, "baseline"), problems, "the baseline's window", PREFIX_CACHE_BASELINES))
    for_seconds = _field(fields, "for", default.for_seconds, lambda v: _whole_seconds(
        v, (*path, "for"), problems, "how long the ratio stays low", (60, 86400)))
    rate = _field(fields, "min_queried_tokens_per_second", default.min_queried_tokens_per_second,
                  lambda v: _non_negative(v, (*path, "min_queried_tokens_per_second"), problems))
    if (("below" in fields and below is None) or ("below_baseline" in fields and relative is None)
            or baseline is None or for_seconds is None or rate is None):
        return None
    return PrefixCacheAlert(None if below is not None else relative, baseline, below, rate,
                            for_seconds)


def _non_negative(value: object, path: Path_, problems: Problems) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e12:
        problems.add(path, f"must be prompt tokens per second, a number from 0: got "
                           f"{value!r}"[:200])
        return None
    return float(value)


_GPU_HEALTH_KEYS: Final = ("max_processes", "processes_for", "idle_growth", "idle_window")


def _bytes(value: object, path: Path_, problems: Problems) -> int | None:
    """A size of at least 1Mi: bytes, or a Kubernetes quantity (512Mi, 1Gi)."""
    amount = _quantity(value, path, problems)
    if amount is None:
        return None
    size = quantity(amount)
    if not 2**20 <= size <= 2**50 or size != size.to_integral_value():
        problems.add(path, f"must be whole bytes from 1Mi to 1Pi: got {value!r}"[:200])
        return None
    return int(size)


def gpu_health(value: object, path: Path_, problems: Problems) -> GpuHealth | None:
    """``alerting.gpu_health``: the process count allowed, the memory growth called a leak."""
    fields = parse_mapping(value, path, problems, _GPU_HEALTH_KEYS)
    if fields is None:
        return None
    default = GpuHealth()
    count = _field(fields, "max_processes", default.max_processes, lambda v: _count(
        v, (*path, "max_processes"), problems, MAX_GPU_PROCESSES))
    held = _field(fields, "processes_for", default.processes_seconds, lambda v: _whole_seconds(
        v, (*path, "processes_for"), problems, "how long the count stays high",
        GPU_HEALTH_WINDOWS))
    growth = _field(fields, "idle_growth", default.idle_growth_bytes,
                    lambda v: _bytes(v, (*path, "idle_growth"), problems))
    window = _field(fields, "idle_window", default.idle_seconds, lambda v: _whole_seconds(
        v, (*path, "idle_window"), problems, "the window memory may not grow in while idle",
        GPU_HEALTH_WINDOWS))
    if count is None or held is None or growth is None or window is None:
        return None
    return GpuHealth(count, held, growth, window)


def alerting(value: object, path: Path_, problems: Problems) -> Alerting | None:
    fields = parse_mapping(value, path, problems,
                           (*SEVERITIES, "runbooks", "prefix_cache", "gpu_health"))
    if fields is None:
        return None
    default = Alerting()
    cache = _field(fields, "prefix_cache", default.prefix_cache,
                   lambda v: prefix_cache(v, (*path, "prefix_cache"), problems))
    health = _field(fields, "gpu_health", default.gpu_health,
                    lambda v: gpu_health(v, (*path, "gpu_health"), problems))
    severities: dict[str, str | None] = {
        name: _matching(fields[name], (*path, name), problems, _SEVERITY,
                        "a severity (letters, digits, _ . -; at most 63)")
        if name in fields else name for name in SEVERITIES}
    runbooks = _field(fields, "runbooks", default.runbooks, lambda v: _matching(
        v, (*path, "runbooks"), problems, _RUNBOOKS,
        "a URL or path without spaces (at most 512 characters)"))
    if runbooks is None or cache is None or health is None or \
            any(s is None for s in severities.values()):
        return None
    if len(set(severities.values())) != len(SEVERITIES):
        problems.add(path, "page, ticket and control need different severities: got "
                           + ", ".join(str(s) for s in severities.values()))
        return None
    return Alerting(runbooks=runbooks, prefix_cache=cache, gpu_health=health,
                    **severities)  # type: ignore[arg-type]


def cost(value: object, path: Path_, problems: Problems) -> Cost | None:
    """``cost``: the price of a GPU hour, a positive number."""
    fields = parse_mapping(value, path, problems, ("gpu_hour_price",))
    if fields is None:
        return None
    price = fields.get("gpu_hour_price")
    if price is None:
        return Cost()
    if isinstance(price, bool) or not isinstance(price, int | float) or \
            not 0 < price <= MAX_GPU_HOUR_PRICE:
        problems.add((*path, "gpu_hour_price"),
                     f"must be the price of one GPU hour, a number above 0 and at most "
                     f"{MAX_GPU_HOUR_PRICE:g}: got {price!r}"[:200])
        return None
    return Cost(float(price))


def _k8s_labels(value: object, path: Path_, problems: Problems) -> Labels | None:
    if not isinstance(value, dict) or len(value) > MAX_LABELS:
        problems.add(path, f"must be a mapping of at most {MAX_LABELS} Kubernetes labels: "
                           f"got {type_name(value)}")
        return None
    labels: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or len(key) > 316 or not _K8S_LABEL_KEY.fullmatch(key):
            problems.add(path, f"{str(key)[:80]!r} is not a Kubernetes label key")
        elif (text := _matching(item, (*path, key), problems, _K8S_LABEL_VALUE,
                                "a Kubernetes label value (at most 63 characters: letters, "
                                "digits, - _ .)")) is not None:
            labels[key] = text
    return Labels(labels) if len(labels) == len(value) else None


def _count(value: object, path: Path_, problems: Problems, highest: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= highest:
        problems.add(path, f"must be an integer from 1 to {highest}: got {value!r}"[:200])
        return None
    return value


# What an inference pod may run: Governor's own server, or stock vLLM with Governor's middleware.
SERVERS = ("governor", "vllm")


def _one_of(value: object, path: Path_, problems: Problems, allowed: tuple[str, ...]
            ) -> str | None:
    if not isinstance(value, str) or value not in allowed:
        problems.add(path, f"must be one of {', '.join(allowed)}: got {value!r}"[:200])
        return None
    return value


def quantity(text: str) -> Decimal:
    """A Kubernetes quantity's value: ``500m`` → 0.5, ``1Gi`` → 1073741824.

    >>> quantity("500m"), quantity("1.5Gi") == 1.5 * 2**30
    (Decimal('0.500'), True)
    """
    found = _QUANTITY.fullmatch(text)
    if found is None:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    return Decimal(found["number"]) * _SUFFIXES[found["suffix"] or ""]


def _quantity(value: object, path: Path_, problems: Problems) -> str | None:
    text = str(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else value
    if not isinstance(text, str) or not _QUANTITY.fullmatch(text) or quantity(text) <= 0:
        problems.add(path, f"must be a positive Kubernetes quantity (500m, 4, 16Gi): got "
                           f"{value!r}"[:200])
        return None
    return text


def _amounts(value: object, path: Path_, problems: Problems) -> Labels | None:
    fields = parse_mapping(value, path, problems, RESOURCE_NAMES)
    if fields is None:
        return None
    parsed = {name: _quantity(item, (*path, name), problems) for name, item in fields.items()}
    if any(item is None for item in parsed.values()):
        return None
    return Labels({name: item for name, item in parsed.items() if item is not None})


def _container_resources(value: object, path: Path_, problems: Problems) -> Resources | None:
    fields = parse_mapping(value, path, problems, ("requests", "limits"))
    if fields is None:
        return None
    requests = _amounts(fields.get("requests", {}), (*path, "requests"), problems)
    limits = _amounts(fields.get("limits", {}), (*path, "limits"), problems)
    if requests is None or limits is None:
        return None
    return Resources(requests, limits)


def _resources(value: object, path: Path_, problems: Problems
               ) -> tuple[tuple[str, Resources], ...] | None:
    fields = parse_mapping(value, path, problems, CONTAINERS)
    if fields is None:
        return None
    parsed = {name: _container_resources(item, (*path, name), problems)
              for name, item in fields.items()}
    if any(item is None for item in parsed.values()):
        return None
    return tuple((name, item) for name, item in sorted(parsed.items()) if item is not None)


def _requests_within_limits(k8s: Kubernetes, path: Path_, problems: Problems) -> bool:
    """The API server refuses a container whose request passes its limit: say so here, with
    the defaults the spec's values stand beside."""
    fine = True
    for container in CONTAINERS:
        merged = k8s.resources_of(container)
        for name in RESOURCE_NAMES:
            request, limit = merged.requests.get(name), merged.limits.get(name)
            if request is not None and limit is not None and quantity(request) > quantity(limit):
                problems.add((*path, "resources", container), f"the {name} request {request} "
                             f"passes its limit {limit}: raise limits.{name} too")
                fine = False
    return fine


def _id(value: object, path: Path_, problems: Problems, lowest: int, what: str) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not lowest <= value <= MAX_ID:
        problems.add(path, f"must be {what}, a whole number from {lowest} to {MAX_ID}: got "
                           f"{value!r}"[:200])
        return None
    return value


def _container_security(value: object, path: Path_, problems: Problems) -> Security | None:
    fields = parse_mapping(value, path, problems,
                           ("run_as_user", "run_as_group", "read_only_root_filesystem"))
    if fields is None:
        return None
    parsed: dict[str, object] = {}
    if "run_as_user" in fields:  # root (0) is what runAsNonRoot refuses
        parsed["run_as_user"] = _id(fields["run_as_user"], (*path, "run_as_user"), problems, 1,
                                    "a user id other than root's")
    if "run_as_group" in fields:
        parsed["run_as_group"] = _id(fields["run_as_group"], (*path, "run_as_group"),
                                     problems, 0, "a group id")
    if "read_only_root_filesystem" in fields:
        flag = fields["read_only_root_filesystem"]
        if not isinstance(flag, bool):
            problems.add((*path, "read_only_root_filesystem"),
                         f"must be true or false: got {flag!r}"[:200])
        parsed["read_only_root_filesystem"] = flag if isinstance(flag, bool) else None
    if any(item is None for item in parsed.values()):
        return None
    return replace(Security(), **parsed)  # type: ignore[arg-type]


def _security(value: object, path: Path_, problems: Problems
              ) -> tuple[tuple[str, Security], ...] | None:
    fine = True
    if isinstance(value, dict) and "exporter" in value:
        problems.add((*path, "exporter"), "the exporter runs privileged, as root, on the "
                     "host's PIDs: GPM profiling answers NO_PERMISSION otherwise, and it names "
                     "the container of each GPU process from them (docs/deploy.md)")
        value, fine = {key: item for key, item in value.items() if key != "exporter"}, False
    fields = parse_mapping(value, path, problems, UNPRIVILEGED)
    if fields is None:
        return None
    parsed = {name: _container_security(item, (*path, name), problems)
              for name, item in fields.items()}
    if not fine or any(item is None for item in parsed.values()):
        return None
    return tuple((name, item) for name, item in sorted(parsed.items()) if item is not None)


def kubernetes(value: object, path: Path_, problems: Problems) -> Kubernetes | None:
    keys = ("namespace", "labels", "prometheus", "image", "vllm_image", "model", "replicas",
            "gpus_per_replica", "mig_profile", "server", "resources", "security", "autoscaling")
    fields = parse_mapping(value, path, problems, keys)
    if fields is None:
        return None
    d = Kubernetes()

    def text(key: str, pattern: re.Pattern[str], what: str) -> str | None:
        return _field(fields, key, getattr(d, key), lambda v: _matching(
            v, (*path, key), problems, pattern, what))

    parsed: dict[str, object] = {
        "namespace": text("namespace", _NAMESPACE, "a namespace (a DNS label: a-z, 0-9, -)"),
        "labels": _field(fields, "labels", d.labels,
                         lambda v: _k8s_labels(v, (*path, "labels"), problems)),
        "prometheus": text("prometheus", _URL, "an http(s) URL of Prometheus"),
        "image": text("image", _IMAGE, "a container image reference"),
        "vllm_image": text("vllm_image", _IMAGE, "a container image reference"),
        "model": text("model", _MODEL, "a model name or path without spaces"),
        "replicas": _field(fields, "replicas", d.replicas, lambda v: _count(
            v, (*path, "replicas"), problems, MAX_REPLICAS)),
        "gpus_per_replica": _field(fields, "gpus_per_replica", d.gpus_per_replica,
                                   lambda v: _count(v, (*path, "gpus_per_replica"), problems,
                                                    MAX_GPUS_PER_REPLICA)),
        "server": _field(fields, "server", d.server,
                         lambda v: _one_of(v, (*path, "server"), problems, SERVERS)),
        "resources": _field(fields, "resources", d.resources,
                            lambda v: _resources(v, (*path, "resources"), problems)),
        "security": _field(fields, "security", d.security,
                           lambda v: _security(v, (*path, "security"), problems)),
    }
    mig = text("mig_profile", MIG_PROFILE, "a MIG profile such as 1g.10gb or 3g.40gb") \
        if "mig_profile" in fields else None
    replicas = parsed["replicas"]
    if "autoscaling" in fields and isinstance(replicas, int):
        parsed["autoscaling"] = autoscaling(fields["autoscaling"], (*path, "autoscaling"),
                                            problems, replicas)
    if any(item is None for item in parsed.values()) or ("mig_profile" in fields and not mig):
        return None
    k8s = Kubernetes(**parsed, mig_profile=mig)  # type: ignore[arg-type]
    return k8s if _requests_within_limits(k8s, path, problems) else None
