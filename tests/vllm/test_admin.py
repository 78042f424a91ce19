"""The admin route of stock vllm serve, on a stand-in engine client: every answer it can give.

The stand-in answers Governor's engine-core methods the way :mod:`governor.vllm.plugin` does
inside vLLM (merging a partial change in the engine); the real thing is
``tests/vllm/test_stock_serve.py``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from governor.common.secrets import Secret
from governor.contracts.batching import BatchingLimits, BatchingReport
from governor.contracts.engine_core import EngineCoreReport, RetuningReport
from governor.vllm import utility
from governor.vllm.admin import AdminConfigError, AdminRoute, AdminSettings
from governor.vllm.plugin import UTILITY_SET

TOKEN = "stock-admin-token-9c1e"
AUTH = f"Bearer {TOKEN}"


class Engine:
    """One engine core's retuning state, answering as the plugin does."""

    def __init__(self, rank: int, seqs: int = 8, tokens: int = 512) -> None:
        self.rank, self.seqs, self.tokens = rank, seqs, tokens
        self.ceiling = (seqs, tokens)

    def answer(self, name: str, *args: Any) -> dict[str, Any]:
        if name == UTILITY_SET:
            seqs, tokens = args
            self.seqs = self.seqs if seqs is None else seqs
            self.tokens = self.tokens if tokens is None else tokens
        limits = BatchingLimits(self.seqs, self.tokens)
        retuning = RetuningReport("active", limits, BatchingLimits(*self.ceiling),
                                  admission_cap=self.seqs, num_running=0, steps_since_change=0,
                                  largest_step_tokens_since_change=0)
        return EngineCoreReport(1000 + self.rank, self.rank, retuning).to_dict()


class Core:
    """vLLM's engine-core client: ``call_utility_all_async`` over every engine, or only
    ``call_utility_async`` (vLLM 0.25/0.26)."""

    def __init__(self, engines: list[Engine], *, error: Exception | None = None,
                 delay: float = 0.0) -> None:
        self.engines, self.error, self.delay = engines, error, delay
        self.calls: list[tuple[Any, ...]] = []

    async def call_utility_async(self, name: str, *args: Any) -> Any:
        return (await self.call_utility_all_async(name, *args))[0]

    async def call_utility_all_async(self, name: str, *args: Any) -> list[Any]:
        self.calls.append((name, *args))
        await asyncio.sleep(self.delay)
        if self.error is not None:
            raise self.error
        return [engine.answer(name, *args) for engine in self.engines]


class OldCore:
    def __init__(self, core: Core) -> None:
        self.call_utility_async = core.call_utility_async


def client(core: Any, *, errored: bool = False) -> Any:
    return SimpleNamespace(engine_core=core, errored=errored)


ROUTE = AdminRoute(AdminSettings(Secret(TOKEN)))


async def test_get_reports_the_contract_and_each_rank() -> None:
    answer = await ROUTE.answer("GET", AUTH, b"", client(Core([Engine(0), Engine(1)])))
    assert answer.status == 200
    report = BatchingReport.from_dict(answer.body)
    assert report == BatchingReport(BatchingLimits(8, 512), BatchingLimits(1, 256),
                                    BatchingLimits(8, 512))
    assert [rank["dp_rank"] for rank in answer.body["ranks"]] == [0, 1]


async def test_a_partial_put_moves_only_what_it_names_on_every_engine() -> None:
    core = Core([Engine(0), Engine(1)])
    answer = await ROUTE.answer("PUT", AUTH, b'{"max_num_batched_tokens": 300}', client(core))
    assert answer.status == 200
    assert (answer.body["max_num_seqs"], answer.body["max_num_batched_tokens"]) == (8, 300)
    assert (UTILITY_SET, None, 300) in core.calls  # the engine keeps the limit left out
    assert all(e.tokens == 300 and e.seqs == 8 for e in core.engines)


async def test_an_older_vllm_is_called_once_and_fans_out_itself() -> None:
    core = Core([Engine(0), Engine(1)])
    answer = await ROUTE.answer("PUT", AUTH, b'{"max_num_seqs": 2}', client(OldCore(core)))
    assert answer.status == 200
    assert len(answer.body["ranks"]) == 1  # one rank's answer is what such a vLLM returns
    assert all(e.seqs == 2 for e in core.engines)


@pytest.mark.parametrize(
    "authorization",
    [
        pytest.param(None, id="no header"),
        pytest.param("Bearer wrong", id="a wrong token"),
        pytest.param(TOKEN, id="no scheme"),
        pytest.param(b"Bearer \xff\xfe", id="bytes that are not UTF-8"),
        pytest.param("Bearer " + "A" * 10_000, id="an oversized token"),
    ],
)
async def test_without_the_token_it_is_401_and_the_engine_is_never_called(
        authorization: Any) -> None:
    core = Core([Engine(0)])
    for method in ("GET", "PUT"):
        answer = await ROUTE.answer(method, authorization, b'{"max_num_seqs": 2}', client(core))
        assert answer.status == 401
        assert answer.body["error"]["type"] == "authentication_error"
    assert core.calls == []


async def test_without_a_configured_token_the_route_is_closed() -> None:
    closed = AdminRoute(AdminSettings(None))
    answer = await closed.answer("GET", "Bearer ", b"", client(Core([Engine(0)])))
    assert answer.status == 401
    assert "disabled" in answer.body["error"]["message"]


@pytest.mark.parametrize(
    ("body", "status"),
    [
        pytest.param(b'{"max_num_seqs": 0}', 422, id="below the floor"),
        pytest.param(b'{"max_num_seqs": 9}', 422, id="above the ceiling"),
        pytest.param(b'{"max_num_seqs": "8"}', 400, id="a string"),
        pytest.param(b'{"max_running": 8}', 400, id="an unknown field"),
        pytest.param(b"{}", 400, id="no field"),
        pytest.param(b"{max_num_seqs: 8", 400, id="not JSON"),
        pytest.param(b"[" * 100_000 + b"]" * 100_000, 400, id="nested 100000 deep"),
        pytest.param(b'{"max_num_seqs": ' + b"9" * 5000 + b"}", 400, id="a 5000-digit integer"),
        pytest.param(b"\xff\xfe", 400, id="bytes that are not text"),
    ],
)
async def test_a_bad_put_changes_nothing_and_says_why(body: bytes, status: int) -> None:
    core = Core([Engine(0)])
    answer = await ROUTE.answer("PUT", AUTH, body, client(core))
    assert answer.status == status
    assert "error" in answer.body
    assert not [c for c in core.calls if c[0] == UTILITY_SET]
    assert core.engines[0].seqs == 8


async def test_a_method_other_than_get_or_put_is_405() -> None:
    answer = await ROUTE.answer("DELETE", AUTH, b"", client(Core([Engine(0)])))
    assert answer.status == 405


async def test_without_the_engine_plugin_it_is_501_naming_vllm_plugins() -> None:
    missing = Exception("Call to governor_batching method failed: 'EngineCoreProc' object has "
                        "no attribute 'governor_batching'")
    answer = await ROUTE.answer("GET", AUTH, b"", client(Core([Engine(0)], error=missing)))
    assert answer.status == 501
    assert "VLLM_PLUGINS=governor_batching,governor_admin" in answer.body["error"]["message"]


async def test_a_vllm_without_engine_core_is_a_clear_503() -> None:
    answer = await ROUTE.answer("GET", AUTH, b"", SimpleNamespace())
    assert answer.status == 503
    assert "engine_core" in answer.body["error"]["message"]
    assert await ROUTE.answer("GET", AUTH, b"", None) == answer


async def test_an_engine_that_does_not_answer_is_503_with_retry_after(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(utility, "UTILITY_TIMEOUT_SECONDS", 0.05)
    answer = await ROUTE.answer("PUT", AUTH, b'{"max_num_seqs": 2}',
                                client(Core([Engine(0)], delay=1.0)))
    assert answer.status == 503
    assert answer.retry_after_seconds is not None
    assert (b"retry-after", str(answer.retry_after_seconds).encode()) in answer.headers()


async def test_a_dead_engine_is_503_dead() -> None:
    answer = await ROUTE.answer("GET", AUTH, b"",
                                client(Core([Engine(0)], error=RuntimeError("gone")),
                                       errored=True))
    assert (answer.status, answer.body["error"]["code"]) == (503, "dead")


async def test_a_scheduler_that_cannot_be_retuned_is_501_with_its_reason() -> None:
    class Unsupported(Core):
        async def call_utility_all_async(self, name: str, *args: Any) -> list[Any]:
            return [EngineCoreReport(1000, 0, None, "no max_num_running_reqs").to_dict()]

    answer = await ROUTE.answer("GET", AUTH, b"", client(Unsupported([])))
    assert answer.status == 501
    assert "max_num_running_reqs" in answer.body["error"]["message"]


async def test_a_floor_above_the_engines_limits_is_refused_with_what_to_lower() -> None:
    high = AdminRoute(AdminSettings(Secret(TOKEN), BatchingLimits(1, 4096)))
    answer = await high.answer("GET", AUTH, b"", client(Core([Engine(0)])))
    assert answer.status == 501
    assert "GOVERNOR_ADMIN_MIN_NUM_BATCHED_TOKENS" in answer.body["error"]["message"]


def test_the_token_comes_from_a_file_or_the_variable(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    from_file = AdminSettings.from_env({"GOVERNOR_ADMIN_TOKEN_FILE": str(path),
                                        "GOVERNOR_ADMIN_TOKEN": "other"})
    assert from_file.token == Secret(TOKEN)
    assert AdminSettings.from_env({"GOVERNOR_ADMIN_TOKEN": TOKEN}).token == Secret(TOKEN)
    assert AdminSettings.from_env({}).token is None
    floor = AdminSettings.from_env({"GOVERNOR_ADMIN_MIN_NUM_SEQS": "2"}).floor
    assert floor == BatchingLimits(2, 256)


@pytest.mark.parametrize(
    "env",
    [
        pytest.param({"GOVERNOR_ADMIN_TOKEN_FILE": "/nonexistent/token"}, id="a missing file"),
        pytest.param({"GOVERNOR_ADMIN_TOKEN_FILE": "/dev/zero"}, id="an endless file"),
        pytest.param({"GOVERNOR_ADMIN_TOKEN": "   "}, id="a token of whitespace"),
        pytest.param({"GOVERNOR_ADMIN_MIN_NUM_SEQS": "zero"}, id="a floor that is not a number"),
        pytest.param({"GOVERNOR_ADMIN_MIN_NUM_BATCHED_TOKENS": "0"}, id="a floor of zero"),
        pytest.param({"GOVERNOR_ADMIN_MIN_NUM_SEQS": "9" * 5000}, id="a 5000-digit floor"),
    ],
)
def test_a_misconfiguration_stops_vllm_from_starting_with_a_clear_line(
        env: dict[str, str], tmp_path: Path) -> None:
    with pytest.raises(AdminConfigError, match="Governor's admin API"):
        AdminSettings.from_env(env)


def test_an_empty_token_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("\n")
    with pytest.raises(AdminConfigError, match="empty"):
        AdminSettings.from_env({"GOVERNOR_ADMIN_TOKEN_FILE": str(path)})


async def test_the_token_never_reaches_the_answer_or_the_log(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG")
    core = Core([Engine(0)])
    for authorization in (AUTH, "Bearer guessed-token"):
        answer = await ROUTE.answer("PUT", authorization, b'{"max_num_seqs": 3}', client(core))
        assert TOKEN not in json.dumps(answer.body)
    assert TOKEN not in caplog.text and "guessed-token" not in caplog.text
    assert "batching limits" in caplog.text
