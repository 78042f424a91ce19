"""A whole native spec from its parts: the top-level keys, the SLOs, then the request classes
(which name the SLOs), each checked by :mod:`governor.slo.fields` and
:mod:`governor.slo.class_fields` with every problem recorded."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from governor.contracts.metrics.service import LABEL_CLASS
from governor.slo import bucket_fields, openslo
from governor.slo import fleet_fields as fleet
from governor.slo.buckets import VllmSettings
from governor.slo.class_fields import classes as parse_classes
from governor.slo.classes import RequestClasses
from governor.slo.fields import (
    SERVICE_NAME,
    Problems,
    parse_labels,
    parse_mapping,
    parse_period,
    parse_slos,
    parse_text,
)
from governor.slo.fleet import Alerting, Cost, Kubernetes, Targets
from governor.slo.model import SLO, SPEC_VERSION, STOCK_VLLM, SloSpec
from governor.slo.probe import ProbeSettings
from governor.slo.probe_fields import probe as parse_probe
from governor.slo.service_buckets import grown_edges, thresholds, too_many

_KEYS = ("version", "service", "period", "labels", "slos", "classes", "targets", "alerting",
         "kubernetes", "vllm", "probe", "cost")


def _class_label_free(labels: Mapping[str, str], slos: Sequence[SLO],
                      problems: Problems) -> None:
    """With classes, the per-class rules set ``class`` themselves: no routing label may."""
    if LABEL_CLASS in labels:
        problems.add(("labels", LABEL_CLASS), f"label {LABEL_CLASS!r} is set by Governor's "
                                              "per-class rules once classes are declared")
    for index, slo in enumerate(slos):
        if LABEL_CLASS in slo.labels:
            problems.add(("slos", index, "labels", LABEL_CLASS),
                         f"label {LABEL_CLASS!r} is set by Governor's per-class rules once "
                         "classes are declared")


def _class_alerts_free(slos: Sequence[SLO], problems: Problems) -> None:
    """SLO ``x``'s per-class alerts are ``XClassErrorBudgetBurn``: an SLO named ``x-class``
    would share that name."""
    index = {slo.camel_name: i for i, slo in enumerate(slos)}
    for slo in slos:
        clash = index.get(slo.camel_name + "Class")
        if clash is not None:
            problems.add(("slos", clash, "name"),
                         f"{slos[clash].name!r}: its alerts would share their names with the "
                         f"per-class alerts of SLO {slo.name!r}; rename one of them")


def _broken(raw: object, slos: Sequence[SLO]) -> frozenset[str]:
    """Names written in ``slos`` whose SLO did not parse."""
    items = raw if isinstance(raw, list) else []
    named = {item.get("name") for item in items if isinstance(item, dict)}
    return frozenset(n for n in named if isinstance(n, str)) - {s.name for s in slos}


def native(
    data: object, problems: Problems, histograms: Mapping[str, Sequence[float]] | None,
) -> SloSpec | None:
    fields = parse_mapping(data, (), problems, _KEYS, ("version", "service", "period", "slos"))
    if fields is None:
        return None
    version = fields.get("version")
    if "version" in fields and version != SPEC_VERSION:
        problems.add(("version",), f"unsupported version {version!r}: this Governor reads "
                                   f"{SPEC_VERSION!r} (or OpenSLO {openslo.API_VERSION!r} "
                                   "documents)")
    service = parse_text(fields.get("service"), ("service",), problems, what="the service name") \
        if "service" in fields else None
    if service is not None and not SERVICE_NAME.fullmatch(service):
        problems.add(("service",), f"{service[:80]!r} must be letters, digits, '_', '.' or '-' "
                                   "(at most 63)")
        service = None
    period = parse_period(fields["period"], ("period",), problems) if "period" in fields else None
    labels = parse_labels(fields.get("labels"), ("labels",), problems)
    # Before the SLOs: their thresholds are checked against the edges the servers expose.
    vllm = bucket_fields.vllm(fields["vllm"], ("vllm",), problems) if "vllm" in fields \
        else VllmSettings()
    if histograms is not None and vllm is not None:
        histograms = vllm.edges(histograms)
    slos = parse_slos(fields["slos"], ("slos",), problems, histograms) if "slos" in fields else ()
    classes: RequestClasses | None = RequestClasses()
    if "classes" in fields:
        classes = parse_classes(fields["classes"], ("classes",), problems, slos, histograms,
                                _broken(fields.get("slos"), slos))
        _class_label_free(labels, slos, problems)
        _class_alerts_free(slos, problems)
    if histograms is not None and classes is not None:
        # The service's histograms grow an edge per threshold: bounded as vLLM bounds its flag.
        for message in too_many(grown_edges(histograms, thresholds(slos, classes))):
            problems.add(("slos",), message)
    targets = fleet.targets(fields["targets"], ("targets",), problems) \
        if "targets" in fields else Targets()
    alerting = fleet.alerting(fields["alerting"], ("alerting",), problems) \
        if "alerting" in fields else Alerting()
    kubernetes = fleet.kubernetes(fields["kubernetes"], ("kubernetes",), problems) \
        if "kubernetes" in fields else Kubernetes()
    probe = parse_probe(fields["probe"], ("probe",), problems) if "probe" in fields \
        else ProbeSettings()
    price = fleet.cost(fields["cost"], ("cost",), problems) if "cost" in fields else Cost()
    if kubernetes is not None and kubernetes.server == STOCK_VLLM and "classes" in fields:
        problems.add(("classes",), "request classes are applied by governor serve; stock vllm "
                                   "serve (kubernetes.server: vllm) neither classifies requests "
                                   "nor labels its series by class")
    if problems.items or service is None or period is None or classes is None \
            or targets is None or alerting is None or kubernetes is None or vllm is None \
            or probe is None or price is None:
        return None
    return SloSpec(SPEC_VERSION, service, period, slos, labels, classes, targets, alerting,
                   kubernetes, vllm, probe, price)
