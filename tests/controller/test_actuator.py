"""The admin API client: idempotent puts, retries with backoff, temporary vs permanent errors."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from governor.common.secrets import Secret
from governor.controller.actuator import (
    ActuationError,
    BatchingClient,
    ErrorKind,
    parse_limits,
    parse_queued_tokens,
    parse_slack,
)
from governor.controller.model import Limits, Target
from tests.controller.fakes import CEILING, AdminServer

ServerFactory = Callable[[web.Application], Awaitable[TestServer]]


async def client_for(aiohttp_server: ServerFactory, admin: AdminServer, token: str | None,
                     sleeps: list[float]) -> tuple[BatchingClient, Target, aiohttp.ClientSession]:
    server = await aiohttp_server(admin.app())

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    session = aiohttp.ClientSession()
    client = BatchingClient(session, Secret(token) if token else None, sleep=sleep)
    return client, Target("t", str(server.make_url("/"))), session


async def test_read_and_apply_round_trip(aiohttp_server: ServerFactory) -> None:
    admin, sleeps = AdminServer(), list[float]()
    client, target, session = await client_for(aiohttp_server, admin, "admin-token", sleeps)
    async with session:
        assert (await client.read(target)).current == CEILING
        in_force = await client.apply(target, Limits(64, 2048))
        again = await client.apply(target, Limits(64, 2048))
    assert in_force.current == again.current == Limits(64, 2048)
    assert admin.puts == [{"max_num_seqs": 64, "max_num_batched_tokens": 2048}] * 2
    assert sleeps == []


async def test_temporary_failures_are_retried_with_growing_backoff(
    aiohttp_server: ServerFactory,
) -> None:
    admin, sleeps = AdminServer(failures=[503, 502]), list[float]()
    client, target, session = await client_for(aiohttp_server, admin, "admin-token", sleeps)
    async with session:
        in_force = await client.apply(target, Limits(64, 2048))
    assert in_force.current == Limits(64, 2048)
    assert sleeps == [0.25, 0.5]


async def test_temporary_failures_that_persist_become_a_temporary_error(
    aiohttp_server: ServerFactory,
) -> None:
    admin, sleeps = AdminServer(failures=[503, 503, 503]), list[float]()
    client, target, session = await client_for(aiohttp_server, admin, "admin-token", sleeps)
    async with session:
        with pytest.raises(ActuationError) as caught:
            await client.apply(target, Limits(64, 2048))
    assert caught.value.kind is ErrorKind.TEMPORARY
    assert "after 3 attempts" in caught.value.message
    assert admin.limits == CEILING


@pytest.mark.parametrize(
    ("failure", "kind"),
    [(501, ErrorKind.PERMANENT), (404, ErrorKind.PERMANENT), (400, ErrorKind.PERMANENT),
     (422, ErrorKind.TEMPORARY)],
    ids=["engine cannot retune live", "no admin API", "malformed request",
         "bounds moved since the read"],
)
async def test_errors_that_a_retry_cannot_fix_are_not_retried(
    aiohttp_server: ServerFactory, failure: int, kind: ErrorKind
) -> None:
    admin, sleeps = AdminServer(failures=[failure]), list[float]()
    client, target, session = await client_for(aiohttp_server, admin, "admin-token", sleeps)
    async with session:
        with pytest.raises(ActuationError) as caught:
            await client.apply(target, Limits(64, 2048))
    assert (caught.value.kind, caught.value.status, sleeps) == (kind, failure, [])
    assert "scripted failure" in caught.value.message


async def test_a_wrong_token_is_permanent_and_never_echoed(aiohttp_server: ServerFactory) -> None:
    admin, sleeps = AdminServer(), list[float]()
    client, target, session = await client_for(aiohttp_server, admin, "wrong-secret", sleeps)
    async with session:
        with pytest.raises(ActuationError) as caught:
            await client.read(target)
    assert (caught.value.kind, caught.value.status) == (ErrorKind.PERMANENT, 401)
    assert "wrong-secret" not in str(caught.value)


async def test_an_unreachable_target_is_temporary() -> None:
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async with aiohttp.ClientSession() as session:
        client = BatchingClient(session, None, sleep=sleep, timeout_seconds=1.0)
        with pytest.raises(ActuationError) as caught:
            await client.read(Target("gone", "http://127.0.0.1:9"))
    assert caught.value.kind is ErrorKind.TEMPORARY
    assert len(sleeps) == 2


async def test_a_malformed_answer_is_permanent(aiohttp_server: ServerFactory) -> None:
    async def nonsense(request: web.Request) -> web.Response:
        return web.Response(text="<html>not the admin API</html>")

    app = web.Application()
    app.router.add_get("/admin/batching", nonsense)
    server = await aiohttp_server(app)
    async with aiohttp.ClientSession() as session:
        with pytest.raises(ActuationError) as caught:
            await BatchingClient(session, None).read(Target("t", str(server.make_url("/"))))
    assert caught.value.kind is ErrorKind.PERMANENT


@pytest.mark.parametrize(
    "body",
    [{}, {"max_num_seqs": 1, "max_num_batched_tokens": 2},
     {"max_num_seqs": "1", "max_num_batched_tokens": 2, "floor": {}, "ceiling": {}},
     {"max_num_seqs": True, "max_num_batched_tokens": 2,
      "floor": {"max_num_seqs": 1, "max_num_batched_tokens": 1},
      "ceiling": {"max_num_seqs": 1, "max_num_batched_tokens": 1}}],
    ids=["empty", "no bounds", "string value", "boolean value"],
)
def test_parse_limits_rejects_answers_that_are_not_limits(body: object) -> None:
    with pytest.raises(ActuationError):
        parse_limits(body)


@pytest.mark.parametrize("value", [10**30, 10**12 + 1, 0, -5, 8192.0, True, "8192"],
                         ids=["10^30", "past the contract", "zero", "negative", "a float",
                              "a boolean", "a string"])
def test_parse_queued_tokens_refuses_a_bound_outside_the_contract(value: object) -> None:
    """Issue 32, N5: an answer's max_num_queued_tokens is held to the contract's bounds, an
    integer from 1 to 10^12 (or null), as the state file and every server hold it."""
    with pytest.raises(ActuationError) as caught:
        parse_queued_tokens({"deadline_slack": 1.0, "max_num_queued_tokens": value})
    assert caught.value.kind is ErrorKind.PERMANENT
    assert "max_num_queued_tokens must be null or an integer from 1 to 1000000000000" in \
        caught.value.message


def test_parse_queued_tokens_takes_the_contracts_whole_range() -> None:
    for value in (1, 8192, 10**12, None):
        assert parse_queued_tokens({"max_num_queued_tokens": value}) == value


@pytest.mark.parametrize("value", [1e30, 10**400, 0, -1.0, 100.5, True, 0.001],
                         ids=["10^30", "an integer of 400 digits", "zero", "negative",
                              "past 100", "a boolean", "under a hundredth"])
def test_parse_slack_refuses_a_slack_outside_the_contract(value: object) -> None:
    with pytest.raises(ActuationError, match=r"a deadline_slack within \[0.01, 100\] expected"):
        parse_slack({"deadline_slack": value})
