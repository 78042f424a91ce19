"""What ``python -m lab.live start`` left running, and how the later steps talk to it.

The state folder holds ``state.json`` (the engine, the model, the spec, the ceiling limits, the
number of replicas, the machine's versions), the tokens, each part's pid and log (the GPU
exporter's among them when ``start`` ran it). Every part
listens on the local host at its default port (:mod:`governor.contracts.endpoints`), shifted by
``port_offset``; replica ``i`` of the inference service at the inference port plus ``i``.
"""

from __future__ import annotations

import json
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from governor.common.prometheus_api import PrometheusHTTP
from governor.contracts.endpoints import (
    ADMIN_ADMISSION_PATH,
    ADMIN_BATCHING_PATH,
    ALERTMANAGER,
    CONTROLLER,
    EXPORTER,
    INFERENCE,
    LOCAL_HOST,
    METRICS_PATH,
    PROMETHEUS,
    Endpoint,
)
from governor.contracts.metrics import vllm

SERVED = "llama-3-8b"  # the name clients use for the model
PARTS: dict[str, Endpoint] = {"inference": INFERENCE, "exporter": EXPORTER,
                              "controller": CONTROLLER, "prometheus": PROMETHEUS,
                              "alertmanager": ALERTMANAGER}
MAX_REPLICAS = 8  # the inference ports stay below the others' (8000-8007)


def replica_name(index: int, replicas: int) -> str:
    """The part name (pid and log files) of one replica: ``inference`` when it is the only one."""
    return "inference" if replicas == 1 else f"inference-{index}"


@dataclass(frozen=True)
class State:
    """What ``start`` left running, for the later steps (kept as JSON in the state folder)."""

    folder: Path
    engine: str
    model: str  # the model directory the service and the benchmark client tokenize with
    slo: Path
    ceiling: dict[str, int]
    environment: dict[str, str]
    max_model_len: int = 8192  # the context a replayed request's prompt is capped to
    replicas: int = 1  # inference servers, one per GPU, sharing the arrivals round-robin
    port_offset: int = 0  # added to every part's default port (a rehearsal beside a stack)

    def port(self, name: str, replica: int = 0) -> int:
        return PARTS[name].port + self.port_offset + replica

    def address(self, name: str, replica: int = 0) -> str:
        return f"{LOCAL_HOST}:{self.port(name, replica)}"

    def url(self, name: str) -> str:
        """The part's URL (the first replica's, for the inference service)."""
        return f"http://{self.address(name)}"

    def inference_urls(self) -> list[str]:
        return [f"http://{self.address('inference', i)}" for i in range(self.replicas)]

    def save(self) -> None:
        data = {"engine": self.engine, "model": self.model, "slo": str(self.slo),
                "ceiling": self.ceiling, "environment": self.environment,
                "max_model_len": self.max_model_len, "replicas": self.replicas,
                "port_offset": self.port_offset}
        (self.folder / "state.json").write_text(json.dumps(data, indent=1))

    @classmethod
    def load(cls, folder: Path) -> State:
        data = json.loads((folder / "state.json").read_text())
        return cls(folder, data["engine"], data["model"], Path(data["slo"]), data["ceiling"],
                   data["environment"], int(data.get("max_model_len", 8192)),
                   int(data.get("replicas", 1)), int(data.get("port_offset", 0)))

    @property
    def admin_token(self) -> str:
        return (self.folder / "admin_token").read_text().strip()

    @property
    def gated(self) -> bool:
        """``start --admission``: a deadline gate in front of every replica's engine."""
        return self.environment.get("admission", "none") != "none"


def _request(url: str, *, method: str = "GET", body: dict[str, Any] | None = None,
             token: str | None = None, timeout: float = 30.0) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 (our URL)
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
        return json.loads(response.read() or b"null")


def set_limits(state: State, limits: dict[str, int]) -> list[dict[str, Any]]:
    """The same limits on every replica; each one's answer."""
    return [_request(url + ADMIN_BATCHING_PATH, method="PUT", body=limits,
                     token=state.admin_token) for url in state.inference_urls()]


def set_admission(state: State, slack: float) -> list[dict[str, Any]]:
    """Every replica's deadline gate at ``slack`` times its classes' first-token targets, with
    no static bound on the tokens ahead; each one's answer (the bound in force)."""
    return [_request(url + ADMIN_ADMISSION_PATH, method="PUT",
                     body={"deadline_slack": slack, "max_tokens_ahead": None},
                     token=state.admin_token) for url in state.inference_urls()]


def busy(state: State) -> float:
    """Requests running or waiting in the engines, from every replica's own /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for url in state.inference_urls():
        with urllib.request.urlopen(url + METRICS_PATH, timeout=10) as response:  # noqa: S310
            text = response.read().decode()
        for family in text_string_to_metric_families(text):
            if family.name in (vllm.NUM_REQUESTS_RUNNING.name, vllm.NUM_REQUESTS_WAITING.name):
                total += sum(s.value for s in family.samples)
    return total


def wait_idle(state: State, limit_seconds: float = 180.0) -> None:
    deadline = time.monotonic() + limit_seconds
    while busy(state) > 0:
        if time.monotonic() > deadline:
            raise RuntimeError("the engine did not drain")
        time.sleep(1.0)


def prometheus_range(state: State, expr: str, start: float, end: float,
                     step: float) -> list[dict[str, Any]]:
    return PrometheusHTTP(state.url("prometheus"), timeout_seconds=30).range(expr, start, end,
                                                                             step)
