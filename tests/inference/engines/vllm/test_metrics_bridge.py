"""The bridge re-exposes another registry's ``vllm:*`` families, and only those."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from governor.contracts.metrics import service as svc
from governor.contracts.metrics import vllm
from governor.inference.engines.vllm.metrics import VllmMetricsBridge

LABELS = {vllm.LABEL_MODEL: "m", vllm.LABEL_ENGINE: "0"}


def vllm_like_registry() -> CollectorRegistry:
    """Shaped like vLLM's global registry: its families plus unrelated process metrics."""
    source = CollectorRegistry()
    labelnames = list(LABELS)
    Gauge(vllm.NUM_REQUESTS_RUNNING.name, "running", labelnames, registry=source).labels(
        **LABELS).set(3)
    Counter(vllm.NUM_PREEMPTIONS.name, "preemptions", labelnames, registry=source).labels(
        **LABELS).inc(2)
    Histogram(vllm.TIME_TO_FIRST_TOKEN.name, "ttft", labelnames, registry=source,
              buckets=(0.1, 1.0)).labels(**LABELS).observe(0.05)
    Gauge("process_open_fds", "unrelated", registry=source).set(12)
    return source


def test_vllm_families_appear_in_the_services_registry_beside_its_own() -> None:
    service = CollectorRegistry(auto_describe=True)
    Counter(svc.REQUESTS.name, "requests", ["route", "code"], registry=service).labels(
        "/v1/chat/completions", "200").inc()
    service.register(VllmMetricsBridge(vllm_like_registry()))

    assert service.get_sample_value(vllm.NUM_REQUESTS_RUNNING.name, LABELS) == 3
    assert service.get_sample_value(vllm.NUM_PREEMPTIONS.total, LABELS) == 2
    assert service.get_sample_value(vllm.TIME_TO_FIRST_TOKEN.count, LABELS) == 1
    assert service.get_sample_value("process_open_fds") is None
    exposed = [f.name for f in text_string_to_metric_families(generate_latest(service).decode())]
    assert len(exposed) == len(set(exposed))
    assert svc.REQUESTS.name in exposed


def test_the_bridge_reads_at_scrape_time_and_claims_no_names() -> None:
    source = CollectorRegistry()
    bridge = VllmMetricsBridge(source)
    service = CollectorRegistry(auto_describe=True)
    service.register(bridge)  # before vLLM registered anything: nothing to clash with
    assert list(bridge.describe()) == []
    gauge = Gauge(vllm.KV_CACHE_USAGE.name, "kv", registry=source)
    gauge.set(0.25)
    assert service.get_sample_value(vllm.KV_CACHE_USAGE.name) == 0.25
    gauge.set(0.5)
    assert service.get_sample_value(vllm.KV_CACHE_USAGE.name) == 0.5
    # The service may still register its own collectors afterwards, even vLLM-free ones.
    Gauge(svc.ENGINE_READY.name, "ready", registry=service).set(1)
    service.unregister(bridge)
    assert service.get_sample_value(vllm.KV_CACHE_USAGE.name) is None
