"""The bridge re-exposes another registry's ``vllm:*`` families, and only those."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from governor.inference import metric_names as names
from governor.inference.engines.vllm.metrics import VllmMetricsBridge

LABELS = {names.VLLM_LABEL_MODEL: "m", names.VLLM_LABEL_ENGINE: "0"}


def vllm_like_registry() -> CollectorRegistry:
    """Shaped like vLLM's global registry: its families plus unrelated process metrics."""
    source = CollectorRegistry()
    labelnames = list(LABELS)
    Gauge(names.VLLM_NUM_REQUESTS_RUNNING, "running", labelnames, registry=source).labels(
        **LABELS).set(3)
    Counter(names.VLLM_NUM_PREEMPTIONS, "preemptions", labelnames, registry=source).labels(
        **LABELS).inc(2)
    Histogram(names.VLLM_TIME_TO_FIRST_TOKEN, "ttft", labelnames, registry=source,
              buckets=(0.1, 1.0)).labels(**LABELS).observe(0.05)
    Gauge("process_open_fds", "unrelated", registry=source).set(12)
    return source


def test_vllm_families_appear_in_the_services_registry_beside_its_own() -> None:
    service = CollectorRegistry(auto_describe=True)
    Counter(names.REQUESTS, "requests", ["route", "code"], registry=service).labels(
        "/v1/chat/completions", "200").inc()
    service.register(VllmMetricsBridge(vllm_like_registry()))

    assert service.get_sample_value(names.VLLM_NUM_REQUESTS_RUNNING, LABELS) == 3
    assert service.get_sample_value(names.VLLM_NUM_PREEMPTIONS + "_total", LABELS) == 2
    assert service.get_sample_value(names.VLLM_TIME_TO_FIRST_TOKEN + "_count", LABELS) == 1
    assert service.get_sample_value("process_open_fds") is None
    exposed = [f.name for f in text_string_to_metric_families(generate_latest(service).decode())]
    assert len(exposed) == len(set(exposed))
    assert names.REQUESTS in exposed


def test_the_bridge_reads_at_scrape_time_and_claims_no_names() -> None:
    source = CollectorRegistry()
    bridge = VllmMetricsBridge(source)
    service = CollectorRegistry(auto_describe=True)
    service.register(bridge)  # before vLLM registered anything: nothing to clash with
    assert list(bridge.describe()) == []
    gauge = Gauge(names.VLLM_KV_CACHE_USAGE, "kv", registry=source)
    gauge.set(0.25)
    assert service.get_sample_value(names.VLLM_KV_CACHE_USAGE) == 0.25
    gauge.set(0.5)
    assert service.get_sample_value(names.VLLM_KV_CACHE_USAGE) == 0.5
    # The service may still register its own collectors afterwards, even vLLM-free ones.
    Gauge(names.ENGINE_READY, "ready", registry=service).set(1)
    service.unregister(bridge)
    assert service.get_sample_value(names.VLLM_KV_CACHE_USAGE) is None
