"""The spec a drill runs on: the user's, checked, or a copy with a tighter inter-token SLO.

A drill whose cause cannot breach the spec's inter-token threshold on the simulated GPU (a
saturated H200 still decodes in 35-55 ms) runs on a copy of the spec, written into its run
directory, whose inter-token SLOs have the drill's threshold instead; every other line of the
spec is the user's::

    >>> data = {"slos": [{"name": "itl", "sli": {"latency": {
    ...     "metric": "governor_inter_token_latency_seconds", "threshold": "120ms"}}}]}
    >>> tighten(data, 0.025)
    ['itl']
    >>> data["slos"][0]["sli"]["latency"]["threshold"]
    '25ms'
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from governor.contracts.metrics import service, vllm
from governor.generation.catalog import load_checked_spec
from governor.generation.yamltext import yaml_body
from governor.slo.spec import SloSpec, SpecError
from governor.slo.yamlio import YamlError, read_documents, read_file

ITL_HISTOGRAMS: Final = frozenset({service.INTER_TOKEN_LATENCY.name,
                                   vllm.INTER_TOKEN_LATENCY.name})


class DrillSpecError(Exception):
    """The spec cannot be read, or cannot be tightened for a drill."""


def check(path: Path) -> SloSpec:
    """The spec at ``path``, validated as ``governor up`` validates it (thresholds on bucket
    edges included); :class:`DrillSpecError` with every problem otherwise."""
    try:
        return load_checked_spec(path)
    except SpecError as exc:
        raise DrillSpecError(f"{path} is invalid: " + "; ".join(exc.errors)) from None


def tighten(data: object, threshold_seconds: float) -> list[str]:
    """Set the threshold of every inter-token latency SLO in a native spec's ``data`` (in
    place); the names of the SLOs changed."""
    changed = []
    slos = data.get("slos") if isinstance(data, dict) else None
    for slo in slos if isinstance(slos, list) else ():
        latency = _latency(slo)
        if latency is not None and latency.get("metric") in ITL_HISTOGRAMS:
            latency["threshold"] = f"{threshold_seconds * 1000:g}ms"
            changed.append(str(slo.get("name")))
    return changed


def _latency(slo: object) -> dict[str, object] | None:
    sli = slo.get("sli") if isinstance(slo, dict) else None
    latency = sli.get("latency") if isinstance(sli, dict) else None
    return latency if isinstance(latency, dict) else None


def tightened_copy(path: Path, threshold_seconds: float, out: Path, why: str) -> Path:
    """A copy of the spec at ``path`` with its inter-token SLOs at ``threshold_seconds``,
    written to ``out`` and checked; :class:`DrillSpecError` when it has no such SLO."""
    try:
        text, source = read_file(path)
        documents = read_documents(text, source)
    except YamlError as exc:
        raise DrillSpecError(str(exc)) from None
    if len(documents) != 1:
        raise DrillSpecError(f"{path}: the drill can tighten a native spec only (one document)")
    data = documents[0].data
    changed = tighten(data, threshold_seconds)
    if not changed:
        raise DrillSpecError(f"{path}: no inter-token latency SLO to tighten (its histogram must "
                             f"be one of {', '.join(sorted(ITL_HISTOGRAMS))})")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"# {path} with {', '.join(changed)} at {threshold_seconds * 1000:g} ms: "
                   f"{why}\n" + yaml_body(data), encoding="utf-8")
    check(out)
    return out
