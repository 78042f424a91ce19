"""Two replicas under ``governor up --replicas 2``: scraped, alerted on and retuned separately.

Only replica 0 gets documents beside its chats; its inter-token tail breaches and the controller
cuts its token budget, while replica 1, carrying chats alone, keeps vLLM's default limits.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from governor.contracts.endpoints import JOB_INFERENCE
from governor.up import EXIT_INTERRUPTED, main
from tests.controller.test_closed_loop_real import chats, documents
from tests.governor.test_up import stack_ports

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BUDGET = 8192


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


def budgets(controller: int) -> dict[str, int | None]:
    targets = get_json(f"http://127.0.0.1:{controller}/status")["targets"]
    return {name: (t["limits"] or {}).get("max_num_batched_tokens")
            for name, t in targets.items()}


async def overload_the_first(replicas: list[str], controller: int,
                             names: list[str]) -> dict[str, int | None]:
    """Chats on both replicas, documents on the first; the budgets once it was cut (or not)."""
    async with aiohttp.ClientSession() as session:
        load = [asyncio.create_task(chats(session, url, 4)) for url in replicas]
        await asyncio.sleep(10)
        load.append(asyncio.create_task(documents(session, replicas[0], 3.0, 6000)))
        try:
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                seen = await asyncio.to_thread(budgets, controller)
                if (seen.get(names[0]) or DEFAULT_BUDGET) < DEFAULT_BUDGET:
                    break
                await asyncio.sleep(2)
            await asyncio.sleep(5)  # the other replica keeps its load a while longer
            return await asyncio.to_thread(budgets, controller)
        finally:
            for task in load:
                task.cancel()


@pytest.mark.integration
@pytest.mark.slow
def test_only_the_overloaded_replica_is_retuned(tmp_path: Path) -> None:
    ports = stack_ports(replicas=2)
    argv = [sys.executable, "-m", "governor", "up", "--replicas", "2", "--run-dir",
            str(tmp_path / "run"), "--slo", str(ROOT / "slo.yaml")]
    for name, port in vars(ports).items():
        argv += [f"--{name}-port", str(port)]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT)
    replicas = [f"http://127.0.0.1:{ports.inference + i}" for i in range(2)]
    names = [url.removeprefix("http://") for url in replicas]
    try:
        assert process.stdout is not None
        banner = b""
        deadline = time.monotonic() + 120
        while b"Ctrl-C stops everything" not in banner and time.monotonic() < deadline:
            line = process.stdout.readline()
            assert line, f"governor up exited early:\n{banner.decode()}"
            banner += line
        assert b"inference-0" in banner and b"inference-1" in banner
        seen = asyncio.run(overload_the_first(replicas, ports.controller, names))
        assert (seen.get(names[0]) or DEFAULT_BUDGET) < DEFAULT_BUDGET, seen
        assert seen.get(names[1]) == DEFAULT_BUDGET, seen
        prometheus = f"http://127.0.0.1:{ports.prometheus}"
        up = get_json(f"{prometheus}/api/v1/query?query=up%7Bjob%3D%22{JOB_INFERENCE}%22%7D")
        scraped = sorted(r["metric"]["instance"] for r in up["data"]["result"])
        assert scraped == sorted(names)  # both discovered through the targets file
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(60) == EXIT_INTERRUPTED


def test_replica_ports_may_not_run_into_another_component(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--replicas", "3", "--inference-port", "9398", "--exporter-port", "9400",
              "--run-dir", "/nonexistent/never-written"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "need ports 9398-9400" in err and "port 9400 of another component" in err
    with pytest.raises(SystemExit):
        main(["--replicas", "2", "--inference-port", "65535"])
    assert "run past 65535" in capsys.readouterr().err
