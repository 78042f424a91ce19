"""The SLO spec: ``slo.yaml`` → a validated, frozen model read by the generators and the controller.

>>> spec = parse_spec({
...     "version": "governor/v1", "service": "inference", "period": "30d",
...     "slos": [{"name": "availability", "objective": "99.9%",
...               "sli": {"ratio": {"errors": 'governor_requests_total{code=~"5.."}',
...                                 "total": "governor_requests_total"}}}]})
>>> spec.slo("availability").objective, spec.period_seconds
(0.999, 2592000)

Every problem is reported at once, each as ``where: what`` (``slo.yaml:9: slos[0].objective: …``),
in :attr:`SpecError.errors`. OpenSLO v1 ``kind: SLO`` documents are accepted too
(``governor.slo.openslo``).
This package imports no runtime component and no generator: the controller imports it, and an
import-linter contract keeps it that way. Checks that need the metric catalog (is the threshold a
bucket edge?) run when the caller passes ``histograms=``, as the generator does
(``governor.generation.catalog.load_checked_spec``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from governor.slo import openslo
from governor.slo.assemble import native
from governor.slo.fields import Problems, format_path, parse_objective, where_in
from governor.slo.model import (
    MAX_PERIOD_SECONDS,
    MIN_PERIOD_SECONDS,
    RESERVED_LABELS,
    SLO,
    SPEC_VERSION,
    Labels,
    LatencySLI,
    RatioSLI,
    SloSpec,
    SpecError,
    camel_case,
)
from governor.slo.yamlio import Document, YamlError, read_documents, read_file

__all__ = [
    "MAX_PERIOD_SECONDS", "MIN_PERIOD_SECONDS", "RESERVED_LABELS", "SLO", "SPEC_VERSION",
    "Labels", "LatencySLI", "RatioSLI", "SloSpec", "SpecError", "camel_case", "load_spec",
    "parse_objective", "parse_spec",
]


def _finish(spec: SloSpec | None, problems: Problems) -> SloSpec:
    if problems.items or spec is None:
        raise SpecError([item for item in problems.items if item] or ["the spec is empty"])
    return spec


def parse_spec(
    data: object, source: str = "<memory>", *,
    histograms: Mapping[str, Sequence[float]] | None = None,
) -> SloSpec:
    """Validate plain data (a native spec, an OpenSLO ``SLO`` document or a list of them).

    ``histograms`` maps histogram names to their bucket edges; with it, a latency SLI's metric
    must be one of them and its threshold one of the edges.
    """
    documents = data if isinstance(data, list) and openslo.is_openslo(data) else [data]
    return _parse([Document(item) for item in documents], source, histograms)


def _parse(
    documents: Sequence[Document], source: str,
    histograms: Mapping[str, Sequence[float]] | None,
) -> SloSpec:
    if not documents:
        raise SpecError([f"{source}: empty; expected version, service, period and slos"])
    if openslo.is_openslo([d.data for d in documents]):
        translation = openslo.translate([d.data for d in documents])
        where = openslo.locator(translation, source, [d.lines for d in documents], format_path)
        problems = Problems(where, quiet_missing=bool(translation.problems))
        for path, message in translation.problems:
            problems.add(path, message)
        return _finish(native(translation.data, problems, histograms), problems)
    if len(documents) > 1:
        raise SpecError([f"{source}: {len(documents)} YAML documents; a Governor spec is one "
                         "(several documents are read as OpenSLO, each with apiVersion "
                         f"{openslo.API_VERSION!r} and kind SLO)"])
    problems = Problems(where_in(source, documents[0].lines))
    return _finish(native(documents[0].data, problems, histograms), problems)


def load_spec(
    path: str | Path, *, histograms: Mapping[str, Sequence[float]] | None = None,
) -> SloSpec:
    """Read and validate a spec file; every problem, YAML ones included, is a :class:`SpecError`."""
    try:
        text, source = read_file(path)
        documents = read_documents(text, source)
    except YamlError as exc:
        raise SpecError([str(exc)]) from exc
    return _parse(documents, source, histograms)
