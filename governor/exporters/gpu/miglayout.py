"""``--fake-mig``: which simulated GPUs run in MIG mode, split into which GPU instances.

A layout names a GPU by index and the MIG profiles it is split into, each with a count::

    >>> parse_layout("1=3g.71gb+1g.18gb:2")
    {1: ('3g.71gb', '1g.18gb', '1g.18gb')}
    >>> parse_layout("0=7g.141gb, 1=1g.35gb:4")
    {0: ('7g.141gb',), 1: ('1g.35gb', '1g.35gb', '1g.35gb', '1g.35gb')}

The profiles are an H200's (the GPU the fakes simulate), from NVIDIA's MIG user guide: each takes
sevenths of the compute and eighths of the memory, and a layout must fit in one GPU. Placement
(which slices an instance may start at) is not checked: a layout that fits by the sums is taken.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

MAX_TEXT: Final = 1000  # characters of a layout; 64 GPUs of 7 instances fit in far less
MAX_INSTANCES: Final = 7  # GPU instances on one GPU (an H200 has 7 compute slices)
COMPUTE_SLICES: Final = 7
MEMORY_SLICES: Final = 8


@dataclass(frozen=True, slots=True)
class Profile:
    name: str  # as nvidia-smi and dcgm-exporter's GPU_I_PROFILE write it, e.g. "1g.18gb"
    compute: int  # sevenths of the SMs
    memory: int  # eighths of the memory


PROFILES: Final = {p.name: p for p in (
    Profile("1g.18gb", 1, 1),
    Profile("1g.18gb+me", 1, 1),
    Profile("1g.35gb", 1, 2),
    Profile("2g.35gb", 2, 2),
    Profile("3g.71gb", 3, 4),
    Profile("4g.71gb", 4, 4),
    Profile("7g.141gb", 7, 8),
)}

Layout = dict[int, tuple[str, ...]]  # GPU index → the profile of each GPU instance, in order


def memory_share(profile_name: str) -> float:
    """The share of the GPU's memory an instance of ``profile_name`` holds."""
    return PROFILES[profile_name].memory / MEMORY_SLICES

_PART = re.compile(r"(?P<profile>[0-9a-z.+]{1,16})(?::(?P<count>[0-9]{1,2}))?")


class LayoutError(ValueError):
    """A layout that cannot be read or does not fit; the message says which part and why."""


def parse_layout(text: str) -> Layout:
    """``GPU=PROFILE[:COUNT][+PROFILE[:COUNT]…][,GPU=…]`` → each GPU's instances; '' → {}."""
    if len(text) > MAX_TEXT:
        raise LayoutError(f"a MIG layout of {len(text)} characters is too long "
                          f"(at most {MAX_TEXT})")
    layout: Layout = {}
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        gpu_text, equals, profiles_text = entry.partition("=")
        if not equals or not gpu_text.strip().isdigit() or len(gpu_text.strip()) > 4:
            raise LayoutError(f"{entry[:60]!r}: expected GPU=PROFILE[:COUNT][+…], "
                              f"e.g. 1=1g.18gb:3")
        gpu = int(gpu_text)
        if gpu in layout:
            raise LayoutError(f"GPU {gpu} is given twice")
        layout[gpu] = _instances(gpu, profiles_text.strip())
    return layout


def _instances(gpu: int, text: str) -> tuple[str, ...]:
    instances: list[str] = []
    for part in re.split(r"\+(?!me\b)", text):  # 1g.18gb+me is one profile, not two
        match = _PART.fullmatch(part.strip())
        if match is None or match["profile"] not in PROFILES:
            raise LayoutError(f"GPU {gpu}: {part[:30]!r} is not an H200 MIG profile "
                              f"(one of {', '.join(PROFILES)}, optionally :COUNT)")
        count = int(match["count"] or 1)
        if not 1 <= count <= MAX_INSTANCES:
            raise LayoutError(f"GPU {gpu}: {count} instances of {match['profile']}: "
                              f"between 1 and {MAX_INSTANCES}")
        instances += [match["profile"]] * count
    _check_fit(gpu, instances)
    return tuple(instances)


def _check_fit(gpu: int, instances: list[str]) -> None:
    compute = sum(PROFILES[name].compute for name in instances)
    memory = sum(PROFILES[name].memory for name in instances)
    if len(instances) > MAX_INSTANCES or compute > COMPUTE_SLICES or memory > MEMORY_SLICES:
        raise LayoutError(f"GPU {gpu}: {'+'.join(instances)} does not fit one H200 "
                          f"({compute}/{COMPUTE_SLICES} compute and {memory}/{MEMORY_SLICES} "
                          f"memory slices)")
    if instances.count("1g.18gb+me") > 1:
        raise LayoutError(f"GPU {gpu}: at most one 1g.18gb+me (one GPU has one media set)")
