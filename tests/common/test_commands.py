"""Each command line Governor builds is one its component's own parser accepts, value for value."""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import fields
from typing import Any

import pytest

from governor.common.commands import Controller, Exporter, Probe, Serve, VllmServe, vllm_flags
from governor.controller.cli import build_parser as controller_parser
from governor.exporters.cli import build_parser as exporter_parser
from governor.inference.cli import build_parser as serve_parser
from governor.probe.cli import build_parser as probe_parser

EVERY_SERVE = Serve(
    engine="vllm", model="/models/m", served_model_name="m", preset="tiny", host="127.0.0.1",
    port=8001, slo="slo.yaml", admin_token_file="/run/admin", log_format="json",
    log_level="warning", seed=3, time_scale=0.5, gpu_uuid="GPU-1", max_num_seqs=64,
    max_num_batched_tokens=4096, min_num_seqs=2, min_num_batched_tokens=512, max_model_len=8192,
    max_tokens_limit=4096, max_body_bytes=1 << 20, max_in_flight=128, max_queue=64,
    tokenizer_threads=2,
    otlp_endpoint="http://127.0.0.1:4318", engine_arg=("enforce_eager=true", "dtype=float32"),
    deadlines=True, deadline_calibration=0.99, warmup=3)
EVERY_CONTROLLER = Controller(
    slo="slo.yaml", host="127.0.0.1", port=9501, prometheus="http://127.0.0.1:9090",
    targets="http://127.0.0.1:8000", job="inference", discover="http://{address}",
    scrape_interval="5s", resync="10s", admin_token_file="/run/admin",
    webhook_token_file="/run/hook", state_file="/tmp/state.json", audit_log="/tmp/audit.jsonl",
    log_format="json", log_level="info")
EVERY_EXPORTER = Exporter(fake_gpus=2, fake_mig="1=3g.71gb+1g.18gb:2", follow="http://127.0.0.1:8000,http://127.0.0.1:8001",
                          names="dcgm", host="127.0.0.1", port=9401, interval="1s",
                          log_format="json", log_level="info")
EVERY_PROBE = Probe(slo="slo.yaml", target=("inference=http://127.0.0.1:8000,http://127.0.0.1:8001",
                                            "other=https://llm.example:443"),
                    host="127.0.0.1", port=9601, log_format="json", log_level="info")


def _normal(value: Any) -> Any:
    """What a parsed option is, as text: paths, durations and patterns as the builder wrote them."""
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], tuple):
        return f"{value[0]}={','.join(value[1])}"  # a probe's --target NAME=URL[,URL]
    if isinstance(value, list | tuple):
        items = tuple(_normal(v) for v in value)
        return ",".join(items) if value and hasattr(value[0], "url") else items
    if isinstance(value, re.Pattern):
        return value.pattern
    if hasattr(value, "url"):  # a controller target
        return value.url
    return str(value)


# Durations come back as seconds.
SECONDS = {"1s": "1.0", "5s": "5.0", "10s": "10.0"}


@pytest.mark.parametrize(
    ("command", "parser"),
    [
        pytest.param(EVERY_SERVE, serve_parser(env={}), id="governor serve"),
        pytest.param(EVERY_CONTROLLER, controller_parser(env={}), id="governor controller"),
        pytest.param(EVERY_EXPORTER, exporter_parser(), id="governor exporter"),
        pytest.param(EVERY_PROBE, probe_parser(), id="governor probe"),
    ],
)
def test_every_field_is_an_option_the_component_parses_to_the_same_value(
        command: Serve | Controller | Exporter | Probe, parser: argparse.ArgumentParser) -> None:
    parsed = vars(parser.parse_args(command.argv()[1:]))
    for item in fields(command):
        value = getattr(command, item.name)
        assert item.name in parsed, f"--{item.name.replace('_', '-')} is not an option"
        wanted = _normal(value)
        got = _normal(parsed[item.name])
        assert got in (wanted, SECONDS.get(str(value))), item.name


def test_fields_left_out_are_left_out_and_order_is_the_declared_one() -> None:
    argv = Serve(admin_token_file="/t", engine="sim").argv()
    assert argv == ["serve", "--engine", "sim", "--admin-token-file", "/t"]
    assert Exporter().argv() == ["exporter"]


def test_python_runs_the_command_with_this_interpreter() -> None:
    assert Controller(port=1).python() == [sys.executable, "-m", "governor", "controller",
                                           "--port", "1"]


def test_a_zero_is_a_value_and_false_is_no_flag() -> None:
    assert Serve(time_scale=0).argv() == ["serve", "--time-scale", "0"]
    assert Exporter(fake_gpus=0).argv() == ["exporter", "--fake-gpus", "0"]

def test_engine_arguments_become_vllm_flags() -> None:
    assert vllm_flags(
        ["dtype=float32", "enforce_eager=true", "enable_prefix_caching=false",
         'compilation_config={"level": 0}']
    ) == ("--dtype", "float32", "--enforce-eager", "--no-enable-prefix-caching",
          "--compilation-config", '{"level": 0}')


def test_stock_vllm_serve_takes_the_model_first_and_passes_its_own_flags_last() -> None:
    command = VllmServe(model="/m", port=8002,
                        otlp_traces_endpoint="http://127.0.0.1:4318/v1/traces",
                        disable_uvicorn_access_log=True, extra=("--dtype", "float32"))
    assert command.argv() == ["vllm", "serve", "/m", "--port", "8002", "--otlp-traces-endpoint",
                              "http://127.0.0.1:4318/v1/traces", "--disable-uvicorn-access-log",
                              "--dtype", "float32"]
