"""Workloads: request classes whose arrival rates follow phases, from code or from a YAML file.

A workload is a duration and a few request classes. Each class draws its prompt and output
lengths uniformly from a range and arrives as a Poisson stream whose rate follows a list of
phases: from ``start`` to ``end`` the rate goes linearly from ``from`` to ``to`` (a step, a ramp,
a hold or a drop; ``to`` defaults to ``from``; no phase means no arrivals). Times are durations
(``90s``, ``5m``) or shares of the duration (``45%``), so ``--minutes`` compresses a workload
without changing its shape::

    version: governor/workload/v1
    name: headline
    description: chats decoding while documents arrive, with a load step and a ramp
    duration: 40m
    classes:
      chat: {prompt_tokens: [200, 1200], output_tokens: [150, 450],
             rate: [{start: 0%, end: 100%, from: 12}]}
      doc:  {prompt_tokens: [4000, 7500], output_tokens: [200, 500],
             rate: [{start: 0%, end: 15%, from: 0.5}, {start: 15%, end: 45%, from: 1.3},
                    {start: 45%, end: 60%, from: 1.3, to: 1.9}, {start: 60%, end: 80%, from: 1.9},
                    {start: 80%, end: 100%, from: 0.5}]}

The built-in headline (:meth:`Workload.headline`) is that file, shipped beside this module
(``benchmarks/workloads/headline.yaml`` links to it): chats decoding continuously while
long documents arrive, whose every prefill chunk stalls every decoding chat for one step; at
vLLM's default budget on an H200 (8192) the step and the ramp make those stalls frequent enough
to breach the 120 ms inter-token P99.

>>> w = Workload.headline()
>>> [round(w.rate_of("doc", t), 2) for t in (0.0, 0.15 * 2400 + 1, 0.6 * 2400 + 1, 0.8 * 2400 + 1)]
[0.5, 1.3, 1.9, 0.5]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any, Final

import numpy as np
import yaml

from governor.contracts.promql import parse_duration

VERSION = "governor/workload/v1"
MAX_DURATION_SECONDS = 7 * 86400.0
MAX_RATE = 10_000.0
MAX_TOKENS = 1_000_000
# The benchmark's built-in workload, a file of this package.
HEADLINE_FILE: Final = "headline.yaml"


class WorkloadError(ValueError):
    """Every problem of a workload file at once, one ``where: what`` per line."""

    def __init__(self, source: str, errors: Sequence[str]) -> None:
        self.errors = tuple(errors)
        super().__init__(f"{source}: " + "; ".join(self.errors))


@dataclass(frozen=True, slots=True)
class Arrival:
    at: float
    prompt_tokens: int
    output_tokens: int
    kind: str  # the request class
    # The class a request log recorded for it, where the spec declares that class: the
    # benchmark's per-class scoring keeps it rather than classifying the request again.
    recorded_class: str | None = None


@dataclass(frozen=True, slots=True)
class Phase:
    """From ``start`` to ``end`` (shares of the duration) the rate goes from one value to
    another, linearly."""

    start: float
    end: float
    rate_start: float
    rate_end: float


@dataclass(frozen=True, slots=True)
class RequestClass:
    name: str
    prompt_tokens: tuple[int, int]
    output_tokens: tuple[int, int]
    phases: tuple[Phase, ...]

    def rate(self, t: float, duration: float) -> float:
        """Requests per second at time ``t`` of a run of ``duration`` seconds."""
        for phase in self.phases:
            start, end = phase.start * duration, phase.end * duration
            if start <= t < end:
                if phase.rate_start == phase.rate_end:
                    return phase.rate_start
                share = (t - start) / (end - start)
                return phase.rate_start + share * (phase.rate_end - phase.rate_start)
        return 0.0

    @property
    def peak(self) -> float:
        return max((max(p.rate_start, p.rate_end) for p in self.phases), default=0.0)


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    duration_seconds: float
    classes: tuple[RequestClass, ...]
    description: str = ""

    @classmethod
    def headline(cls, minutes: float = 40.0) -> Workload:
        """The benchmark's scenario over ``minutes``; each phase keeps its share of the run."""
        shipped = resources.files(__name__.rpartition(".")[0]).joinpath(HEADLINE_FILE)
        data = yaml.safe_load(shipped.read_text(encoding="utf-8"))
        return parse_workload(data, HEADLINE_FILE).with_minutes(minutes)

    def with_minutes(self, minutes: float) -> Workload:
        return replace(self, duration_seconds=minutes * 60.0)

    def scaled(self, factor: float) -> Workload:
        """Every arrival rate times ``factor`` (a rehearsal on a smaller engine)."""
        if not factor > 0:
            raise ValueError(f"the rate factor must be positive, got {factor}")
        return replace(self, classes=tuple(replace(c, phases=tuple(
            replace(p, rate_start=p.rate_start * factor, rate_end=p.rate_end * factor)
            for p in c.phases)) for c in self.classes))

    def rate_of(self, name: str, t: float) -> float:
        return next(c for c in self.classes if c.name == name).rate(t, self.duration_seconds)

    def rates(self, t: float) -> dict[str, float]:
        return {c.name: c.rate(t, self.duration_seconds) for c in self.classes}

    def arrivals(self, seed: int) -> list[Arrival]:
        """Every request of the run, in arrival order; the same ``seed`` gives the same list."""
        rng = np.random.default_rng(seed)
        d = self.duration_seconds
        times = [_poisson(rng, _rate_of(c, d), c.peak, d) if c.peak > 0 else []
                 for c in self.classes]
        out = [Arrival(t, _uniform(rng, c.prompt_tokens), _uniform(rng, c.output_tokens), c.name)
               for c, ts in zip(self.classes, times, strict=True) for t in ts]
        return sorted(out, key=lambda a: a.at)

    def to_data(self) -> dict[str, Any]:
        """The YAML form (shares of the duration as percentages)."""
        def phase(p: Phase) -> dict[str, Any]:
            data: dict[str, Any] = {"start": _percent(p.start), "end": _percent(p.end),
                                    "from": p.rate_start}
            if p.rate_end != p.rate_start:
                data["to"] = p.rate_end
            return data

        return {"version": VERSION, "name": self.name, "description": self.description,
                "duration": f"{self.duration_seconds / 60:g}m",
                "classes": {c.name: {"prompt_tokens": list(c.prompt_tokens),
                                     "output_tokens": list(c.output_tokens),
                                     "rate": [phase(p) for p in c.phases]}
                            for c in self.classes}}


def _rate_of(request_class: RequestClass, duration: float) -> Callable[[float], float]:
    return lambda t: request_class.rate(t, duration)


def _percent(share: float) -> str:
    return f"{share * 100:g}%"


def _poisson(rng: np.random.Generator, rate: Callable[[float], float], peak: float,
             end: float) -> list[float]:
    """A non-homogeneous Poisson process by thinning (Lewis and Shedler); ``rate <= peak``."""
    times: list[float] = []
    t = 0.0
    while True:
        t += float(rng.exponential(1.0 / peak))
        if t >= end:
            return times
        if float(rng.random()) * peak <= rate(t):
            times.append(t)


def _uniform(rng: np.random.Generator, bounds: tuple[int, int]) -> int:
    return int(rng.integers(bounds[0], bounds[1] + 1))


# ---- reading a workload file -------------------------------------------------------------------

def load_workload(path: Path) -> Workload:
    """A workload file, validated; every problem is reported at once (:class:`WorkloadError`)."""
    return parse_workload(read_yaml(path), str(path))


def read_yaml(path: Path) -> object:
    """A workload file's YAML (at most 1 MB), or a :class:`WorkloadError` saying why not."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkloadError(str(path), [f"cannot read: {exc}"]) from exc
    if len(text) > 1_000_000:
        raise WorkloadError(str(path), ["larger than 1 MB: not a workload file"])
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise WorkloadError(str(path), [f"not YAML: {exc}"]) from exc


def parse_workload(data: object, source: str = "<memory>") -> Workload:
    errors: list[str] = []
    if not isinstance(data, Mapping):
        raise WorkloadError(source, ["expected a mapping with version, duration and classes"])
    unknown = sorted(set(map(str, data)) - {"version", "name", "description", "duration",
                                              "classes"})
    errors += [f"{key}: unknown field" for key in unknown]
    if data.get("version") != VERSION:
        errors.append(f"version: expected {VERSION!r}, got {data.get('version')!r}")
    duration = _duration(data.get("duration"), "duration", errors)
    if duration is not None and not 0 < duration <= MAX_DURATION_SECONDS:
        errors.append(f"duration: must be in (0, 7d], got {data.get('duration')!r}")
        duration = None
    classes = _classes(data.get("classes"), duration, errors)
    name, description = data.get("name", Path(source).stem), data.get("description", "")
    if not isinstance(name, str) or not name or not isinstance(description, str):
        errors.append("name, description: must be text")
    if errors:
        raise WorkloadError(source, errors)
    assert duration is not None
    return Workload(str(name), duration, classes, str(description))


def _classes(raw: object, duration: float | None, errors: list[str]) -> tuple[RequestClass, ...]:
    if not isinstance(raw, Mapping) or not raw:
        errors.append("classes: expected a mapping of class name to its traffic")
        return ()
    if len(raw) > 16:
        errors.append(f"classes: at most 16, got {len(raw)}")
        return ()
    found = []
    for name, spec in raw.items():
        where = f"classes.{name}"
        if not isinstance(name, str) or not name.replace("-", "").replace("_", "").isalnum():
            errors.append(f"{where}: a class name is letters, digits, - and _")
            continue
        if not isinstance(spec, Mapping):
            errors.append(f"{where}: expected prompt_tokens, output_tokens and rate")
            continue
        extra = sorted(set(map(str, spec)) - {"prompt_tokens", "output_tokens", "rate"})
        errors += [f"{where}.{key}: unknown field" for key in extra]
        prompt = _range(spec.get("prompt_tokens"), f"{where}.prompt_tokens", errors)
        output = _range(spec.get("output_tokens"), f"{where}.output_tokens", errors)
        phases = _phases(spec.get("rate"), duration, f"{where}.rate", errors)
        if prompt and output and phases is not None:
            found.append(RequestClass(name, prompt, output, phases))
    return tuple(found)


def _range(raw: object, where: str, errors: list[str]) -> tuple[int, int] | None:
    if (not isinstance(raw, list) or len(raw) != 2 or not all(
            isinstance(x, int) and not isinstance(x, bool) for x in raw)
            or not 1 <= raw[0] <= raw[1] <= MAX_TOKENS):
        errors.append(f"{where}: expected [low, high] token counts, 1 ≤ low ≤ high ≤ "
                      f"{MAX_TOKENS}, got {raw!r}")
        return None
    return (raw[0], raw[1])


def _phases(raw: object, duration: float | None, where: str,
            errors: list[str]) -> tuple[Phase, ...] | None:
    if not isinstance(raw, list) or not raw or len(raw) > 100:
        errors.append(f"{where}: expected a list of 1 to 100 phases")
        return None
    phases: list[Phase] = []
    for i, item in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(item, Mapping) or "from" not in item:
            errors.append(f"{at}: expected start, end, from and optionally to")
            continue
        extra = sorted(set(map(str, item)) - {"start", "end", "from", "to"})
        errors += [f"{at}.{key}: unknown field" for key in extra]
        start = _share(item.get("start"), duration, f"{at}.start", errors)
        end = _share(item.get("end"), duration, f"{at}.end", errors)
        first = _rate(item.get("from"), f"{at}.from", errors)
        last = _rate(item.get("to", item.get("from")), f"{at}.to", errors)
        if None in (start, end, first, last):
            continue
        assert start is not None and end is not None and first is not None and last is not None
        if not start < end:
            errors.append(f"{at}: start must come before end")
        elif phases and start < phases[-1].end:
            errors.append(f"{at}: overlaps the phase before it")
        else:
            phases.append(Phase(start, end, first, last))
    return tuple(phases)


def _share(raw: object, duration: float | None, where: str, errors: list[str]) -> float | None:
    if isinstance(raw, str) and raw.strip().endswith("%"):
        try:
            value = float(raw.strip()[:-1]) / 100
        except ValueError:
            value = -1.0
    else:
        seconds = _duration(raw, where, errors)
        if seconds is None or duration is None:
            return None
        value = seconds / duration
    if not 0 <= value <= 1:
        errors.append(f"{where}: must lie within the run (0% to 100%), got {raw!r}")
        return None
    return value


def _duration(raw: object, where: str, errors: list[str]) -> float | None:
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return float(raw)
    if isinstance(raw, str):
        try:
            return float(parse_duration(raw))
        except ValueError as exc:
            errors.append(f"{where}: {exc}")
            return None
    errors.append(f"{where}: expected a duration such as 90s or 5m, or a share such as 45%")
    return None


def _rate(raw: object, where: str, errors: list[str]) -> float | None:
    if isinstance(raw, int | float) and not isinstance(raw, bool) and 0 <= raw <= MAX_RATE:
        return float(raw)
    errors.append(f"{where}: expected requests per second in [0, {MAX_RATE:g}], got {raw!r}")
    return None


def dump_workload(workload: Workload) -> str:
    return yaml.safe_dump(workload.to_data(), sort_keys=False, default_flow_style=None,
                          width=100)
