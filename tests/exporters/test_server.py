"""The HTTP side via the real app factory: formats, health, hostile input, no NVML on scrapes."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from prometheus_client.parser import text_string_to_metric_families

from governor.contracts.metrics import gpu as m
from governor.exporters.config import ExporterConfig
from governor.exporters.gpu import nvml as nv
from governor.exporters.gpu.fake import FakeNvml
from governor.exporters.gpu.sampler import Sampler, SamplerConfig
from governor.exporters.server import create_app
from tests.exporters.conftest import FakeClock, make_sampler

ClientFactory = Callable[[web.Application], Awaitable[TestClient]]  # type: ignore[type-arg]
CONFIG = ExporterConfig(interval_seconds=1.0, staleness_seconds=5.0)


async def app_client(aiohttp_client: ClientFactory, sampler: Sampler, clock: FakeClock,
                     config: ExporterConfig = CONFIG) -> TestClient:  # type: ignore[type-arg]
    app = create_app(config, sampler=sampler, monotonic=clock, run_sampler=False)
    return await aiohttp_client(app)


def gpu_up(body: str) -> list[float]:
    return [s.value for f in text_string_to_metric_families(body) if f.name == m.UP.name
            for s in f.samples]


async def test_metrics_in_the_text_format(aiohttp_client: ClientFactory, clock: FakeClock,
                                          tmp_path: Path) -> None:
    sampler = make_sampler(FakeNvml(2, clock=clock), clock, tmp_path)
    sampler.tick()
    client = await app_client(aiohttp_client, sampler, clock)
    response = await client.get("/metrics")
    assert response.status == 200
    assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert gpu_up(await response.text()) == [1.0, 1.0]


async def test_metrics_in_openmetrics_when_asked(aiohttp_client: ClientFactory, clock: FakeClock,
                                                 tmp_path: Path) -> None:
    sampler = make_sampler(FakeNvml(1, clock=clock), clock, tmp_path)
    sampler.tick()
    client = await app_client(aiohttp_client, sampler, clock)
    response = await client.get("/metrics", headers={
        "Accept": "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;q=0.3"})
    assert response.headers["Content-Type"].startswith("application/openmetrics-text; version=1")
    assert (await response.text()).endswith("# EOF\n")


async def test_scrapes_never_call_nvml(aiohttp_client: ClientFactory, clock: FakeClock,
                                       tmp_path: Path) -> None:
    nvml = FakeNvml(4, clock=clock)
    sampler = make_sampler(nvml, clock, tmp_path)
    sampler.tick()
    client = await app_client(aiohttp_client, sampler, clock)
    before = sum(nvml.calls.values())
    for accept in ("text/plain", "application/openmetrics-text") * 25:
        assert (await client.get("/metrics", headers={"Accept": accept})).status == 200
        assert (await client.get("/health")).status == 200
    assert sum(nvml.calls.values()) == before


async def test_a_hundred_concurrent_scrapes_all_answer_in_full(
    aiohttp_client: ClientFactory, clock: FakeClock, tmp_path: Path
) -> None:
    sampler = make_sampler(FakeNvml(8, clock=clock), clock, tmp_path)
    sampler.tick()
    client = await app_client(aiohttp_client, sampler, clock)

    async def scrape() -> list[float]:
        response = await client.get("/metrics")
        assert response.status == 200
        return gpu_up(await response.text())

    assert await asyncio.gather(*(scrape() for _ in range(100))) == [[1.0] * 8] * 100


async def test_stale_readings_are_withheld_and_health_says_503(
    aiohttp_client: ClientFactory, clock: FakeClock, tmp_path: Path
) -> None:
    sampler = make_sampler(FakeNvml(1, clock=clock), clock, tmp_path)
    sampler.tick()
    client = await app_client(aiohttp_client, sampler, clock)
    clock.advance(6.0)  # past the 5 s staleness limit, as if the sampler hung in a driver call
    body = await (await client.get("/metrics")).text()
    assert gpu_up(body) == [0.0]
    assert m.TEMPERATURE.name not in body
    assert f"{m.EXPORTER_SNAPSHOT_AGE.name} 6.0" in body
    health = await client.get("/health", headers={"Accept": "application/json"})
    assert health.status == 503
    assert (await health.json())["status"] == "stale"


async def test_health_ok_and_degraded(aiohttp_client: ClientFactory, clock: FakeClock,
                                      tmp_path: Path) -> None:
    nvml = FakeNvml(2, clock=clock)
    sampler = make_sampler(nvml, clock, tmp_path)
    sampler.tick()
    client = await app_client(aiohttp_client, sampler, clock)
    response = await client.get("/health")
    assert (response.status, await response.text()) == (200, "ok\n")
    nvml.lose(1)
    sampler.tick()
    response = await client.get("/health", headers={"Accept": "application/json"})
    report = json.loads(await response.text())
    assert response.status == 200  # a restart would not bring the GPU back
    assert report["status"] == "degraded" and "1" in report["reason"]
    assert [g["up"] for g in report["gpus"]] == [True, False]


async def test_no_driver_is_degraded_and_plain(aiohttp_client: ClientFactory, clock: FakeClock,
                                               tmp_path: Path) -> None:
    nvml = FakeNvml(1, clock=clock, init_error=nv.ERROR_LIBRARY_NOT_FOUND)
    sampler = make_sampler(nvml, clock, tmp_path)
    sampler.tick()
    client = await app_client(aiohttp_client, sampler, clock)
    response = await client.get("/health")
    assert response.status == 200
    assert "degraded: no NVIDIA driver on this machine" in await response.text()
    body = await (await client.get("/metrics")).text()
    assert gpu_up(body) == [] and f"{m.EXPORTER_NVML_UP.name} 0.0" in body


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/nope", 404),
        ("POST", "/metrics", 405),
        ("DELETE", "/health", 405),
        ("GET", "/metrics?name[]=gpu_up&%ZZ=%%", 200),
        ("GET", "/metrics/../metrics", 200),
        ("HEAD", "/metrics", 200),
        ("GET", "/", 200),
    ],
)
async def test_odd_requests(aiohttp_client: ClientFactory, clock: FakeClock, tmp_path: Path,
                            method: str, path: str, status: int) -> None:
    sampler = make_sampler(FakeNvml(1, clock=clock), clock, tmp_path)
    sampler.tick()
    client = await app_client(aiohttp_client, sampler, clock)
    response = await client.request(method, path)
    assert response.status == status
    assert "Traceback" not in await response.text()
    assert (await client.get("/metrics")).status == 200


@pytest.mark.parametrize(
    "request_bytes",
    [
        pytest.param(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: " + b"a" * 100_000
                     + b"\r\n\r\n", id="a 100 kB header"),
        pytest.param(b"GET /" + b"m" * 100_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
                     id="a 100 kB path"),
        pytest.param(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64,
                     id="a TLS hello on the plain port"),
        pytest.param(b"GET /metrics HTTP/9.9\r\n\r\n", id="an unknown HTTP version"),
        pytest.param(b"\r\n\r\n\r\n", id="blank lines"),
    ],
)
async def test_hostile_bytes_get_a_4xx_and_the_server_serves_on(
    aiohttp_client: ClientFactory, clock: FakeClock, tmp_path: Path, request_bytes: bytes
) -> None:
    sampler = make_sampler(FakeNvml(1, clock=clock), clock, tmp_path)
    sampler.tick()
    client = await app_client(aiohttp_client, sampler, clock)
    reader, writer = await asyncio.open_connection(client.host, client.port)
    writer.write(request_bytes)
    writer.write_eof()  # a server still waiting for the rest must give up, not hang
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(4096), 10)
    writer.close()
    assert answer == b"" or answer.split(b" ")[1].startswith(b"4"), answer[:200]
    assert (await client.get("/metrics")).status == 200


async def test_the_sampler_thread_starts_and_stops_with_the_app(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    nvml = FakeNvml(2)
    sampler = Sampler(nvml, SamplerConfig(interval_seconds=0.1, xid=False, source="fake"))
    app = create_app(ExporterConfig(interval_seconds=0.1), sampler=sampler)
    client = await aiohttp_client(app)
    for _ in range(100):
        if sampler.latest().sequence >= 2:
            break
        await asyncio.sleep(0.05)
    assert gpu_up(await (await client.get("/metrics")).text()) == [1.0, 1.0]
    await client.close()
    assert nvml.calls["nvmlShutdown"] == 1


async def test_gzip_when_asked_as_prometheus_asks(aiohttp_client: ClientFactory, clock: FakeClock,
                                                  tmp_path: Path) -> None:
    sampler = make_sampler(FakeNvml(8, clock=clock), clock, tmp_path)
    sampler.tick()
    client = await app_client(aiohttp_client, sampler, clock)
    plain = await client.get("/metrics", headers={"Accept-Encoding": "identity"})
    packed = await client.get("/metrics", headers={"Accept-Encoding": "gzip"},
                              auto_decompress=False)
    assert "Content-Encoding" not in plain.headers
    assert packed.headers["Content-Encoding"] == "gzip"
    assert "Accept-Encoding" in packed.headers["Vary"]
    raw = await packed.read()
    assert len(raw) * 4 < len(await plain.read())
    assert gpu_up(gzip.decompress(raw).decode()) == [1.0] * 8


async def test_a_driver_without_gpus_is_degraded(aiohttp_client: ClientFactory, clock: FakeClock,
                                                 tmp_path: Path) -> None:
    sampler = make_sampler(FakeNvml(0, clock=clock), clock, tmp_path)
    sampler.tick()
    client = await app_client(aiohttp_client, sampler, clock)
    response = await client.get("/health")
    assert response.status == 200
    assert await response.text() == "degraded: NVML is up but reports no GPU\n"


async def test_two_servers_one_per_gpu_each_show_their_own_memory(
        aiohttp_client: ClientFactory, clock: FakeClock, tmp_path: Path) -> None:
    """Two replicas, one per GPU (``CUDA_VISIBLE_DEVICES``), each in its container: a scrape
    holds both GPUs, and each server's process memory under the GPU it runs on and its
    container, so a board can tell the replicas apart."""
    containers = {4242: "ab" * 32, 4343: "cd" * 32}
    for pid, cid in containers.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(
            f"0::/kubepods/pod1/cri-containerd-{cid}.scope\n")
    gib = 1024**3
    nvml = FakeNvml(2, clock=clock, processes={0: [(4242, 120 * gib)], 1: [(4343, 118 * gib)]})
    sampler = make_sampler(nvml, clock, tmp_path)
    sampler.tick()
    client = await app_client(aiohttp_client, sampler, clock)
    body = await (await client.get("/metrics")).text()
    assert gpu_up(body) == [1.0, 1.0]
    families = {f.name: f for f in text_string_to_metric_families(body)}
    by_process = {(s.labels[m.LABEL_GPU], s.labels[m.LABEL_PID], s.labels[m.LABEL_CONTAINER]):
                  s.value for s in families[m.PROCESS_MEMORY_USED.name].samples}
    assert by_process == {("0", "4242", containers[4242]): 120.0 * gib,
                          ("1", "4343", containers[4343]): 118.0 * gib}
    uuids = {s.labels[m.LABEL_GPU]: s.labels[m.LABEL_UUID]
             for s in families[m.PROCESS_MEMORY_USED.name].samples}
    assert len(set(uuids.values())) == 2  # each process names its own device
