"""/metrics: governor_ series with SLO buckets and trace exemplars, vLLM's names, promtool."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from prometheus_client.parser import text_string_to_metric_families as text_families

from governor.contracts.metrics import service as svc
from governor.contracts.metrics import vllm
from governor.contracts.promql import parse_selector
from governor.inference.admission.queue import AdmissionQueue
from governor.inference.engines.base import EngineError, EngineErrorKind
from governor.inference.telemetry.metrics import ServiceMetrics
from governor.slo.spec import RatioSLI, load_spec
from tests.inference.conftest import ADMIN_TOKEN, Service
from tests.support.scripted import Script

ROOT = Path(__file__).resolve().parents[3]


async def scrape(service: Service, accept: str = "") -> tuple[str, str]:
    headers = {"Accept": accept} if accept else {}
    async with aiohttp.ClientSession() as session, session.get(
        f"{service.url}/metrics", headers=headers
    ) as response:
        return response.headers["Content-Type"], await response.text()


async def drive(service: Service, requests: int = 3) -> None:
    client = service.openai()
    for _ in range(requests):
        stream = await client.chat.completions.create(
            model=service.engine.model_name, max_tokens=8, stream=True,
            messages=[{"role": "user", "content": "measure me please"}])
        async for _ in stream:
            pass


async def test_latency_histograms_hold_the_slo_thresholds_as_buckets(service: Service) -> None:
    await drive(service)
    _, text = await scrape(service)
    families = {f.name: f for f in text_families(text)}
    itl = families[svc.INTER_TOKEN_LATENCY.name]
    edges = {s.labels["le"] for s in itl.samples if s.name.endswith("_bucket")}
    assert "0.12" in edges
    ttft = families[svc.TIME_TO_FIRST_TOKEN.name]
    assert "1.0" in {s.labels["le"] for s in ttft.samples if s.name.endswith("_bucket")}
    count = next(s.value for s in ttft.samples if s.name.endswith("_count"))
    assert count == 3


async def test_openmetrics_carries_trace_id_exemplars(service: Service) -> None:
    await drive(service)
    content_type, text = await scrape(service, "application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    exemplars = [
        sample.exemplar
        for family in text_string_to_metric_families(text)  # type: ignore[no-untyped-call]
        if family.name in {svc.INTER_TOKEN_LATENCY.name, svc.TIME_TO_FIRST_TOKEN.name}
        for sample in family.samples if sample.exemplar is not None
    ]
    assert exemplars
    assert all(len(e.labels[svc.EXEMPLAR_TRACE_ID]) == 32 for e in exemplars)
    # vLLM's colon names survive OpenMetrics (prometheus_client would rewrite them by default).
    assert f"\n{vllm.NUM_REQUESTS_RUNNING.name}{{" in text


async def test_vllm_series_keep_vllms_names(service: Service) -> None:
    await drive(service)
    _, text = await scrape(service)
    names = {f.name for f in text_families(text)}
    for name in (vllm.NUM_REQUESTS_RUNNING.name, vllm.NUM_REQUESTS_WAITING.name,
                 vllm.KV_CACHE_USAGE.name, vllm.TIME_TO_FIRST_TOKEN.name,
                 vllm.INTER_TOKEN_LATENCY.name, vllm.E2E_REQUEST_LATENCY.name,
                 vllm.REQUEST_QUEUE_TIME.name):
        assert name in names, name
    assert f"{vllm.GENERATION_TOKENS.total}{{" in text
    assert f"{vllm.NUM_PREEMPTIONS.total}{{" in text


async def test_the_default_global_registry_is_not_used(service: Service) -> None:
    _, text = await scrape(service)
    assert "process_cpu_seconds_total" not in text
    assert "python_gc_objects_collected_total" not in text


async def test_requests_are_counted_by_route_code_and_class(service: Service) -> None:
    await drive(service, 2)
    await scrape(service)
    # Without classes in the spec every generation request is in the default class; a request
    # that is no generation (a scrape) has none.
    assert service.sample(svc.REQUESTS.total, {"route": "/v1/chat/completions", "code": "200",
                                               "class": svc.DEFAULT_CLASS}) == 2.0
    assert service.sample(svc.REQUESTS.total, {"route": "/metrics", "code": "200",
                                               "class": svc.UNCLASSIFIED}) == 1.0
    assert service.sample(svc.TIME_TO_FIRST_TOKEN.count, {
        "model": service.engine.model_name, "class": svc.DEFAULT_CLASS}) == 2.0


def selected(service: Service, selector_text: str) -> float:
    """The sum of the service's samples a PromQL selector picks, as Prometheus would pick them."""
    selector = parse_selector(selector_text)
    return sum(sample.value for family in service.registry.collect()
               for sample in family.samples if sample.name == selector.metric
               and all(m.matches(sample.labels.get(m.label, "")) for m in selector.matchers))


async def test_the_shipped_availability_sli_counts_api_requests_not_probes_scrapes_or_admin(
    scripted: Callable[..., Awaitable[Service]],
) -> None:
    """One client pipelined 5,000 /health requests in 5.6 s: every route was in the SLI's
    denominator, so real 5xx ratios looked about 100 times smaller."""
    sli = load_spec(ROOT / "slo.yaml").slo("availability").sli
    assert isinstance(sli, RatioSLI)
    script = Script(fail_before_first=EngineError(EngineErrorKind.DEAD, "engine core died"))
    service = await scripted(script)
    body = {"model": "scripted", "max_tokens": 2,
            "messages": [{"role": "user", "content": "a b"}]}
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{service.url}/v1/chat/completions", json=body) as response:
            assert response.status == 503  # the server's fault: it counts
        script.fail_before_first = None
        async with session.post(f"{service.url}/v1/chat/completions", json=body) as response:
            assert response.status == 200
        no_headers: dict[str, str] = {}
        dilution = ([("/health", no_headers)] * 300 + [("/metrics", no_headers)] * 20
                    + [("/admin/batching", admin)] * 10 + [("/admin/batching", no_headers)] * 10
                    + [("/no/such/route", no_headers)] * 10)

        async def get(path: str, headers: dict[str, str]) -> None:
            async with session.get(service.url + path, headers=headers) as answer:
                await answer.read()

        await asyncio.gather(*(get(path, headers) for path, headers in dilution))
    assert selected(service, sli.errors) / selected(service, sli.total) == 0.5


async def test_the_shipped_availability_sli_counts_no_client_error_on_the_generation_routes(
    scripted: Callable[..., Awaitable[Service]],
) -> None:
    """An unknown model is a 404 on /v1/chat/completions (the red team sent ~2,000 a second
    on one pipelined connection), a malformed body a 400: each was a good event. Now a client's
    error is no event at all, and the service's own error still counts."""
    sli = load_spec(ROOT / "slo.yaml").slo("availability").sli
    assert isinstance(sli, RatioSLI)
    script = Script(fail_before_first=EngineError(EngineErrorKind.DEAD, "engine core died"))
    service = await scripted(script)
    body = {"model": "scripted", "max_tokens": 2,
            "messages": [{"role": "user", "content": "a b"}]}
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{service.url}/v1/chat/completions", json=body) as response:
            assert response.status == 503
        script.fail_before_first = None
        async with session.post(f"{service.url}/v1/chat/completions", json=body) as response:
            assert response.status == 200

        async def post(path: str, data: bytes, expected: int) -> None:
            async with session.post(service.url + path, data=data,
                                    headers={"Content-Type": "application/json"}) as answer:
                await answer.read()
                assert answer.status == expected

        unknown = json.dumps({**body, "model": "no-such-model"}).encode()
        await asyncio.gather(*[post("/v1/chat/completions", unknown, 404) for _ in range(200)],
                             *[post("/v1/completions", b"{not json", 400) for _ in range(20)])
    assert (selected(service, sli.errors), selected(service, sli.total)) == (1, 2)


# promtool lints vLLM's own names ("vllm:…" has a colon; "vllm:iteration_tokens_total" is a
# histogram ending in _total). Those names are vLLM's contract, kept so boards and rules work on
# real fleets; everything else must be clean.
VLLM_LINTS = ("metric names should not contain ':'",
              'non-counter metrics should not have "_total" suffix')


def promtool_check(text: str) -> tuple[int, list[str]]:
    result = subprocess.run(["promtool", "check", "metrics"], input=text.encode(),
                            capture_output=True, check=False)
    problems = (result.stdout + result.stderr).decode().strip().splitlines()
    return result.returncode, problems


async def test_promtool_accepts_the_exposition(service: Service) -> None:
    await drive(service)
    _, text = await scrape(service)
    _, problems = promtool_check(text)
    for problem in problems:
        name, _, message = problem.partition(" ")
        assert name.startswith("vllm:") and message in VLLM_LINTS, problem
    own = "\n".join(line for line in text.splitlines() if "vllm:" not in line) + "\n"
    code, problems = promtool_check(own)
    assert code == 0, problems


async def test_the_queue_gauges_read_the_admission_queue_when_scraped() -> None:
    registry = CollectorRegistry()
    metrics = ServiceMetrics(registry, "llama")
    queue = AdmissionQueue(max_in_flight=1, max_queue=4)
    metrics.read_queue(queue)
    await queue.acquire(1)
    waiting = asyncio.create_task(queue.acquire(5))
    await asyncio.sleep(0)
    assert registry.get_sample_value(svc.REQUESTS_IN_FLIGHT.name) == 1.0
    assert registry.get_sample_value(svc.QUEUE_DEPTH.name) == 1.0
    queue.release()  # the waiter takes the slot
    await waiting
    assert registry.get_sample_value(svc.REQUESTS_IN_FLIGHT.name) == 1.0
    assert registry.get_sample_value(svc.QUEUE_DEPTH.name) == 0.0


# ---- the spec's thresholds as edges (governor serve --slo) --------------------------------------

END_TO_END = svc.REQUEST_DURATION.name


async def test_the_latency_histograms_expose_the_edges_the_spec_adds(
    make_service: Callable[..., Awaitable[Service]],
) -> None:
    grown = tuple(sorted((*svc.REQUEST_DURATION.buckets, 0.8)))
    service = await make_service(latency_buckets=((END_TO_END, grown),))
    await drive(service, requests=2)
    _, text = await scrape(service)
    duration = next(f for f in text_families(text) if f.name == END_TO_END)
    chat = [s for s in duration.samples
            if s.name.endswith("_bucket") and s.labels["route"] == "/v1/chat/completions"]
    assert [float(s.labels["le"]) for s in chat] == [*grown, float("inf")]
    at = {s.labels["le"]: s.value for s in chat}
    # Two short sim requests: both at or under 0.8 s, counted in the new bucket as in +Inf.
    assert at["0.8"] == at["+Inf"] == 2
    ttft = next(f for f in text_families(text) if f.name == svc.TIME_TO_FIRST_TOKEN.name)
    assert {s.labels["le"] for s in ttft.samples if s.name.endswith("_bucket")} \
        == {*(str(e) for e in svc.TIME_TO_FIRST_TOKEN.buckets), "+Inf"}
