"""The gate's series on vLLM's ``/metrics``: ``governor serve``'s admission families, same names,
labels and buckets (declared once, in :mod:`governor.contracts.metrics.service`).

vLLM serves the registry it is handed at the edge (prometheus_client's ``REGISTRY``, where vLLM
registers its own). With ``--api-server-count`` above 1 vLLM sets ``PROMETHEUS_MULTIPROC_DIR``
and its ``/metrics`` adds up every API process's files: counters and histograms add up by
themselves; each gauge says how (:data:`MULTIPROCESS_MODES`), ignored with a single process::

    metrics = GateMetrics(registry, ("default",))
    metrics.refused("deadline", "default")
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

from prometheus_client import CollectorRegistry, Gauge

from governor.admission.deadline import DeadlineGate, WaitSample
from governor.contracts.admission import AdmissionBound
from governor.contracts.declaration import Metric
from governor.contracts.instruments import counter, expect, histogram
from governor.contracts.metrics import service as m

# Each process gates its own share: the backlogs and the rates of the shares add up to the
# server's (the processes share the engines), the slack is one setting.
MULTIPROCESS_MODES: Final = {m.ADMISSION_BACKLOG.name: "livesum",
                             m.ADMISSION_PREFILL_RATE.name: "livesum",
                             m.ADMISSION_DEADLINE_SLACK.name: "livemax",
                             m.ADMISSION_VLLM_QUEUED_TOKENS.name: "livemax"}


def _gauge(metric: Metric, registry: CollectorRegistry) -> Gauge:
    expect(metric, "gauge")
    return Gauge(metric.name, metric.help, metric.labels, registry=registry,
                 multiprocess_mode=MULTIPROCESS_MODES[metric.name])  # type: ignore[arg-type]


class GateMetrics:
    def __init__(self, registry: CollectorRegistry, classes: Sequence[str]) -> None:
        self._rejections = counter(m.ADMISSION_REJECTIONS, registry)
        self._admitted = counter(m.ADMITTED_REQUESTS, registry)
        self._predicted = histogram(m.ADMISSION_PREDICTED_WAIT, registry)
        self._wait = histogram(m.ADMISSION_WAIT, registry)
        self._rate = _gauge(m.ADMISSION_PREFILL_RATE, registry)
        self._backlog = _gauge(m.ADMISSION_BACKLOG, registry)
        self._slack = _gauge(m.ADMISSION_DEADLINE_SLACK, registry)
        # vLLM's own bound, registered once this process knows its vLLM has one.
        self._registry = registry
        self._queued_tokens: Gauge | None = None
        # Every class's series exist from the start, so rates per class read 0, not nothing.
        for name in classes:
            self._admitted.labels(name)
            self._predicted.labels(name)
            self._wait.labels(name)

    def admitted(self, request_class: str) -> None:
        self._admitted.labels(request_class).inc()

    def refused(self, reason: str, request_class: str) -> None:
        self._rejections.labels(reason, request_class).inc()

    def waited(self, sample: WaitSample) -> None:
        """A first token: the wait predicted at admission beside the real one."""
        if sample.predicted_seconds is not None:
            self._predicted.labels(sample.name).observe(sample.predicted_seconds)
            self._wait.labels(sample.name).observe(sample.actual_seconds)

    def read(self, gate: DeadlineGate[str]) -> None:
        """The gauges, from the gate now (set, not read at scrape: with several API processes
        the scrape runs in whichever process took it, which reads the others' files)."""
        self._rate.set(gate.rate or 0.0)
        self._backlog.set(gate.pending_tokens + gate.queued_tokens)
        self._slack.set(gate.settings.slack)

    def vllm_bound(self, bound: AdmissionBound) -> None:
        """vLLM's ``max_num_queued_tokens`` as the bound reports it (+Inf: unbounded), where
        this vLLM has it."""
        if not bound.vllm_queued_tokens:
            return
        if self._queued_tokens is None:
            self._queued_tokens = _gauge(m.ADMISSION_VLLM_QUEUED_TOKENS, self._registry)
        value = bound.max_num_queued_tokens
        self._queued_tokens.set(math.inf if value is None else value)
