"""An end-to-end target of 800 ms, live: ``governor serve --slo`` exposes the threshold as a bucket
edge of its request-duration histogram, real Prometheus scrapes it, and the generated SLO rule
evaluates on it (without the edge the rule's good-event selector would match nothing).

About 20 s: the service and Prometheus start, a first request is scraped before the others, and
the rules evaluate each second until the ratio is in."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from governor.common.process import Child
from governor.contracts.endpoints import CHAT_COMPLETIONS_PATH
from governor.contracts.metrics import service as svc
from governor.generation.catalog import load_checked_spec
from tests.alerts.cases import FAST, ROOT
from tests.alerts.stack import LOOPBACK, READY_SECONDS, alert_stack, free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SPEC = f"""\
version: governor/v1
service: inference
period: 30d
slos:
  - name: end-to-end
    objective: 95
    sli:
      latency:
        metric: {svc.REQUEST_DURATION.name}
        threshold: 800ms
        selector: {{route: {CHAT_COMPLETIONS_PATH}}}
  - name: time-to-first-token
    objective: 99
    role: ttft
    sli:
      latency: {{metric: {svc.TIME_TO_FIRST_TOKEN.name}, threshold: 100ms}}
"""
SHORT, LONG = 3, 1  # requests well under and well over 800 ms on the simulated H200


@contextlib.asynccontextmanager
async def serving(spec: Path, port: int, workdir: Path) -> AsyncIterator[str]:
    url = f"http://{LOOPBACK}:{port}"
    with Child("inference", [
        sys.executable, "-m", "governor", "serve", "--engine", "sim", "--host", LOOPBACK,
        "--port", str(port), "--slo", str(spec), "--log-level", "warning",
    ], url + "/health", workdir / "inference.log", cwd=ROOT) as service:
        await service.wait_healthy_async(READY_SECONDS)
        yield url


async def query(session: aiohttp.ClientSession, prometheus: str, expr: str) -> list[Any]:
    async with session.get(prometheus + "/api/v1/query", params={"query": expr}) as response:
        result: list[Any] = (await response.json())["data"]["result"]
        return result


async def poll(session: aiohttp.ClientSession, prometheus: str, expr: str,
               done: Callable[[list[Any]], bool], seconds: float = 30.0) -> list[Any]:
    """The query's result once ``done`` accepts it, asked every 0.25 s for ``seconds``."""
    for _ in range(int(seconds * 4)):
        result = await query(session, prometheus, expr)
        if done(result):
            return result
        await asyncio.sleep(0.25)
    raise TimeoutError(f"{expr}: {result}")


async def chat(session: aiohttp.ClientSession, url: str, model: str, tokens: int) -> float:
    body = {"model": model, "max_tokens": tokens, "ignore_eos": True,
            "messages": [{"role": "user", "content": "hello"}]}
    started = asyncio.get_running_loop().time()
    async with session.post(url + CHAT_COMPLETIONS_PATH, json=body) as response:
        assert response.status == 200
        await response.read()
    return asyncio.get_running_loop().time() - started


async def test_an_800ms_target_is_an_edge_the_service_exports_and_the_slo_rule_reads(
    tmp_path: Path,
) -> None:
    spec_file = tmp_path / "slo.yaml"
    spec_file.write_text(SPEC, encoding="utf-8")
    spec = load_checked_spec(spec_file)
    port = free_port()
    bucket = (f'{svc.REQUEST_DURATION.name}_bucket{{route="{CHAT_COMPLETIONS_PATH}", '
              'le="0.8"}')
    async with aiohttp.ClientSession() as session, serving(spec_file, port, tmp_path) as url, \
            alert_stack(spec, FAST, [f"{LOOPBACK}:{port}"], tmp_path) as stack:
        try:
            async with session.get(url + "/v1/models") as response:
                model = (await response.json())["data"][0]["id"]
            # The route's series appear with its first request: one scraped before the others,
            # so that the rules' 5m rates see the others arrive.
            fast = [await chat(session, url, model, 2)]
            await poll(session, stack.prometheus_url, bucket, bool)
            fast += [await chat(session, url, model, 2) for _ in range(SHORT - 1)]
            slow = [await chat(session, url, model, 300) for _ in range(LONG)]
            assert max(fast) < 0.8 < min(slow), (fast, slow)

            found = await poll(session, stack.prometheus_url, bucket,
                               lambda r: bool(r) and float(r[0]["value"][1]) >= SHORT)
            assert float(found[0]["value"][1]) == SHORT  # the long request is above the edge

            ratio = 'slo:sli_error:ratio_rate5m{slo="end-to-end"}'
            found = await poll(session, stack.prometheus_url, f"{ratio} > 0", bool)
            # Good and bad events both: the long request burns, the short ones count as good
            # through the le="0.8" bucket (a ratio of 1 would mean no good event was read).
            assert 0 < float(found[0]["value"][1]) < 1
            ttft = await query(session, stack.prometheus_url,
                               'slo:sli_error:ratio_rate5m{slo="time-to-first-token"}')
            assert ttft, "the 100 ms first-token SLO should evaluate too"
        except (AssertionError, TimeoutError):
            print(stack.logs(), (tmp_path / "inference.log").read_text(encoding="utf-8"))
            raise
