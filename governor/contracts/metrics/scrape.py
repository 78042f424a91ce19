"""Prometheus's own series and the labels it puts on every scraped sample."""

from __future__ import annotations

from typing import Final

from governor.contracts.declaration import Metric

LABEL_JOB: Final = "job"
LABEL_INSTANCE: Final = "instance"
LABEL_LE: Final = "le"  # a histogram bucket's upper edge
# Kubernetes service discovery (prometheus-operator's monitors) adds the namespace of the target.
LABEL_NAMESPACE: Final = "namespace"

UP: Final = Metric("up", "gauge", "1 when the last scrape of the target succeeded, else 0.", "",
                   (LABEL_JOB, LABEL_INSTANCE))
# Prometheus writes these for every target at every scrape, whatever the target exposes.
SCRAPE_DURATION: Final = Metric(
    "scrape_duration_seconds", "gauge", "How long the last scrape of the target took.", "seconds",
    (LABEL_JOB, LABEL_INSTANCE))
SCRAPE_SAMPLES: Final = Metric(
    "scrape_samples_scraped", "gauge", "Samples the target exposed at its last scrape.",
    "samples", (LABEL_JOB, LABEL_INSTANCE))
