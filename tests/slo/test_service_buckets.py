"""Any threshold on the service's own latency histograms: it becomes one more bucket edge, in the
edges the rules count and in those ``governor serve --slo`` exposes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from governor.contracts.metrics import service as svc
from governor.contracts.metrics import vllm
from governor.generation.catalog import (
    HISTOGRAM_BUCKETS,
    histogram_edges,
    load_checked_spec,
    parse_checked_spec,
)
from governor.slo.buckets import MAX_EDGES
from governor.slo.service_buckets import add_edges, service_edges
from governor.slo.spec import LatencySLI, SpecError
from tests.slo.test_spec import write

# The first seed's P95 end-to-end figure and a tight first-token target.
SPEC = f"""\
version: governor/v1
service: inference
period: 30d
slos:
  - name: end-to-end
    objective: 95
    sli:
      latency:
        metric: {svc.REQUEST_DURATION.name}
        threshold: 800ms
  - name: time-to-first-token
    objective: 99
    role: ttft
    sli:
      latency: {{metric: {svc.TIME_TO_FIRST_TOKEN.name}, threshold: 100ms}}
  - name: inter-token-latency
    objective: 99
    controller: true
    sli:
      latency: {{metric: {svc.INTER_TOKEN_LATENCY.name}, threshold: 33ms}}
classes:
  - name: doc
    match: {{prompt_tokens: {{min: 3000}}}}
    targets: {{end-to-end: 12.5s, inter-token-latency: 130ms}}
  - name: chat
"""


def test_an_800ms_end_to_end_and_a_100ms_first_token_target_are_accepted(
        tmp_path: Path) -> None:
    spec = load_checked_spec(write(tmp_path, SPEC))
    thresholds = {slo.name: slo.sli.threshold_seconds for slo in spec.slos
                  if isinstance(slo.sli, LatencySLI)}
    assert thresholds == {"end-to-end": 0.8, "time-to-first-token": 0.1,
                          "inter-token-latency": 0.033}


def test_each_threshold_is_one_more_edge_of_its_histogram_and_of_no_other(
        tmp_path: Path) -> None:
    edges = histogram_edges(load_checked_spec(write(tmp_path, SPEC)))
    duration = edges[svc.REQUEST_DURATION.name]
    assert set(duration) - set(svc.REQUEST_DURATION.buckets) == {0.8, 12.5}
    assert list(duration) == sorted(duration)
    # 100 ms is an edge already: nothing is added, nothing repeated.
    assert edges[svc.TIME_TO_FIRST_TOKEN.name] == svc.TIME_TO_FIRST_TOKEN.buckets
    assert set(edges[svc.INTER_TOKEN_LATENCY.name]) - set(svc.INTER_TOKEN_LATENCY.buckets) \
        == {0.033, 0.13}
    # vLLM's histograms move only through vllm.custom_histogram_buckets.
    assert edges[vllm.E2E_REQUEST_LATENCY.name] == HISTOGRAM_BUCKETS[vllm.E2E_REQUEST_LATENCY.name]


def test_the_edges_governor_serve_exposes_are_those_the_rules_count(tmp_path: Path) -> None:
    spec = load_checked_spec(write(tmp_path, SPEC))
    served = service_edges(spec)
    assert set(served) == {m.name for m in svc.LATENCY_HISTOGRAMS}
    assert all(histogram_edges(spec)[name] == edges for name, edges in served.items())


def test_a_threshold_within_float_noise_of_an_edge_is_that_edge() -> None:
    assert add_edges((0.1, 0.2), (0.1 + 1e-12, 0.30000000000000004, 0.3)) \
        == (0.1, 0.2, 0.30000000000000004)


def _many(count: int) -> dict[str, Any]:
    """``count`` SLOs on the first-token histogram, each at its own threshold between edges."""
    return {"version": "governor/v1", "service": "inference", "period": "30d",
            "slos": [{"name": f"ttft-{i}", "objective": 99, "role": "none",
                      "sli": {"latency": {"metric": svc.TIME_TO_FIRST_TOKEN.name,
                                          "threshold": f"{1001 + i}ms"}}}
                     for i in range(count)]}


def test_thresholds_that_would_pass_vllms_bound_on_edges_are_refused() -> None:
    room = MAX_EDGES - len(svc.TIME_TO_FIRST_TOKEN.buckets)
    spec = parse_checked_spec(_many(room))
    assert len(histogram_edges(spec)[svc.TIME_TO_FIRST_TOKEN.name]) == MAX_EDGES
    with pytest.raises(SpecError) as caught:
        parse_checked_spec(_many(room + 1))
    assert caught.value.errors == (
        f"<memory>: slos: {svc.TIME_TO_FIRST_TOKEN.name} would have {MAX_EDGES + 1} bucket "
        f"edges with the spec's thresholds added; at most {MAX_EDGES} (use fewer distinct "
        "thresholds on it)",)


def _end_to_end(threshold: object) -> dict[str, Any]:
    return {"version": "governor/v1", "service": "inference", "period": "30d",
            "slos": [{"name": "end-to-end", "objective": 95,
                      "sli": {"latency": {"metric": svc.REQUEST_DURATION.name,
                                          "threshold": threshold}}}]}


@pytest.mark.parametrize(("threshold", "message"), [
    ("0ms", "must be a positive duration"),
    ("-800ms", "not a duration"),
    (".inf", "not a duration"),
    (float("inf"), "must be a positive duration"),
    (float("nan"), "must be a positive duration"),
    ("1e400", "not a duration"),
    (True, "got a boolean"),
    ([0.8], "got a list"),
])
def test_a_threshold_vllm_would_refuse_as_an_edge_is_refused(threshold: object,
                                                           message: str) -> None:
    """What vLLM refuses in its flag (zero, negative, infinite, NaN, not a number) no spec adds."""
    with pytest.raises(SpecError, match=message):
        parse_checked_spec(_end_to_end(threshold))


@pytest.mark.parametrize(("threshold", "edge"), [(800, 800.0), (1e-6, 1e-6), ("1h", 3600.0)])
def test_any_positive_finite_threshold_is_an_edge_in_order(threshold: object, edge: float) -> None:
    edges = histogram_edges(parse_checked_spec(_end_to_end(threshold)))
    found = edges[svc.REQUEST_DURATION.name]
    assert edge in found and list(found) == sorted(set(found))


def test_a_threshold_between_vllms_edges_is_still_refused_with_the_way_out() -> None:
    data = {"version": "governor/v1", "service": "inference", "period": "30d",
            "slos": [{"name": "end-to-end", "objective": 95,
                      "sli": {"latency": {"metric": vllm.E2E_REQUEST_LATENCY.name,
                                          "threshold": "900ms"}}}]}
    with pytest.raises(SpecError, match="--custom-histogram-buckets"):
        parse_checked_spec(data)
