"""Settings → AsyncEngineArgs keyword arguments: conversion, and every mistake reported at once."""

from __future__ import annotations

import pytest

from governor.inference.engines.settings import EngineSettings
from governor.inference.engines.vllm.args import (
    EngineArgsError,
    convert,
    engine_kwargs,
    otlp_traces_url,
    parse_extra_args,
)

# A stand-in for dataclasses.fields(AsyncEngineArgs): name → default.
FIELDS: dict[str, object] = {
    "model": "facebook/opt-125m",
    "served_model_name": None,
    "max_num_seqs": None,
    "max_num_batched_tokens": None,
    "max_model_len": None,
    "seed": 0,
    "otlp_traces_endpoint": None,
    "disable_log_stats": False,
    "dtype": "auto",
    "enforce_eager": False,
    "gpu_memory_utilization": 0.9,
    "max_logprobs": 20,
    "compilation_config": None,
    "kv_cache_memory_bytes": None,
    "scheduling_policy": "fcfs",
}


@pytest.mark.parametrize(
    ("text", "default", "expected"),
    [
        ("true", False, True),
        ("0", True, False),
        ("12", 0, 12),
        ("0.85", 0.9, 0.85),
        ("float32", "auto", "float32"),
        ('{"level": 0}', None, {"level": 0}),
        ("4096", None, 4096),
        ("on", None, True),
        ("mp", None, "mp"),
    ],
    ids=["bool", "bool zero", "int", "float", "str", "json object", "json number",
         "bool word", "plain word"],
)
def test_values_take_the_type_of_the_fields_default(
    text: str, default: object, expected: object
) -> None:
    assert convert(text, default) == expected


def test_extra_args_become_keyword_arguments() -> None:
    parsed = parse_extra_args(
        ["dtype=float32", "enforce-eager=1", "gpu_memory_utilization=0.85",
         'compilation_config={"level": 0}'],
        FIELDS,
    )
    assert parsed == {"dtype": "float32", "enforce_eager": True,
                      "gpu_memory_utilization": 0.85, "compilation_config": {"level": 0}}


def test_every_mistake_is_reported_together() -> None:
    with pytest.raises(EngineArgsError) as raised:
        parse_extra_args(
            ["dtyp=float32", "enforce_eager=maybe", "max_logprobs=many", "novalue",
             "=3", "max_num_seqs=4", "disable_log_stats=true"],
            FIELDS,
        )
    message = str(raised.value)
    assert "'dtyp': not an AsyncEngineArgs field (did you mean dtype?)" in message
    assert "'enforce_eager'" in message and "'max_logprobs'" in message
    assert "'novalue': expected key=value" in message and "'=3'" in message
    assert "'max_num_seqs': set it with --max-num-seqs" in message
    assert "'disable_log_stats'" in message


def test_settings_map_to_engine_arguments_with_stat_logging_on() -> None:
    settings = EngineSettings(
        kind="vllm", model="/models/tiny", served_model_name="tiny", max_num_seqs=8,
        max_num_batched_tokens=512, max_model_len=1024, seed=3, extra_args=("dtype=float32",),
        otlp_traces_endpoint="http://127.0.0.1:4318",
    )
    assert engine_kwargs(settings, FIELDS) == {
        "model": "/models/tiny", "served_model_name": "tiny", "max_num_seqs": 8,
        "max_num_batched_tokens": 512, "max_model_len": 1024, "seed": 3,
        "otlp_traces_endpoint": "http://127.0.0.1:4318", "disable_log_stats": False,
        "dtype": "float32",
    }


def test_request_classes_switch_vllm_to_the_priority_policy() -> None:
    plain = engine_kwargs(EngineSettings(kind="vllm", model="m"), FIELDS)
    assert "scheduling_policy" not in plain  # vLLM's own default, as before classes
    classes = EngineSettings(kind="vllm", model="m", scheduling_policy="priority")
    assert engine_kwargs(classes, FIELDS)["scheduling_policy"] == "priority"
    same = EngineSettings(kind="vllm", model="m", scheduling_policy="priority",
                          extra_args=("scheduling_policy=priority",))
    assert engine_kwargs(same, FIELDS)["scheduling_policy"] == "priority"
    clash = EngineSettings(kind="vllm", model="m", scheduling_policy="priority",
                           extra_args=("scheduling_policy=fcfs",))
    with pytest.raises(EngineArgsError, match="request classes need 'priority', not 'fcfs'"):
        engine_kwargs(clash, FIELDS)


def test_unset_limits_are_left_to_vllms_defaults() -> None:
    kwargs = engine_kwargs(EngineSettings(kind="vllm", model="m"), FIELDS)
    assert "max_num_seqs" not in kwargs and "max_num_batched_tokens" not in kwargs


def test_a_missing_model_or_a_field_this_vllm_lacks_is_refused() -> None:
    with pytest.raises(EngineArgsError, match="--model"):
        engine_kwargs(EngineSettings(kind="vllm"), FIELDS)
    old_vllm = {k: v for k, v in FIELDS.items() if k != "otlp_traces_endpoint"}
    with pytest.raises(EngineArgsError, match="lacks otlp_traces_endpoint"):
        engine_kwargs(
            EngineSettings(kind="vllm", model="m", otlp_traces_endpoint="http://c:4318"), old_vllm
        )


@pytest.mark.parametrize(
    ("endpoint", "protocol", "expected"),
    [
        ("http://jaeger:4318", "http/protobuf", "http://jaeger:4318/v1/traces"),
        ("http://jaeger:4318/", "http/protobuf", "http://jaeger:4318/v1/traces"),
        ("http://jaeger:4318/v1/traces", "http/protobuf", "http://jaeger:4318/v1/traces"),
        ("http://gw/otel/v1/traces", "http/protobuf", "http://gw/otel/v1/traces"),
        ("jaeger:4317", "grpc", "jaeger:4317"),
    ],
)
def test_the_otlp_endpoint_gets_the_traces_path_vllms_exporter_needs(
    endpoint: str, protocol: str, expected: str
) -> None:
    assert otlp_traces_url(endpoint, protocol) == expected
