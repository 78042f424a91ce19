"""The SLO spec model: the default slo.yaml, validation, hostile input, and OpenSLO documents."""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from governor.contracts.endpoints import GENERATION_PATHS
from governor.contracts.metrics import probe as probe_metrics
from governor.contracts.metrics import service as svc
from governor.contracts.metrics import vllm
from governor.generation.catalog import HISTOGRAM_BUCKETS, load_checked_spec, parse_checked_spec
from governor.slo.spec import (
    SLO,
    LatencySLI,
    RatioSLI,
    SloSpec,
    SpecError,
    load_spec,
    parse_objective,
    parse_spec,
)

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SPEC = ROOT / "slo.yaml"
ERRORS = svc.REQUESTS.total + '{code=~"5.."}'


def minimal() -> dict[str, Any]:
    return {
        "version": "governor/v1",
        "service": "inference",
        "period": "30d",
        "slos": [
            {"name": "inter-token-latency", "objective": 99, "controller": True,
             "sli": {"latency": {"metric": svc.INTER_TOKEN_LATENCY.name, "threshold": "120ms"}}},
            {"name": "availability", "objective": "99.9%",
             "sli": {"ratio": {"errors": ERRORS, "total": svc.REQUESTS.total}}},
        ],
    }


def ttft_slo(name: str = "time-to-first-token") -> dict[str, Any]:
    return {"name": name, "objective": 99,
            "sli": {"latency": {"metric": svc.TIME_TO_FIRST_TOKEN.name, "threshold": "1s"}}}


def errors_of(data: object, **kwargs: Any) -> tuple[str, ...]:
    with pytest.raises(SpecError) as caught:
        parse_checked_spec(data, **kwargs)
    return caught.value.errors


def write(tmp_path: Path, text: str | bytes, name: str = "slo.yaml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


# ---- the default spec ---------------------------------------------------------------------------


def test_the_default_spec_holds_the_three_slos_of_the_design_and_the_probe_s() -> None:
    spec = load_checked_spec(DEFAULT_SPEC)
    assert (spec.version, spec.service, spec.period_seconds) == ("governor/v1", "inference",
                                                                 30 * 86400)
    itl, ttft, availability, probe = spec.slos
    # The synthetic probe's own SLI: its requests answered in full, on its own series.
    assert probe.sli == RatioSLI(f'{probe_metrics.REQUESTS.total}{{result!="success"}}',
                                 probe_metrics.REQUESTS.total)
    assert (probe.objective, probe.controller, probe.role) == (0.99, False, None)
    assert itl == spec.slo("inter-token-latency")
    assert itl.sli == LatencySLI(svc.INTER_TOKEN_LATENCY.name, 0.12, {})
    assert (itl.objective, itl.controller) == (0.99, True)
    assert ttft.sli == LatencySLI(svc.TIME_TO_FIRST_TOKEN.name, 1.0, {})
    assert (ttft.objective, ttft.controller) == (0.99, False)
    # The generation routes only: probes, scrapes, admin calls and 404s would dilute it; and
    # a client's error (4xx) on them is no event, neither good nor bad.
    routes = f'route=~"{"|".join(GENERATION_PATHS)}"'
    assert availability.sli == RatioSLI(f'{svc.REQUESTS.total}{{{routes}, code=~"5.."}}',
                                        f'{svc.REQUESTS.total}{{{routes}, code!~"4.."}}')
    assert (availability.objective, availability.controller) == (0.999, False)


def test_the_default_thresholds_are_bucket_edges_of_the_service_histograms() -> None:
    spec = load_checked_spec(DEFAULT_SPEC)
    for slo in spec.slos:
        if isinstance(slo.sli, LatencySLI):
            assert slo.sli.threshold_seconds in HISTOGRAM_BUCKETS[slo.sli.metric]


def test_an_unknown_slo_name_says_which_names_exist() -> None:
    spec = load_spec(DEFAULT_SPEC)
    with pytest.raises(KeyError, match="inter-token-latency, time-to-first-token, availability"):
        spec.slo("latency")


def test_the_model_is_frozen_and_hashable() -> None:
    spec = parse_spec(minimal())
    assert hash(spec) == hash(parse_spec(minimal()))
    with pytest.raises(AttributeError):
        spec.slos[0].objective = 0.5  # type: ignore[misc]
    assert spec.slos[0].camel_name == "InterTokenLatency"
    assert str(spec.slo("availability").error_budget) == "0.001"


# ---- values -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "ratio"),
    [(99, 0.99), (99.9, 0.999), ("99.9%", 0.999), (" 99.95 % ", 0.9995), (0.99, 0.99),
     ("0.999", 0.999), (1, 0.01), ("50%", 0.5), (99.999, 0.99999)],
    ids=lambda v: repr(v),
)
def test_an_objective_may_be_a_percentage_or_a_ratio(written: object, ratio: float) -> None:
    assert parse_objective(written) == ratio


@pytest.mark.parametrize(
    "written", [100, 0, -1, 150, "100%", "0%", "abc", True, None, [99], float("nan"),
                float("inf"), "nan", "1e999", "0.5%%"],
    ids=lambda v: repr(v),
)
def test_an_objective_outside_0_to_100_percent_is_refused(written: object) -> None:
    with pytest.raises(ValueError, match=r"must|not a number"):
        parse_objective(written)


@pytest.mark.parametrize(
    ("written", "seconds"),
    [("30d", 2592000), ("4w", 2419200), ("720h", 2592000), ("7d12h", 648000), (604800, 604800)],
)
def test_the_period_takes_durations_or_seconds(written: object, seconds: int) -> None:
    data = minimal()
    data["period"] = written
    assert parse_spec(data).period_seconds == seconds


@pytest.mark.parametrize(
    ("written", "message"),
    [("1d", "between 7d and 400d"), ("2y", "between"), ("1M", "not a duration"),
     ("30", "not a duration"), (True, "must be the SLO period"), ("7d0.5s", "whole seconds"),
     ("-30d", "not a duration"), ({"d": 30}, "must be the SLO period")],
    ids=lambda v: repr(v),
)
def test_a_bad_period_says_why(written: object, message: str) -> None:
    data = minimal()
    data["period"] = written
    (error,) = errors_of(data)
    assert error.startswith("<memory>: period: ")
    assert message in error


@pytest.mark.parametrize(
    ("written", "per_second"), [(0, 0.0), (0.5, 0.5), ("30/m", 0.5), ("360/h", 0.1), ("2/s", 2.0)]
)
def test_the_low_traffic_guard_takes_rates_per_second_minute_or_hour(
    written: object, per_second: float
) -> None:
    data = minimal()
    data["slos"][1]["min_event_rate"] = written
    assert parse_spec(data).slo("availability").min_event_rate_per_second == per_second


def test_a_latency_threshold_may_be_a_duration_or_seconds() -> None:
    data = minimal()
    data["slos"][0]["sli"]["latency"]["threshold"] = 0.12
    data["slos"][0]["sli"]["latency"]["selector"] = {"model": "llama"}
    sli = parse_checked_spec(data).slos[0].sli
    assert sli == LatencySLI(svc.INTER_TOKEN_LATENCY.name, 0.12, {"model": "llama"})


def test_a_ratio_selector_is_stored_in_canonical_form() -> None:
    data = minimal()
    data["slos"][1]["sli"]["ratio"]["errors"] = svc.REQUESTS.total + " { code =~ '5..' }"
    assert errors_of(data)  # single quotes are not PromQL's label quoting here
    data["slos"][1]["sli"]["ratio"]["errors"] = svc.REQUESTS.total + '{ code =~ "5.."  }'
    assert parse_spec(data).slo("availability").sli == RatioSLI(ERRORS,
                                                                svc.REQUESTS.total)


# ---- every error at once, with its place ---------------------------------------------------------


def test_every_problem_is_reported_at_once_with_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, f"""\
version: governor/v1
service: inference
period: 30d
slos:
  - name: Inter_Token
    objectve: 99
    sli:
      latency:
        metric: {vllm.INTER_TOKEN_LATENCY.name}
        threshold: 110ms
  - name: availability
    objective: 100
    sli:
      ratio:
        errors: sum(rate(x[5m]))
        total: {svc.REQUESTS.total}
""")
    with pytest.raises(SpecError) as caught:
        load_checked_spec(path)
    where = str(path)
    assert caught.value.errors == (
        f"{where}:6: slos[0].objectve: unknown key 'objectve' (did you mean 'objective'?)",
        f"{where}:5: slos[0]: missing required key 'objective'",
        f"{where}:5: slos[0].name: 'Inter_Token' must be lower-case letters, digits and dashes "
        "(at most 63, like a DNS label)",
        f"{where}:10: slos[0].sli.latency.threshold: 0.11s is not a bucket edge of "
        f"{vllm.INTER_TOKEN_LATENCY.name}, so the SLI could not count it exactly "
        "(nearest edges: 0.075, 0.1, 0.15, 0.2); or give vllm serve --custom-histogram-buckets "
        "with it (vLLM >= 0.32) and declare those edges in "
        "vllm.custom_histogram_buckets.inter_token_latency",
        f"{where}:12: slos[1].objective: must be a percentage in (0, 100) such as 99.9 or "
        "\"99.9%\", or a ratio in (0, 1) such as 0.999: got 100",
        f"{where}:15: slos[1].sli.ratio.errors: 'sum(rate(x[5m]))' is not a plain selector: "
        "write name{label=\"value\"} without functions, ranges or operators",
    )
    assert str(caught.value).startswith("6 problems in the SLO spec:\n  ")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("service"), "(top level): missing required key 'service'"),
        (lambda d: d.update(version="prometheus/v1"), "unsupported version 'prometheus/v1'"),
        (lambda d: d.update(service="my service"), "service: 'my service' must be letters"),
        (lambda d: d.update(slos=[]), "slos: must be a non-empty list of SLOs: got a list"),
        (lambda d: d.update(slos={"a": 1}),
         "slos: must be a non-empty list of SLOs: got a mapping"),
        (lambda d: d.update(labels={"slo": "x"}), "labels.slo: label 'slo' is set by Governor"),
        (lambda d: d.update(labels={"__x": "y"}), "'__x' is not a valid label name"),
        (lambda d: d.update(labels={"team": 7}), "labels.team: must be a label value (a string)"),
        (lambda d: d.update(labels=["team"]), "labels: must be a mapping of label names"),
        (lambda d: d["slos"].append(copy.deepcopy(d["slos"][1])),
         "slos[2].name: 'availability' clashes with slos[1]"),
        (lambda d: d["slos"][0].update(sli={"latency": {}, "ratio": {}}),
         "slos[0].sli: must have exactly one of 'latency' or 'ratio'"),
        (lambda d: d["slos"][0].update(sli={"latncy": {}}),
         "slos[0].sli.latncy: unknown key 'latncy' (did you mean 'latency'?)"),
        (lambda d: d["slos"][0].update(controller="yes"),
         "slos[0].controller: must be true or false: got a string"),
        (lambda d: d["slos"][0]["sli"]["latency"].update(metric="nope_seconds"),
         "slos[0].sli.latency.metric: 'nope_seconds' is not a histogram Governor knows"),
        (lambda d: d["slos"][0]["sli"]["latency"].update(metric=svc.INTER_TOKEN_LATENCY.bucket),
         "give the histogram's base name, without _bucket/_count/_sum"),
        (lambda d: d["slos"][0]["sli"]["latency"].update(threshold="-1s"),
         "slos[0].sli.latency.threshold: not a duration"),
        (lambda d: d["slos"][0]["sli"]["latency"].update(threshold=0),
         "must be a positive duration: got 0"),
        (lambda d: d["slos"][0]["sli"]["latency"].update(selector={"le": "1"}),
         "slos[0].sli.latency.selector.le: label 'le' is set by Governor"),
        (lambda d: d["slos"][1]["sli"]["ratio"].update(errors=svc.REQUESTS.total),
         "slos[1].sli.ratio.errors: selects the same series as total"),
        (lambda d: d["slos"][1]["sli"]["ratio"].update(errors='x{a="b"} or vector(1)'),
         "is not a plain selector"),
        (lambda d: d["slos"][1]["sli"]["ratio"].update(errors='x{a=~"(?!5)"}'),
         "lookaround or backreferences"),
        (lambda d: d["slos"][1]["sli"]["ratio"].update(errors='x{a=~"("}'),
         "bad regular expression"),
        (lambda d: d["slos"][1]["sli"]["ratio"].update(errors='x{__name__="y"}'),
         "goes before the braces"),
        (lambda d: d["slos"][1]["sli"]["ratio"].update(errors=7),
         "must be a PromQL counter selector"),
        (lambda d: d["slos"][1].update(min_event_rate="lots"), "must be a non-negative rate"),
        (lambda d: d["slos"][1].update(description="x" * 5000), "longer than 1024 characters"),
        (lambda d: d["slos"][1].update(name="a" * 64), "must be lower-case letters"),
        (lambda d: d["slos"].append({"name": "inter-token--latency", "objective": 99,
                                     "sli": d["slos"][1]["sli"]}),
         "clashes with slos[0] (names and their alert names must be unique)"),
        (lambda d: d.update({1: 2}), "(top level): keys must be strings: got 1"),
        (lambda d: d["slos"].append({**copy.deepcopy(d["slos"][0]), "name": "ttft"}),
         "slos[2].controller: only one SLO may drive the controller, and slos[0] already does"),
        (lambda d: d["slos"][0].update(role="ttf"),
         "slos[0].role: must be one of itl, ttft, none: got 'ttf' (did you mean 'ttft'?)"),
        (lambda d: d["slos"][1].update(role="ttft"),
         "slos[1].role: role 'ttft' reads a latency histogram; a ratio SLI cannot have one"),
        (lambda d: d["slos"][0].update(role="ttft"),
         "slos[0].role: role 'itl' is the decode SLO the controller acts on, and only it"),
        (lambda d: d["slos"].append({**ttft_slo("ttft"), "role": "itl"}),
         "slos[2].role: role 'itl' is the decode SLO the controller acts on, and only it"),
        (lambda d: d["slos"].extend([ttft_slo(), {**ttft_slo("ttft-p90"), "role": "ttft"}]),
         "slos[3].role: slos[2] ('time-to-first-token') already has role 'ttft' (by its name: "
         "give it `role: none` if it is not the one); one SLO per role"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_a_mistake_is_reported_where_it_is(change: Any, message: str) -> None:
    data = minimal()
    change(data)
    assert any(message in error for error in errors_of(data)), errors_of(data)


# ---- roles ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "roles"),
    [
        ([ttft_slo()], ("itl", None, "ttft")),  # specs written before roles: by the names
        ([ttft_slo("ttft")], ("itl", None, None)),  # renamed without a role: no first-token SLO
        ([{**ttft_slo("ttft"), "role": "ttft"}], ("itl", None, "ttft")),
        ([{**ttft_slo(), "role": "none"}], ("itl", None, None)),
    ],
    ids=["time-to-first-token is ttft by its name", "a renamed one without role has none",
         "any name with role ttft", "role none opts out"],
)
def test_each_slo_has_the_role_it_declares_or_the_one_its_name_gave_before_roles(
        extra: list[dict[str, Any]], roles: tuple[str | None, ...]) -> None:
    data = minimal()
    data["slos"] += extra
    spec = parse_checked_spec(data)
    assert tuple(slo.role for slo in spec.slos) == roles
    assert (spec.with_role("ttft") is None) == (roles[2] is None)


def test_a_role_mistake_names_its_file_and_line(tmp_path: Path) -> None:
    text = yaml.safe_dump({**minimal(), "slos": [*minimal()["slos"],
                                                 {**ttft_slo("ttft"), "role": "first-token"}]},
                          sort_keys=False)
    line = next(i for i, text_line in enumerate(text.splitlines(), 1) if "first-token" in text_line)
    with pytest.raises(SpecError) as caught:
        load_checked_spec(write(tmp_path, text))
    assert caught.value.errors == (
        f"{tmp_path / 'slo.yaml'}:{line}: slos[2].role: must be one of itl, ttft, none: got "
        "'first-token'",)


# ---- hostile input -----------------------------------------------------------------------------

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join(['*' + p] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty; expected version, service, period and slos"),
        ("[1, 2]", "(top level): must be a mapping with keys"),
        ("just words", "(top level): must be a mapping with keys"),
        ("~", "got nothing (null)"),
        (BOMB, "once aliases are expanded (an alias bomb?)"),
        ("a: &a [*a]", "an alias refers to itself"),
        ("version: a\nversion: b\n", ":2:1: duplicate key 'version' (first on line 1)"),
        ("version: [", "expected the node content"),
        ("!!python/object/apply:os.system ['true']", "could not determine a constructor"),
        ("[" * 3000, "nested too deeply"),
        ("? [a]\n: b\n", "found unhashable key"),
        ("a: 1\n---\nb: 2\n", "2 YAML documents; a Governor spec is one"),
        ("\t- x", "cannot start any token"),
        ("period: " + "1" * 5000, ":1:9: an integer 5000 characters long (at most 100)"),
        ("period: 0x" + "f" * 5000, ":1:9: an integer 5002 characters long"),
        ("slos: [{objective: " + "9" * 4400 + "}]", ":1:20: an integer 4400 characters long"),
    ],
    ids=["empty file", "list root", "scalar root", "null root", "alias bomb", "recursive alias",
         "duplicate key", "broken syntax", "python tag", "deep nesting", "complex key",
         "several documents", "tab indentation", "an integer of 5000 digits",
         "a hexadecimal integer of 5000 digits", "an objective past Python's digit limit"],
)
def test_hostile_yaml_is_a_spec_error_never_a_traceback(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(SpecError) as caught:
        load_spec(write(tmp_path, text))
    assert any(message in error for error in caught.value.errors), caught.value.errors


def test_a_huge_file_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    path = write(tmp_path, "# " + "x" * (2 << 20))
    with pytest.raises(SpecError, match="larger than 1048576 bytes"):
        load_spec(path)


def test_a_binary_or_missing_file_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="not UTF-8"):
        load_spec(write(tmp_path, b"\xff\xfe\x00garbage"))
    with pytest.raises(SpecError, match="cannot read: No such file"):
        load_spec(tmp_path / "absent.yaml")
    with pytest.raises(SpecError, match="cannot read: Is a directory"):
        load_spec(tmp_path)


def test_anchors_and_merge_keys_still_work(tmp_path: Path) -> None:
    text = DEFAULT_SPEC.read_text(encoding="utf-8").replace(
        "labels:\n  team: inference", "labels: &shared\n  team: inference", 1
    ).replace("    controller: true", "    controller: true\n    labels:\n      <<: *shared\n"
                                       "      tier: gold")
    spec = load_checked_spec(write(tmp_path, text))
    assert dict(spec.slos[0].labels) == {"team": "inference", "tier": "gold"}


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=12) | st.integers(), inner, max_size=5),
    max_leaves=30,
)


def _outcome(data: object) -> SloSpec | SpecError:
    """The spec, or the SpecError; any other exception escapes and fails the property."""
    try:
        return parse_checked_spec(data)
    except SpecError as exc:
        return exc


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_arbitrary_data_is_a_spec_or_a_spec_error(data: object) -> None:
    outcome = _outcome(data)
    if isinstance(outcome, SpecError):
        assert outcome.errors
        assert all(isinstance(e, str) and e for e in outcome.errors)


def _mutations() -> st.SearchStrategy[dict[str, Any]]:
    """The minimal spec with one value somewhere replaced by arbitrary data."""
    def mutate(args: tuple[int, str, object]) -> dict[str, Any]:
        index, key, value = args
        data = minimal()
        data["slos"][index % 2][key] = value
        return data
    keys = st.sampled_from(["name", "objective", "sli", "controller", "labels", "min_event_rate",
                            "description"])
    return st.tuples(st.integers(0, 1), keys, JSON).map(mutate)


@settings(max_examples=300, deadline=None)
@given(_mutations())
def test_a_mutated_spec_is_a_spec_or_a_spec_error(data: dict[str, Any]) -> None:
    outcome = _outcome(data)
    if isinstance(outcome, SpecError):
        assert outcome.errors
    else:
        assert all(isinstance(slo, SLO) for slo in outcome.slos)


# ---- OpenSLO v1 -------------------------------------------------------------------------------

OPENSLO = f"""\
apiVersion: openslo/v1
kind: Service
metadata: {{name: inference}}
spec: {{description: the inference service}}
---
apiVersion: openslo/v1
kind: SLO
metadata:
  name: inter-token-latency
  displayName: Decode inter-token latency
  labels: {{team: inference}}
  annotations:
    governor.dev/controller: "true"
spec:
  service: inference
  budgetingMethod: Occurrences
  timeWindow:
    - duration: 4w
      isRolling: true
  objectives:
    - displayName: fast decode
      targetPercent: 99
  indicator:
    metadata: {{name: itl}}
    spec:
      ratioMetric:
        counter: true
        good:
          metricSource:
            type: Prometheus
            spec: {{query: '{svc.INTER_TOKEN_LATENCY.name}_bucket{{le="0.12"}}'}}
        total:
          metricSource:
            type: Prometheus
            spec: {{query: {svc.INTER_TOKEN_LATENCY.name}_count}}
---
apiVersion: openslo/v1
kind: SLO
metadata:
  name: availability
  annotations: {{governor.dev/min-event-rate: 30/m}}
spec:
  description: non-5xx answers
  service: inference
  budgetingMethod: Occurrences
  timeWindow: [{{duration: 28d, isRolling: true}}]
  objectives: [{{target: 0.999}}]
  indicator:
    metadata: {{name: errors}}
    spec:
      ratioMetric:
        counter: true
        bad: {{metricSource: {{type: prometheus, spec: {{query: '{ERRORS}'}}}}}}
        total:
          metricSource: {{type: Prometheus, spec: {{query: {svc.REQUESTS.total}}}}}
"""


def test_openslo_documents_map_to_the_same_model(tmp_path: Path) -> None:
    spec = load_checked_spec(write(tmp_path, OPENSLO.replace("28d", "4w")))
    itl, availability = spec.slos
    assert (spec.service, spec.period_seconds, spec.version) == ("inference", 28 * 86400,
                                                                 "governor/v1")
    assert itl == SLO("inter-token-latency", "Decode inter-token latency", 0.99,
                      LatencySLI(svc.INTER_TOKEN_LATENCY.name, 0.12, {}), True,
                      {"team": "inference"}, role="itl")
    assert availability == SLO("availability", "non-5xx answers", 0.999,
                               RatioSLI(ERRORS, svc.REQUESTS.total), False, {}, 0.5)


def test_openslo_problems_point_at_the_document_and_line(tmp_path: Path) -> None:
    text = OPENSLO.replace("targetPercent: 99", "targetPercent: 100").replace(
        "      isRolling: true", "      isRolling: false")
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as caught:
        load_checked_spec(path)
    assert caught.value.errors == (
        f"{path}:18: document 2: spec.timeWindow[0]: calendar windows do not map: Governor's "
        "period is rolling",
        f"{path}:22: document 2: spec.objectives[0].targetPercent: must be a percentage in "
        "(0, 100) such as 99.9 or \"99.9%\", or a ratio in (0, 1) such as 0.999: got '100%'",
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("targetPercent: 99", "targetPercent: 100"),
         ":22: document 2: spec.objectives[0].targetPercent: must be a percentage"),
        (("duration: 4w", "duration: 1M"), "document 2: spec.timeWindow[0].duration: '1M' does not "
                                           "map: use days or weeks"),
        (("budgetingMethod: Occurrences", "budgetingMethod: Timeslices"),
         "document 2: spec.budgetingMethod: only Occurrences maps"),
        (("counter: true\n        good", "counter: true\n        raw"),
         "document 2: spec.indicator.spec.ratioMetric.raw: raw ratios do not map"),
        (("counter: true\n        good", "counter: true\n        fine"),
         "document 2: spec.indicator.spec.ratioMetric.fine: unknown key"),
        (("counter: true\n        bad", "counter: true\n        worse"),
         "document 3: spec.indicator.spec.ratioMetric: must have bad (or good) and total"),
        (("query: '" + ERRORS, "query: '" + ERRORS + " > 0"),
         ":53: document 3: spec.indicator.spec.ratioMetric.bad.metricSource.spec.query: "),
        (("kind: Service", "kind: DataSource"), "document 1: kind: 'DataSource' does not map"),
        (("name: availability", "name: Availability"),
         "document 3: metadata.name: 'Availability' must be lower-case"),
        (("governor.dev/controller: \"true\"", "governor.dev/controller: \"maybe\""),
         "document 2: metadata.annotations.governor.dev/controller: must be true or false"),
        (("governor.dev/controller: \"true\"", "governor.dev/role: ttfd"),
         ":13: document 2: metadata.annotations.governor.dev/role: must be one of itl, ttft, "
         "none: got 'ttfd' (did you mean 'ttft'?)"),
        (("type: prometheus", "type: Datadog"), "only Prometheus sources map: got 'Datadog'"),
        (("service: inference\n  budgetingMethod: Occurrences\n  timeWindow: [",
          "service: other\n  budgetingMethod: Occurrences\n  timeWindow: ["),
         "document 3: spec.service: 'other' differs from 'inference' in document 2"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_an_openslo_document_that_does_not_map_says_why(
    tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    text = OPENSLO.replace("28d", "4w").replace(*change)
    with pytest.raises(SpecError) as caught:
        load_checked_spec(write(tmp_path, text))
    assert any(message in error for error in caught.value.errors), caught.value.errors


def test_openslo_data_parses_without_a_file() -> None:
    documents = list(yaml.safe_load_all(OPENSLO.replace("28d", "4w")))
    assert parse_checked_spec(documents).slo("availability").objective == 0.999


def _paths(node: object, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside nested dicts and lists."""
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*prefix, index))
    return found


def _replace(node: Any, path: tuple[Any, ...], value: object) -> Any:
    if not path:
        return value
    node = copy.copy(node)
    node[path[0]] = _replace(node[path[0]], path[1:], value)
    return node


OPENSLO_DOCS = list(yaml.safe_load_all(OPENSLO.replace("28d", "4w")))
OPENSLO_PATHS = _paths(OPENSLO_DOCS)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(OPENSLO_PATHS), JSON)
def test_a_mutated_openslo_document_is_a_spec_or_a_spec_error(
    path: tuple[Any, ...], value: object
) -> None:
    outcome = _outcome(_replace(OPENSLO_DOCS, path, value))
    if isinstance(outcome, SpecError):
        assert outcome.errors
        assert all(e.startswith("<memory>") for e in outcome.errors), outcome.errors


YAML_PIECES = st.sampled_from([
    "version: governor/v1\n", "service: inference\n", "period: 30d\n", "slos:\n", "  - ",
    "name: x\n", "objective: 99\n", "sli: {latency: {metric: m, threshold: 1s}}\n", "&a ", "*a ",
    "<<: *a\n", "[", "]", "{", "}", ": ", "- ", "\t", "'", '"', "!!binary ", "? ", "---\n",
    "apiVersion: openslo/v1\n", "kind: SLO\n", "spec: {}\n", "\n", "  ", "~", "é", "\x00",
])


@settings(max_examples=300, deadline=None)
@given(st.lists(YAML_PIECES | st.text(max_size=8), max_size=40).map("".join))
def test_arbitrary_text_is_a_spec_or_a_spec_error(text: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "slo.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        try:
            load_checked_spec(path)
        except SpecError as exc:
            assert exc.errors
