"""The warm-up: requests through the engine before ``/health`` answers 200, counted in the
engine's own series and never in the service's, with the start-up phases on ``/metrics``."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import aiohttp
import pytest

from governor.contracts.endpoints import GENERATION_PATHS
from governor.contracts.metrics import service as m
from governor.contracts.metrics import vllm
from governor.inference.cli import build_parser, config_from_args
from governor.inference.config import ServiceConfig
from governor.inference.warmup import (
    DEFAULT_PROMPT_TOKENS,
    MAX_SIZES,
    WarmupSettings,
    prompt_sizes,
)
from governor.slo.classes import Match, RequestClass, RequestClasses
from tests.inference.conftest import SIM, Service, ServiceFactory

FINISHED = f"{vllm.REQUEST_SUCCESS.name}_total"
PROMPT_TOKENS = f"{vllm.PROMPT_TOKENS.name}_total"


def service_samples(service: Service, name: str) -> float:
    """Every sample of ``name`` on the service's registry, summed over its labels, but those of
    routes other than generation (the fixture's own /health polls)."""
    return sum(sample.value for family in service.registry.collect()
               for sample in family.samples if sample.name == name
               and sample.labels.get(m.LABEL_ROUTE, GENERATION_PATHS[0]) in GENERATION_PATHS)


def engine_requests(service: Service) -> float:
    """Requests the engine finished, by its own ``vllm:*`` counter (every finish reason)."""
    return service_samples(service, FINISHED)


async def test_the_warm_up_runs_through_the_engine_and_never_counts_in_the_services_slis(
        make_service: ServiceFactory) -> None:
    service = await make_service(warmup=WarmupSettings(rounds=2, max_tokens=4))
    sizes = len(DEFAULT_PROMPT_TOKENS)
    assert engine_requests(service) == 2 * sizes  # the engine ran them, and says so
    assert service_samples(service, PROMPT_TOKENS) == 2 * sum(DEFAULT_PROMPT_TOKENS)
    for series in (f"{m.REQUESTS.name}_total", f"{m.TIME_TO_FIRST_TOKEN.name}_count",
                   f"{m.INTER_TOKEN_LATENCY.name}_count", f"{m.REQUEST_DURATION.name}_count",
                   f"{m.GENERATION_TOKENS.name}_total", f"{m.PROMPT_TOKENS.name}_total"):
        assert service_samples(service, series) == 0, series
    # A client's request is counted as ever.
    reply = await service.openai().completions.create(model=service.engine.model_name,
                                                      prompt="hello", max_tokens=3)
    assert reply.choices
    assert service.sample(f"{m.REQUESTS.name}_total", {
        "route": "/v1/completions", "code": "200", "class": "default"}) == 1
    assert service_samples(service, f"{m.TIME_TO_FIRST_TOKEN.name}_count") == 1


async def test_the_start_up_phases_and_the_warm_ups_first_tokens_are_series(
        make_service: ServiceFactory) -> None:
    service = await make_service(warmup=WarmupSettings(rounds=2, max_tokens=2))
    engine = service.sample(m.STARTUP.name, {m.LABEL_PHASE: m.PHASE_ENGINE})
    warmup = service.sample(m.STARTUP.name, {m.LABEL_PHASE: m.PHASE_WARMUP})
    assert engine is not None and engine >= 0
    assert warmup is not None and warmup > 0
    first = service.sample(m.WARMUP_FIRST_TOKEN.name, {m.LABEL_ROUND: m.ROUND_FIRST})
    last = service.sample(m.WARMUP_FIRST_TOKEN.name, {m.LABEL_ROUND: m.ROUND_LAST})
    assert first is not None and last is not None and last > 0 and 0 < first <= warmup


async def test_without_warm_up_the_engine_runs_nothing_before_the_first_client(
        make_service: ServiceFactory) -> None:
    service = await make_service(warmup=WarmupSettings(rounds=0))
    assert engine_requests(service) == 0
    assert service.sample(m.STARTUP.name, {m.LABEL_PHASE: m.PHASE_WARMUP}) == 0
    assert service.sample(m.WARMUP_FIRST_TOKEN.name, {m.LABEL_ROUND: m.ROUND_FIRST}) is None


async def test_health_answers_503_while_the_warm_up_runs(make_service: ServiceFactory) -> None:
    # The tiny preset at a tenth of real speed: each warm-up request takes a visible while.
    slow = ServiceConfig(engine=replace(SIM, time_scale=10.0),
                         warmup=WarmupSettings(rounds=1, max_tokens=16))
    service = await make_service(slow, wait=False)
    running = f"{vllm.NUM_REQUESTS_RUNNING.name}"
    async with aiohttp.ClientSession() as session:
        seen_warming = False
        for _ in range(600):
            async with session.get(f"{service.url}/health") as answer:
                status, body = answer.status, await answer.json()
            if status == 200:
                break
            if service.engine.ready and service_samples(service, running) > 0:
                # The engine is up and busy with the warm-up: still 503, and it says why.
                assert body == {"status": "warming_up"}
                seen_warming = True
            await asyncio.sleep(0.05)
        assert status == 200
    assert seen_warming
    assert engine_requests(service) == len(DEFAULT_PROMPT_TOKENS)


def test_the_prompt_sizes_are_the_classes_bounds_beside_the_defaults() -> None:
    classes = RequestClasses((
        RequestClass("doc", (Match(min_prompt_tokens=3000),
                             Match(headers=(("x-class", ("doc",)),)))),
        RequestClass("short", (Match(max_prompt_tokens=100),)),
        RequestClass("mid", (Match(min_prompt_tokens=500, max_prompt_tokens=900),)),
        RequestClass("chat")), declared=True)
    assert prompt_sizes(classes, max_model_len=8192, max_tokens=16) == (16, 100, 256, 500, 3000)
    # Cut to what fits the context beside the output tokens.
    assert prompt_sizes(classes, max_model_len=1024, max_tokens=24) == (16, 100, 256, 500, 1000)
    assert prompt_sizes(RequestClasses(), max_model_len=8, max_tokens=16) == (1,)


def test_many_classes_give_at_most_a_few_sizes_smallest_and_largest_kept() -> None:
    classes = RequestClasses((*(RequestClass(f"c{n}", (Match(min_prompt_tokens=n * 100),))
                                for n in range(1, 16)), RequestClass("rest")), declared=True)
    sizes = prompt_sizes(classes, max_model_len=100_000, max_tokens=16)
    assert len(sizes) == MAX_SIZES
    assert sizes[0] == 16 and sizes[-1] == 1500
    assert list(sizes) == sorted(set(sizes))


def parse(*argv: str, env: dict[str, str] | None = None) -> ServiceConfig:
    env = env or {}
    return config_from_args(build_parser(env).parse_args(list(argv)), env)


def test_warm_up_is_on_by_default_and_off_with_zero() -> None:
    assert parse().warmup == WarmupSettings()
    assert parse().warmup.rounds > 0
    assert parse("--warmup", "0").warmup.rounds == 0
    assert parse(env={"GOVERNOR_SERVE_WARMUP": "3"}).warmup.rounds == 3


@pytest.mark.parametrize(("value", "message"), [
    ("-1", "must not be negative"), ("two", "not an integer"), ("17", "at most 16 rounds"),
    ("99999999999999999999", "at most 16 rounds"), ("", "not an integer"),
])
def test_a_bad_warmup_value_is_one_clear_line(value: str, message: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("--warmup", value)
    assert f"argument --warmup: {message}" in capsys.readouterr().err


def test_the_settings_refuse_what_the_flag_refuses() -> None:
    with pytest.raises(ValueError, match=r"warm-up rounds must be in 0\.\.16"):
        WarmupSettings(rounds=-1)
    with pytest.raises(ValueError, match="max_tokens must be positive"):
        WarmupSettings(max_tokens=0)
