"""The spec's ``vllm.custom_histogram_buckets``: the edges a stock vLLM exposes, validated as vLLM
validates its flag, and used by the threshold check of every latency SLO and class target."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from governor.contracts.metrics import vllm
from governor.generation.catalog import (
    HISTOGRAM_BUCKETS,
    histogram_edges,
    load_checked_spec,
    parse_checked_spec,
)
from governor.slo.buckets import MAX_EDGES
from governor.slo.spec import SloSpec, SpecError
from tests.slo.test_spec import errors_of, write

CUSTOM_ITL = [0.01, 0.025, 0.05, 0.075, 0.1, 0.12, 0.15, 0.2, 0.3, 0.5, 1]


def stock(threshold: str = "120ms", **vllm_section: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "version": "governor/v1", "service": "llm", "period": "30d",
        "slos": [{"name": "inter-token-latency", "objective": 99, "controller": True,
                  "sli": {"latency": {"metric": vllm.INTER_TOKEN_LATENCY.name,
                                      "threshold": threshold}}}],
    }
    if vllm_section:
        spec["vllm"] = vllm_section
    return spec


def test_a_threshold_at_a_custom_edge_is_the_slis_and_the_edges_in_force_are_the_servers(
        tmp_path: Path) -> None:
    text = (f"version: governor/v1\nservice: llm\nperiod: 30d\nvllm:\n"
            f"  custom_histogram_buckets:\n    inter_token_latency: {CUSTOM_ITL}\n"
            f"    request_latency: [1, 10, 60]\n"
            f"slos:\n  - name: itl\n    objective: 99\n    controller: true\n"
            f"    sli: {{latency: {{metric: 'vllm:inter_token_latency_seconds', "
            f"threshold: 120ms}}}}\n")
    spec = load_checked_spec(write(tmp_path, text))
    assert spec.slos[0].sli.threshold_seconds == 0.12  # type: ignore[union-attr]
    edges = histogram_edges(spec)
    assert edges[vllm.INTER_TOKEN_LATENCY.name] == tuple(float(e) for e in CUSTOM_ITL)
    # A family sets every histogram in it, as vLLM's flag does; the others keep their defaults.
    for metric in vllm.BUCKET_FAMILIES["request_latency"]:
        assert edges[metric.name] == (1.0, 10.0, 60.0)
    assert edges[vllm.TIME_TO_FIRST_TOKEN.name] == vllm.TTFT_BUCKETS
    assert edges["governor_inter_token_latency_seconds"] == HISTOGRAM_BUCKETS[
        "governor_inter_token_latency_seconds"]


def test_a_threshold_between_vllms_edges_is_one_line_naming_the_nearest_and_the_way_out(
        tmp_path: Path) -> None:
    text = ("version: governor/v1\nservice: llm\nperiod: 30d\nslos:\n  - name: itl\n"
            "    objective: 99\n    sli:\n      latency:\n"
            "        metric: vllm:inter_token_latency_seconds\n        threshold: 120ms\n")
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as caught:
        load_checked_spec(path)
    assert caught.value.errors == (
        f"{path}:10: slos[0].sli.latency.threshold: 0.12s is not a bucket edge of "
        "vllm:inter_token_latency_seconds, so the SLI could not count it exactly (nearest "
        "edges: 0.075, 0.1, 0.15, 0.2); or give vllm serve --custom-histogram-buckets with it "
        "(vLLM >= 0.32) and declare those edges in vllm.custom_histogram_buckets."
        "inter_token_latency",)


def test_a_threshold_off_the_custom_edges_is_checked_against_them_not_vllms() -> None:
    errors = errors_of(stock("150ms", custom_histogram_buckets={
        "inter_token_latency": [0.05, 0.1, 0.12, 0.2]}))
    assert errors == (
        "<memory>: slos[0].sli.latency.threshold: 0.15s is not a bucket edge of "
        "vllm:inter_token_latency_seconds, so the SLI could not count it exactly (nearest "
        "edges: 0.1, 0.12, 0.2), as vllm.custom_histogram_buckets.inter_token_latency declares "
        "them; add it there and to vllm serve's --custom-histogram-buckets",)


def test_a_class_target_at_a_custom_edge_passes_and_off_it_says_where() -> None:
    spec = stock("100ms", custom_histogram_buckets={"inter_token_latency": CUSTOM_ITL})
    spec["classes"] = [{"name": "doc", "match": {"prompt_tokens": {"min": 3000}},
                        "targets": {"inter-token-latency": "300ms"}}, {"name": "chat"}]
    assert load_checked_spec_from(spec).classes.classes[0].thresholds == (
        ("inter-token-latency", 0.3),)
    assert errors_of({**spec, "classes": [{**spec["classes"][0], "targets": {
        "inter-token-latency": "250ms"}}, spec["classes"][1]]}) == (
        "<memory>: classes[0].targets.inter-token-latency: 0.25s is not a bucket edge of "
        "vllm:inter_token_latency_seconds, so the class's SLI could not count it exactly "
        "(nearest edges: 0.15, 0.2, 0.3, 0.5), as vllm.custom_histogram_buckets."
        "inter_token_latency declares them; add it there and to vllm serve's "
        "--custom-histogram-buckets",)


@pytest.mark.parametrize(
    ("buckets", "where", "message"),
    [
        ({"inter_token_latncy": [0.1]}, "custom_histogram_buckets.inter_token_latncy",
         "unknown bucket family 'inter_token_latncy' (did you mean 'inter_token_latency'?)"),
        ({"prefill": [0.1]}, "custom_histogram_buckets.prefill", "vLLM's are inter_token_latency"),
        ({"inter_token_latency": []}, "custom_histogram_buckets.inter_token_latency",
         f"must be a list of 1 to {MAX_EDGES} bucket edges"),
        ({"inter_token_latency": "0.1,0.12"}, "custom_histogram_buckets.inter_token_latency",
         "got a string"),
        ({"inter_token_latency": [0.1, True]}, "inter_token_latency[1]",
         "must be a finite number above 0: got a boolean"),
        ({"inter_token_latency": [0, 0.1]}, "inter_token_latency[0]",
         "must be a finite number above 0: got 0"),
        ({"inter_token_latency": [-0.1]}, "inter_token_latency[0]", "got -0.1"),
        ({"inter_token_latency": [0.1, float("inf")]}, "inter_token_latency[1]", "got inf"),
        ({"inter_token_latency": [0.1, "0.2"]}, "inter_token_latency[1]", "got a string"),
        ({"inter_token_latency": [0.1, 0.12, 0.12]}, "inter_token_latency[2]",
         "0.12 must be greater than the edge before it (0.12)"),
        ({"inter_token_latency": [1, 0.5]}, "inter_token_latency[1]",
         "0.5 must be greater than the edge before it (1)"),
        ({"inter_token_latency": [0.001 * (i + 1) for i in range(MAX_EDGES + 1)]},
         "custom_histogram_buckets.inter_token_latency", f"of {MAX_EDGES + 1}"),
        ({}, "vllm.custom_histogram_buckets", "must map bucket families"),
    ],
    ids=["a misspelt family gets a suggestion", "an unknown family lists vLLM's",
         "an empty list", "a string instead of a list", "a boolean edge", "a zero edge",
         "a negative edge", "an infinite edge", "a quoted number", "a repeated edge",
         "a decreasing edge", "more edges than a scrape should carry", "no family at all"],
)
def test_custom_buckets_vllm_would_refuse_are_refused_with_their_place(
        buckets: dict[str, Any], where: str, message: str) -> None:
    errors = errors_of(stock("100ms", custom_histogram_buckets=buckets))
    located = [e for e in errors if where in e]
    assert located and message in located[0], errors


def test_an_unknown_key_of_the_vllm_section_gets_a_suggestion() -> None:
    errors = errors_of(stock("100ms", custom_histogram_bucket={"inter_token_latency": [0.1]}))
    assert errors == ("<memory>: vllm.custom_histogram_bucket: unknown key "
                      "'custom_histogram_bucket' (did you mean 'custom_histogram_buckets'?)",)


def test_request_classes_are_refused_on_a_stock_vllm_fleet() -> None:
    spec = stock("100ms")
    spec["kubernetes"] = {"server": "vllm"}
    spec["classes"] = [{"name": "doc", "match": {"prompt_tokens": {"min": 3000}}},
                       {"name": "chat"}]
    assert errors_of(spec) == (
        "<memory>: classes: request classes are applied by governor serve; stock vllm serve "
        "(kubernetes.server: vllm) neither classifies requests nor labels its series by class",)


def test_the_flag_is_the_json_vllm_takes_sorted_by_family() -> None:
    spec = load_checked_spec_from(stock("120ms", custom_histogram_buckets={
        "time_to_first_token": [0.5, 1, 2], "inter_token_latency": CUSTOM_ITL}))
    assert json.loads(spec.vllm.flag_value() or "") == {
        "inter_token_latency": [float(e) for e in CUSTOM_ITL],
        "time_to_first_token": [0.5, 1.0, 2.0]}
    assert (spec.vllm.flag_value() or "").startswith('{"inter_token_latency":[0.01,')
    assert load_checked_spec_from(stock("100ms")).vllm.flag_value() is None


def load_checked_spec_from(data: dict[str, Any]) -> SloSpec:
    return parse_checked_spec(data)


@pytest.mark.vllm
def test_every_family_is_one_vllm_knows_and_vllm_accepts_the_flag_governor_writes() -> None:
    from vllm.config.observability import ObservabilityConfig
    from vllm.v1.metrics.buckets import BUCKET_FAMILY_KEYS

    assert set(vllm.BUCKET_FAMILIES) == set(BUCKET_FAMILY_KEYS)
    spec = load_checked_spec_from(stock("120ms", custom_histogram_buckets={
        "inter_token_latency": CUSTOM_ITL, "request_latency": [1, 10, 60]}))
    config = ObservabilityConfig(custom_histogram_buckets=json.loads(spec.vllm.flag_value() or ""))
    assert config.custom_histogram_buckets == {
        "inter_token_latency": [float(e) for e in CUSTOM_ITL], "request_latency": [1.0, 10.0, 60.0]}
