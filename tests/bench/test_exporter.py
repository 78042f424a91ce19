"""The scrape benchmark's arithmetic and checks (the run itself: ``governor bench exporter``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from governor.bench.exporter import check_body, percentile, period_seconds, render, scrape_round
from governor.exporters.config import ExporterConfig
from governor.exporters.exposition import Format, render_snapshot
from governor.exporters.gpu.fake import FakeNvml
from governor.exporters.server import create_app
from tests.exporters.conftest import FakeClock, make_sampler


@pytest.mark.parametrize(("q", "expected"), [(50, 50), (99, 99), (100, 100), (1, 1), (0, 1)])
def test_nearest_rank_percentile(q: float, expected: float) -> None:
    assert percentile([float(v) for v in range(100, 0, -1)], q) == expected


def test_period_accepts_zero_for_back_to_back() -> None:
    assert period_seconds("0") == 0.0
    assert period_seconds("100ms") == 0.1


def test_check_body_catches_wrong_answers(clock: FakeClock, tmp_path: Path) -> None:
    sampler = make_sampler(FakeNvml(2, clock=clock), clock, tmp_path)
    sampler.tick()
    clock.advance(1.0)
    body = render_snapshot(sampler.tick(), Format.TEXT, version="t")
    assert check_body(200, body, 2, full=True) is None
    assert check_body(500, body, 2, full=False) == "status 500"
    assert "expected 3" in str(check_body(200, body, 3, full=False))
    assert check_body(200, body.replace(b"} 1.0\n", b"} 0.0\n"), 2, full=False) is None
    assert "not 1" in str(check_body(200, body.replace(b"} 1.0\n", b"} 0.0\n"), 2, full=True))
    assert check_body(200, body[: len(body) // 2] + b"\n{{{", 2, full=True) is not None
    sampler.close()


async def test_a_round_against_the_app_answers_every_scrape(
    aiohttp_server: Callable[[web.Application], Awaitable[TestServer]], clock: FakeClock,
    tmp_path: Path,
) -> None:
    sampler = make_sampler(FakeNvml(2, clock=clock), clock, tmp_path)
    sampler.tick()
    clock.advance(1.0)
    sampler.tick()
    server = await aiohttp_server(create_app(ExporterConfig(), sampler=sampler, monotonic=clock,
                                             run_sampler=False))
    result = await scrape_round(str(server.make_url("/metrics")), 10, 5, 2, period=0.01)
    assert (len(result.latencies), result.errors) == (50, [])
    summary = result.summary()
    assert summary["p99_ms"] >= summary["p50_ms"] > 0
    report = {"gpus": 2, "period": 0.01, "cpus": 2, "load_average_before": 1.0,
              "load_average_after": 1.0,
              "rows": [{"scrapers": 10, "governor": summary, "baseline": summary}]}
    assert "ratio" in render(report)
    await asyncio.sleep(0)
