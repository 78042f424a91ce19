"""Validating a spec's ``vllm`` section, every problem recorded with its place, as
:mod:`governor.slo.fields` does for the SLOs; vLLM's own checks of ``--custom-histogram-buckets``
(known families, positive finite edges, strictly increasing), so a spec Governor accepts is a flag
vLLM accepts."""

from __future__ import annotations

import difflib
import math
from typing import Final

from governor.contracts.metrics.vllm import BUCKET_FAMILIES
from governor.contracts.promql import format_number
from governor.slo.buckets import MAX_EDGES, VllmSettings
from governor.slo.fields import Problems, parse_mapping, type_name
from governor.slo.yamlio import Path_

KEY: Final = "custom_histogram_buckets"


def _edges(value: object, path: Path_, problems: Problems) -> tuple[float, ...] | None:
    """A family's edges, as vLLM accepts them: 1 to MAX_EDGES finite numbers above 0, each
    greater than the one before."""
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_EDGES:
        problems.add(path, f"must be a list of 1 to {MAX_EDGES} bucket edges in seconds (or "
                           f"tokens) such as [0.05, 0.1, 0.12]: got {type_name(value)}"
                           + (f" of {len(value)}" if isinstance(value, list) else ""))
        return None
    edges: list[float] = []
    for index, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, int | float) \
                or not math.isfinite(item) or item <= 0:
            number = isinstance(item, int | float) and not isinstance(item, bool)
            shown = repr(item)[:40] if number else type_name(item)
            problems.add((*path, index), f"must be a finite number above 0: got {shown}")
            return None
        if edges and item <= edges[-1]:
            problems.add((*path, index), f"{format_number(item)} must be greater than the edge "
                                         f"before it ({format_number(edges[-1])}): edges "
                                         "increase strictly")
            return None
        edges.append(float(item))
    return tuple(edges)


def vllm(value: object, path: Path_, problems: Problems) -> VllmSettings | None:
    fields = parse_mapping(value, path, problems, (KEY,))
    if fields is None:
        return None
    if KEY not in fields:
        return VllmSettings()
    families = fields[KEY]
    where = (*path, KEY)
    if not isinstance(families, dict) or not families:
        problems.add(where, "must map bucket families (as vLLM names them: "
                            f"{', '.join(BUCKET_FAMILIES)}) to their edges: got "
                            f"{type_name(families)}")
        return None
    found: dict[str, tuple[float, ...] | None] = {}
    for family, edges in families.items():
        if family not in BUCKET_FAMILIES:
            close = difflib.get_close_matches(str(family), list(BUCKET_FAMILIES), n=1)
            hint = f"did you mean {close[0]!r}?" if close else \
                f"vLLM's are {', '.join(BUCKET_FAMILIES)}"
            problems.add((*where, str(family)[:80]),
                         f"unknown bucket family {str(family)[:80]!r} ({hint})")
            found[str(family)] = None
            continue
        found[family] = _edges(edges, (*where, family), problems)
    if any(edges is None for edges in found.values()):
        return None
    return VllmSettings(tuple(sorted((f, e) for f, e in found.items() if e is not None)))
