"""The simulated GPU over HTTP: the open report, the admin-only faults, 404 on other engines."""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from governor.contracts.metrics import service as svc
from governor.contracts.simdevice import DEVICE_PATH, FAULTS_PATH, DeviceReport, fake_gpu_uuid
from tests.inference.conftest import ADMIN_TOKEN, Service, ServiceFactory
from tests.support.scripted import ScriptedEngine

AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
THROTTLED = {"clock_ratio": 0.55, "clock_reasons": ["hw_thermal"]}


async def call(service: Service, method: str, path: str, body: Any = None,
               headers: dict[str, str] | None = None, data: bytes | None = None,
               ) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.request(
        method, f"{service.url}{path}", json=body, data=data, headers=headers,
    ) as response:
        return response.status, await response.json()


async def test_the_report_is_open_and_reads_back_as_a_device_report(service: Service) -> None:
    async with service.openai() as client:
        await client.completions.create(model="tiny", prompt="hello there", max_tokens=8)
    status, body = await call(service, "GET", DEVICE_PATH)
    assert status == 200
    report = DeviceReport.from_dict(body)
    assert report.gpu_uuid == fake_gpu_uuid(0)
    assert report.steps >= 1 and report.tokens > report.steps
    assert report.busy_seconds > 0 and report.faults.healthy
    assert 0 < report.memory_used_bytes < report.memory_total_bytes


async def test_a_put_replaces_every_fault_and_answers_the_report(service: Service) -> None:
    status, body = await call(service, "PUT", FAULTS_PATH, {**THROTTLED, "link_ratio": 0.3}, AUTH)
    assert status == 200
    assert DeviceReport.from_dict(body).faults.clock_ratio == 0.55
    status, body = await call(service, "PUT", FAULTS_PATH, {"cotenant_sm_ratio": 0.4}, AUTH)
    assert status == 200
    status, faults = await call(service, "GET", FAULTS_PATH, headers=AUTH)
    assert status == 200
    assert faults["cotenant_sm_ratio"] == 0.4
    assert (faults["clock_ratio"], faults["link_ratio"]) == (1.0, 0.0)  # replaced, not merged
    await call(service, "PUT", FAULTS_PATH, {}, AUTH)
    _, report = await call(service, "GET", DEVICE_PATH)
    assert DeviceReport.from_dict(report).faults.healthy


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="no Authorization header"),
        pytest.param({"Authorization": "Bearer wrong"}, id="a wrong token"),
        pytest.param({"Authorization": ADMIN_TOKEN}, id="the token without a scheme"),
    ],
)
async def test_faults_need_the_admin_token(service: Service, headers: dict[str, str]) -> None:
    for method in ("GET", "PUT"):
        status, body = await call(service, method, FAULTS_PATH, THROTTLED, headers)
        assert status == 401
        assert body["error"]["type"] == "authentication_error"
    assert service.engine.faults.healthy  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        pytest.param({"clock_ratio": 3}, "clock_ratio", id="a ratio above 1"),
        pytest.param({"clock_ratio": 0.5}, "clock_reasons", id="a slow clock without reasons"),
        pytest.param({"clock_ratio": 0.5, "clock_reasons": ["sunspots"]}, "clock_reasons",
                     id="a reason NVML does not have"),
        pytest.param({"clock_reasons": "hw_thermal"}, "clock_reasons", id="reasons not a list"),
        pytest.param({"cotenant_sm_ratio": 1.0}, "cotenant_sm_ratio",
                     id="a co-tenant taking the whole GPU"),
        pytest.param({"cotenant_memory_bytes": -1}, "cotenant_memory_bytes",
                     id="negative memory"),
        pytest.param({"xid": 79.0}, "xid", id="an XID that is not an integer"),
        pytest.param({"xid": True}, "xid", id="a boolean XID"),
        pytest.param({"stall_seconds": 1e309}, "stall_seconds", id="an infinite stall"),
        pytest.param({"link_ratio": None}, "link_ratio", id="a null"),
        pytest.param({"stray_processes": 9}, "stray_processes", id="more strays than allowed"),
        pytest.param({"stray_processes": 1.5}, "stray_processes", id="half a process"),
        pytest.param({"leak_bytes_per_second": 1e300}, "leak_bytes_per_second",
                     id="an absurd leak"),
        pytest.param({"leak_bytes_per_second": -1}, "leak_bytes_per_second",
                     id="a negative leak"),
        pytest.param({"throttle": 1}, "throttle", id="an unknown fault"),
        pytest.param([0.5], None, id="a list"),
        pytest.param("hw_thermal", None, id="a string"),
    ],
)
async def test_a_bad_body_is_a_400_naming_the_field(
    service: Service, body: Any, param: str | None,
) -> None:
    status, answer = await call(service, "PUT", FAULTS_PATH, body, AUTH)
    assert status == 400
    assert answer["error"]["param"] == param
    assert answer["error"]["type"] == "invalid_request_error"
    assert service.engine.faults.healthy  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b'{"xid": ' + b"9" * 5000 + b"}", id="a 5000-digit XID"),
        pytest.param(b'{"xid": ' + b"9" * 400 + b"}", id="a 400-digit XID"),
        pytest.param(b"[" * 100_000 + b"]" * 100_000, id="nesting 100000 deep"),
        pytest.param(b'{"clock_reasons": ["\\ud800"]}', id="a lone surrogate"),
        pytest.param(b"{clock_ratio: 0.5", id="not JSON"),
        pytest.param(b"", id="no body"),
    ],
)
async def test_hostile_bodies_are_400s_never_500s(service: Service, data: bytes) -> None:
    status, answer = await call(service, "PUT", FAULTS_PATH, headers=AUTH, data=data)
    assert status == 400, answer
    assert "error" in answer


async def test_an_oversized_body_is_a_413(make_service: ServiceFactory) -> None:
    service = await make_service(max_body_bytes=1024)
    status, _ = await call(service, "PUT", FAULTS_PATH, headers=AUTH,
                           data=b'{"xid": 1, "pad": "' + b"x" * 4096 + b'"}')
    assert status == 413


async def test_an_engine_without_a_simulated_gpu_answers_404(
    make_service: ServiceFactory,
) -> None:
    service = await make_service(engine=ScriptedEngine(), wait=False)
    for method, path, headers in (("GET", DEVICE_PATH, {}), ("GET", FAULTS_PATH, AUTH),
                                  ("PUT", FAULTS_PATH, AUTH)):
        status, body = await call(service, method, path, THROTTLED, headers)
        assert status == 404
        assert body["error"]["code"] == "no_simulated_gpu"
    status, _ = await call(service, "PUT", FAULTS_PATH, THROTTLED, {})
    assert status == 401  # the admin gate comes first, whatever the engine


async def test_a_change_is_logged_without_the_token(
    service: Service, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    await call(service, "PUT", FAULTS_PATH, THROTTLED, AUTH)
    line = next(r.getMessage() for r in caplog.records if "simulated GPU faults" in r.message)
    assert "'clock_ratio': 0.55" in line and "hw_thermal" in line
    assert ADMIN_TOKEN not in caplog.text


async def test_metrics_name_the_gpu_the_engine_runs_on(service: Service) -> None:
    async with aiohttp.ClientSession() as session, session.get(f"{service.url}/metrics") as r:
        text = await r.text()
    samples = [sample for family in text_string_to_metric_families(text)
               for sample in family.samples if sample.name == svc.ENGINE_GPU_INFO.series]
    assert [(s.labels, s.value) for s in samples] == [({"uuid": fake_gpu_uuid(0)}, 1.0)]
