"""The HTTP face: the webhook with hostile input, /status, /metrics; secrets never leak."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from aiohttp.web import Application
from prometheus_client import CollectorRegistry

from governor.common.secrets import Secret
from governor.contracts.metrics import controller as names
from governor.controller.app import BOOK, RECONCILER, Overrides, Secrets, create_app
from governor.controller.config import ControllerConfig
from governor.controller.model import Observation, SloTargets, Target
from governor.controller.queries import QuerySet
from tests.controller.fakes import FakeActuator, FakeClock, FakeObserver

ClientFactory = Callable[[Application], Awaitable[TestClient[Any, Any]]]
TOKEN = "webhook-secret-value"
ADMIN_TOKEN = "admin-secret-value"
A = Target("a:8000", "http://a:8000")
BREACH = Observation(itl_tail_seconds=0.21, itl_median_seconds=0.006, itl_tail_long_seconds=0.2,
                     prompt_tokens_per_second=14000.0, requests_running=64.0)


def notification(status: str = "firing", fingerprint: str = "fp1") -> dict[str, Any]:
    return {"version": "4", "status": status, "receiver": "controller", "groupKey": "g",
            "alerts": [{"status": status, "fingerprint": fingerprint,
                        "startsAt": "2026-11-29T08:27:05Z", "endsAt": "0001-01-01T00:00:00Z",
                        "labels": {"alertname": "InterTokenLatencyP99High",
                                   "instance": A.name, "severity": "control"}}]}


class Stack:
    def __init__(self, tmp: Path, *, run_loop: bool = False) -> None:
        self.observer = FakeObserver({A.name: BREACH})
        self.actuator = FakeActuator()
        self.registry = CollectorRegistry()
        config = ControllerConfig(
            slo=SloTargets(0.12, 0.99, 1.0, 0.99), queries=QuerySet.default(),
            static_targets=(A,), resync_seconds=3600.0,
            state_path=tmp / "state.json", audit_path=tmp / "audit.jsonl")
        self.app = create_app(config, Secrets(webhook=Secret(TOKEN), admin=Secret(ADMIN_TOKEN)),
                              registry=self.registry,
                              overrides=Overrides(self.observer, self.actuator, clock=FakeClock(),
                                                  run_loop=run_loop))


AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer nope"}, {"Authorization": TOKEN},
     {"Authorization": f"Basic {TOKEN}"}],
    ids=["no header", "wrong token", "no scheme", "wrong scheme"],
)
async def test_the_webhook_wants_the_bearer_token(
    aiohttp_client: ClientFactory, tmp_path: Path, headers: dict[str, str]
) -> None:
    stack = Stack(tmp_path)
    client = await aiohttp_client(stack.app)
    response = await client.post("/alerts", json=notification(), headers=headers)
    assert response.status == 401
    assert (await response.json())["error"]["type"] == "authentication_error"
    assert stack.app[RECONCILER]._book.firing() == []


@pytest.mark.parametrize(
    "raw",
    [b"", b"{", b"null", b'{"version": "4", "alerts": [{"status": "firing"}]}',
     json.dumps({**notification(), "alerts": [{"labels": ["x"]}]}).encode()],
    ids=["empty", "truncated", "null", "alert without fingerprint", "labels a list"],
)
async def test_a_malformed_notification_is_a_400_that_changes_nothing(
    aiohttp_client: ClientFactory, tmp_path: Path, raw: bytes
) -> None:
    stack = Stack(tmp_path)
    client = await aiohttp_client(stack.app)
    response = await client.post("/alerts", data=raw, headers=AUTH)
    assert response.status == 400
    error = (await response.json())["error"]
    assert error["code"] == "invalid_payload"
    assert error["errors"]
    assert stack.app[RECONCILER]._book.firing() == []


def answered(registry: CollectorRegistry, code: int) -> float:
    return registry.get_sample_value(names.WEBHOOK_REQUESTS.name + "_total",
                                     {"code": str(code)}) or 0.0


@pytest.mark.parametrize("depth", [1000, 100_000])
async def test_json_nested_too_deeply_is_a_counted_400(
    aiohttp_client: ClientFactory, tmp_path: Path, depth: int
) -> None:
    stack = Stack(tmp_path)
    client = await aiohttp_client(stack.app)
    response = await client.post("/alerts", data=b"[" * depth + b"]" * depth, headers=AUTH)
    assert response.status == 400
    assert (await response.json())["error"]["errors"] == ["body: JSON nested too deeply"]
    assert answered(stack.registry, 400) == 1
    assert (await client.post("/alerts", json=notification(), headers=AUTH)).status == 200


async def _raw_post(client: TestClient[Any, Any], authorization: bytes) -> bytes:
    """A request as bytes, for headers no HTTP client library would send."""
    body = json.dumps(notification()).encode()
    reader, writer = await asyncio.open_connection(client.host, client.port)
    writer.write(b"POST /alerts HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                 b"Content-Type: application/json\r\nAuthorization: " + authorization +
                 b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    answer = await reader.read()
    writer.close()
    return answer


@pytest.mark.parametrize("authorization", [b"Bearer \xff", b"Bearer \xc3\x28" + TOKEN.encode(),
                                           b"\xff\xfe"])
async def test_an_authorization_header_that_is_not_utf8_is_a_counted_401(
    aiohttp_client: ClientFactory, tmp_path: Path, authorization: bytes
) -> None:
    stack = Stack(tmp_path)
    client = await aiohttp_client(stack.app)
    answer = await _raw_post(client, authorization)
    assert answer.startswith(b"HTTP/1.1 401")
    assert b'"authentication_error"' in answer
    assert answered(stack.registry, 401) == 1
    assert stack.app[RECONCILER]._book.firing() == []


async def test_an_unexpected_failure_is_a_counted_json_500(
    aiohttp_client: ClientFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    stack = Stack(tmp_path)
    client = await aiohttp_client(stack.app)

    def broken(*args: object) -> None:
        raise RuntimeError("a bug in the book")

    monkeypatch.setattr(stack.app[BOOK], "record", broken)
    response = await client.post("/alerts", json=notification(), headers=AUTH)
    assert response.status == 500
    assert (await response.json())["error"]["code"] == "internal_error"
    assert answered(stack.registry, 500) == 1
    assert "a bug in the book" in caplog.text  # the traceback goes to the log, not the client
    assert (await client.get("/health")).status == 200


async def test_an_oversized_body_is_a_413(aiohttp_client: ClientFactory, tmp_path: Path) -> None:
    client = await aiohttp_client(Stack(tmp_path).app)
    response = await client.post("/alerts", data=b"x" * (2 * 1024 * 1024), headers=AUTH)
    assert response.status == 413


async def test_a_notification_is_recorded_deduplicated_and_wakes_the_loop(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    stack = Stack(tmp_path, run_loop=True)
    client = await aiohttp_client(stack.app)
    reconciler = stack.app[RECONCILER]
    for _ in range(100):  # the first pass runs at start-up
        if reconciler.last_pass_at is not None:
            break
        await asyncio.sleep(0.01)
    reads = stack.actuator.reads
    first = await client.post("/alerts", json=notification(), headers=AUTH)
    assert await first.json() == {"new": 1, "duplicate": 0, "resolved": 0}
    for _ in range(100):
        if stack.actuator.reads > reads:
            break
        await asyncio.sleep(0.01)
    assert stack.actuator.reads == reads + 1
    again = await client.post("/alerts", json=notification(), headers=AUTH)
    assert await again.json() == {"new": 0, "duplicate": 1, "resolved": 0}
    resolved = await client.post("/alerts", json=notification("resolved"), headers=AUTH)
    assert await resolved.json() == {"new": 0, "duplicate": 0, "resolved": 1}
    assert reconciler._book.firing() == []


async def test_status_explains_each_target(aiohttp_client: ClientFactory, tmp_path: Path) -> None:
    stack = Stack(tmp_path)
    client = await aiohttp_client(stack.app)
    await client.post("/alerts", json=notification(), headers=AUTH)
    await stack.app[RECONCILER].reconcile_once()
    status = await (await client.get("/status")).json()
    target = status["targets"][A.name]
    assert target["last_decision"]["action"] == "tighten"
    assert target["last_decision"]["explanation"].startswith("tighten max_num_batched_tokens")
    assert target["limits"]["ceiling"] == {"max_num_seqs": 1024, "max_num_batched_tokens": 8192}
    assert target["state"]["probe"]["kind"] == "tighten"
    assert target["observation"]["itl_tail_seconds"] == 0.21
    assert status["alerts"][0]["labels"]["alertname"] == "InterTokenLatencyP99High"
    assert status["slo"]["itl_seconds"] == 0.12
    assert target["ranks"] is None  # one engine
    # The webhook's notification started the pass: the decision says so, naming the alert.
    woken = {"by": "alert", "alerts": ["InterTokenLatencyP99High"]}
    assert target["last_decision"]["woken_by"] == woken == status["last_pass_woken_by"]
    assert target["recent_decisions"][-1]["woken_by"] == woken


async def test_status_names_the_data_parallel_rank_the_law_judged(
        aiohttp_client: ClientFactory, tmp_path: Path) -> None:
    stack = Stack(tmp_path)
    stack.observer.observations[A.name] = replace(
        BREACH, rank="1", rank_itl_tails={"0": 0.03, "1": 0.21})
    client = await aiohttp_client(stack.app)
    await stack.app[RECONCILER].reconcile_once()
    target = (await (await client.get("/status")).json())["targets"][A.name]
    assert target["ranks"] == {"judged": "1", "of": 2,
                               "itl_tail_seconds": {"0": 0.03, "1": 0.21}}
    assert target["observation"]["itl_tail_seconds.rank.0"] == 0.03
    assert "; rank 1 of 2: ITL p99 210 ms" in target["last_decision"]["explanation"]
    assert target["last_decision"]["ranks"] == target["ranks"]


async def test_metrics_are_exposed_and_count_webhook_answers(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    stack = Stack(tmp_path)
    client = await aiohttp_client(stack.app)
    await client.post("/alerts", json=notification(), headers=AUTH)
    await client.post("/alerts", data=b"{", headers=AUTH)
    await stack.app[RECONCILER].reconcile_once()
    text = await (await client.get("/metrics")).text()
    assert f'{names.WEBHOOK_REQUESTS.name}_total{{code="400"}} 1.0' in text
    assert f'{names.WEBHOOK_REQUESTS.name}_total{{code="200"}} 1.0' in text
    assert f'{names.DECISIONS.name}_total{{action="tighten",reason="itl_breach"}} 1.0' in text
    assert names.TARGET_LIMITS.name in text
    assert (await client.get("/health")).status == 200


async def test_tokens_never_reach_status_metrics_or_logs(
    aiohttp_client: ClientFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    stack = Stack(tmp_path)
    client = await aiohttp_client(stack.app)
    await client.post("/alerts", json=notification(), headers={"Authorization": "Bearer wrong"})
    await client.post("/alerts", json=notification(), headers=AUTH)
    await stack.app[RECONCILER].reconcile_once()
    everything = (await (await client.get("/status")).text()) + (
        await (await client.get("/metrics")).text()) + caplog.text + (
        tmp_path / "audit.jsonl").read_text()
    assert TOKEN not in everything
    assert ADMIN_TOKEN not in everything


async def test_unknown_routes_and_methods_are_refused(aiohttp_client: ClientFactory,
                                                      tmp_path: Path) -> None:
    client = await aiohttp_client(Stack(tmp_path).app)
    assert (await client.get("/alerts")).status == 405
    assert (await client.get("/nope")).status == 404


def test_the_scale_out_gauge_keeps_one_series_per_target() -> None:
    from prometheus_client import CollectorRegistry

    from governor.contracts.metrics import controller as names
    from governor.controller.metrics import ControllerMetrics
    from governor.controller.model import ScaleAdvice

    registry = CollectorRegistry()
    metrics = ControllerMetrics(registry)
    metrics.scale("a:8000", ScaleAdvice(1, names.SCALE_NOT_OVERLOADED))
    metrics.scale("a:8000", ScaleAdvice(3, names.SCALE_OVERLOAD))
    value = registry.get_sample_value
    assert value(names.DESIRED_REPLICAS.name, {"target": "a:8000", "reason": "overload"}) == 3
    assert value(names.DESIRED_REPLICAS.name,
                 {"target": "a:8000", "reason": names.SCALE_NOT_OVERLOADED}) is None


def many_firing(count: int) -> dict[str, Any]:
    base = notification()
    return {**base, "alerts": [{**base["alerts"][0], "fingerprint": f"fp{i}",
                                "labels": {**base["alerts"][0]["labels"], "n": str(i)}}
                               for i in range(count)]}


async def test_status_lists_a_bounded_page_of_alerts_and_always_counts_them_all(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    stack = Stack(tmp_path)
    client = await aiohttp_client(stack.app)
    for start in range(0, 3000, 1000):
        page = many_firing(3000)["alerts"][start:start + 1000]
        assert (await client.post("/alerts", json={**notification(), "alerts": page},
                                  headers=AUTH)).status == 200
    default = await client.get("/status")
    status = await default.json()
    assert len(status["alerts"]) == 100
    assert status["alert_counts"]["firing"] == status["alert_counts"]["kept"] == 3000
    assert len(await default.read()) < 100_000
    few = await (await client.get("/status?limit=5")).json()
    assert (len(few["alerts"]), few["alert_counts"]["shown"]) == (5, 5)
    most = await (await client.get("/status?limit=999999")).json()
    assert len(most["alerts"]) == 1000
    assert (await (await client.get("/status?limit=0")).json())["alerts"] == []
    for bad in ("-1", "ten", "1e3", "9" * 50):
        answer = await client.get("/status", params={"limit": bad})
        assert answer.status == 400
        assert (await answer.json())["error"]["code"] == "invalid_limit"


async def test_governor_status_reads_a_controller_whose_book_is_full(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    from governor.status import targets

    stack = Stack(tmp_path)
    client = await aiohttp_client(stack.app)
    huge = {f"l{j:02d}": "x" * 990 for j in range(60)}
    for start in range(0, 320, 16):  # 20 notifications of about 1 MB
        alerts = [{**notification()["alerts"][0], "fingerprint": f"fp{i}",
                   "labels": {**notification()["alerts"][0]["labels"], **huge}}
                  for i in range(start, start + 16)]
        await client.post("/alerts", json={**notification(), "alerts": alerts}, headers=AUTH)
    await stack.app[RECONCILER].reconcile_once()
    shown = await asyncio.to_thread(targets, f"http://{client.host}:{client.port}", 5.0)
    assert shown[A.name]["decisions"][0]["action"] == "tighten"


@pytest.mark.parametrize(
    "content",
    [b'{"version": 1, "targets": {"a:8000": {"url": "http://a:8000", "state": null}}}',
     b'{"version": 1, "targets": {"a:8000": {"url": "http://a:8000", "state": {"limits": '
     b'{"max_num_seqs": 1e400, "max_num_batched_tokens": 2048}}}}}',
     b'{"version": 1, "targets": ' + b"[" * 2000 + b"]" * 2000 + b"}"],
    ids=["a null state", "an infinite limit", "nested 2000 deep"],
)
async def test_a_corrupt_state_file_is_moved_aside_and_the_controller_starts_fresh(
    aiohttp_client: ClientFactory, tmp_path: Path, content: bytes
) -> None:
    (tmp_path / "state.json").write_bytes(content)
    stack = Stack(tmp_path)
    client = await aiohttp_client(stack.app)
    assert (await client.get("/health")).status == 200
    (aside,) = await asyncio.to_thread(lambda: list(tmp_path.glob("state.json.corrupt-*")))
    assert aside.read_bytes() == content
    await stack.app[RECONCILER].reconcile_once()
    assert json.loads((tmp_path / "state.json").read_text())["targets"][A.name]["state"]["probe"]
