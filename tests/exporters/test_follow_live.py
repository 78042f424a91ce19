"""The fake GPU follows the simulated engine, for real: ``governor serve --engine sim`` and
``governor exporter --fake-gpus 2 --follow`` as subprocesses, chats streaming, then a thermal
throttle set through the admin API. The exporter's SM clock must fall and name its reason, and
the engine's inter-token latency must rise with it."""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from governor.common.process import Child, running
from governor.contracts.metrics import gpu as m
from governor.contracts.metrics import vllm
from governor.contracts.simdevice import FAULTS_PATH, fake_gpu_uuid
from tests.alerts.stack import LOOPBACK, free_port, logs

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOKEN = "follow-live-admin-token"
STREAMS = 4
THROTTLE = {"clock_ratio": 0.3, "clock_reasons": ["hw_thermal"]}


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def gpu0(found: dict[str, list[tuple[dict[str, str], float]]], name: str,
         **labels: str) -> float:
    return next(v for got, v in found[name]
                if got["gpu"] == "0" and labels.items() <= got.items())


def engine_itl(inference: str) -> tuple[float, float]:
    """(sum, count) of the engine's own inter-token latency histogram (simulated times)."""
    found = scrape(f"{inference}/metrics")
    return (sum(v for _, v in found[vllm.INTER_TOKEN_LATENCY.sum]),
            sum(v for _, v in found[vllm.INTER_TOKEN_LATENCY.count]))


def chats(inference: str, stop: threading.Event) -> None:
    body = json.dumps({"model": "llama-3-8b@h200", "max_tokens": 300, "ignore_eos": True,
                       "stream": True, "messages": [{"role": "user", "content": "Bonjour"}]})
    while not stop.is_set():
        request = urllib.request.Request(f"{inference}/v1/chat/completions", body.encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            for _ in response:
                if stop.is_set():
                    break


@contextlib.contextmanager
def streaming(inference: str) -> Iterator[None]:
    """:data:`STREAMS` chats streaming back to back until the block ends."""
    stop = threading.Event()
    threads = [threading.Thread(target=chats, args=(inference, stop), daemon=True)
               for _ in range(STREAMS)]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)


def until(check: Callable[[], bool], seconds: float) -> bool:
    """Whether ``check`` holds within ``seconds`` (a series not there yet does not hold)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if check():
                return True
        except (KeyError, StopIteration):
            pass
        if time.monotonic() > deadline:
            return False
        time.sleep(0.25)


def put_faults(inference: str, faults: dict[str, object]) -> None:
    request = urllib.request.Request(
        f"{inference}{FAULTS_PATH}", json.dumps(faults).encode(), method="PUT",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200


def test_a_throttle_set_on_the_engine_shows_on_the_exporter_and_slows_the_tokens(
    tmp_path: Path,
) -> None:
    ports = {"inference": free_port(), "exporter": free_port()}
    inference = f"http://{LOOPBACK}:{ports['inference']}"
    exporter = f"http://{LOOPBACK}:{ports['exporter']}"
    env = {"GOVERNOR_ADMIN_TOKEN": TOKEN, "PATH": "/usr/bin:/bin"}
    children = [
        Child("inference", [sys.executable, "-m", "governor", "serve", "--engine", "sim",
                            "--host", LOOPBACK, "--port", str(ports["inference"])],
              f"{inference}/health", tmp_path / "inference.log", env=env),
        Child("exporter", [sys.executable, "-m", "governor", "exporter", "--fake-gpus", "2",
                           "--follow", inference, "--interval", "500ms",
                           "--host", LOOPBACK, "--port", str(ports["exporter"])],
              f"{exporter}/health", tmp_path / "exporter.log"),
    ]
    with running(children, limit_seconds=60), streaming(inference):
        try:
            metrics = f"{exporter}/metrics"
            assert until(lambda: gpu0(scrape(metrics), m.SM_ACTIVE.name) > 0.2, 30)
            found = scrape(metrics)
            assert gpu0(found, m.INFO.series, uuid=fake_gpu_uuid(0)) == 1.0
            assert gpu0(found, m.CLOCK.name, clock="sm") == 1980e6
            assert gpu0(found, m.CLOCK_EVENT_ACTIVE.name, reason="hw_thermal") == 0.0
            assert next(v for labels, v in found[m.SM_ACTIVE.name] if labels["gpu"] == "1") == 0
            time.sleep(3)
            before = engine_itl(inference)
            time.sleep(5)
            healthy = engine_itl(inference)

            put_faults(inference, THROTTLE)
            assert until(lambda: gpu0(scrape(metrics), m.CLOCK.name, clock="sm") == 594e6, 10)
            found = scrape(metrics)
            assert gpu0(found, m.CLOCK_EVENT_ACTIVE.name, reason="hw_thermal") == 1.0
            start = engine_itl(inference)
            time.sleep(5)
            throttled = engine_itl(inference)
            put_faults(inference, {})
        except BaseException:
            print(logs(children))
            raise
    mean_healthy = (healthy[0] - before[0]) / (healthy[1] - before[1])
    mean_throttled = (throttled[0] - start[0]) / (throttled[1] - start[1])
    print(f"engine ITL mean: healthy {mean_healthy * 1e3:.2f} ms, clock at 0.3: "
          f"{mean_throttled * 1e3:.2f} ms")
    # The clock stretches the kernels by 1/0.3, not the host's share of a step; and on a busy
    # machine a step loop that falls behind restarts its timeline from the wall clock, which
    # lengthens the healthy steps too (12.0 against 17.9 ms, 1.5x, beside a CPU hog and two
    # other test processes on 2 cores; over 2x on a quiet machine). Unthrottled, the ratio is 1.
    assert mean_throttled > 1.3 * mean_healthy, (mean_healthy, mean_throttled)
