"""Request classes in the spec: the format, classification, and every way to get them wrong."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from governor.contracts.endpoints import CHAT_COMPLETIONS_PATH, CLASS_HEADER, COMPLETIONS_PATH
from governor.contracts.metrics import service as svc
from governor.generation.catalog import load_checked_spec, parse_checked_spec
from governor.slo.classes import MAX_CLASSES, Match, RequestClass, RequestClasses
from governor.slo.spec import SloSpec, SpecError, load_spec
from tests.slo.test_spec import DEFAULT_SPEC, JSON, errors_of, minimal, write


def with_classes(*classes: dict[str, Any]) -> dict[str, Any]:
    data = minimal()
    data["slos"].append({"name": "time-to-first-token", "objective": 99, "sli": {
        "latency": {"metric": svc.TIME_TO_FIRST_TOKEN.name, "threshold": "1s"}}})
    data["classes"] = list(classes)
    return data


DOC: dict[str, Any] = {
    "name": "doc", "priority": 10, "max_in_flight": 4,
    "match": [{"prompt_tokens": {"min": 3000}}, {"header": {CLASS_HEADER: "doc"}}],
    "targets": {"time-to-first-token": "20s", "inter-token-latency": "250ms"},
}
BATCH: dict[str, Any] = {"name": "batch", "priority": 5, "match": {"route": COMPLETIONS_PATH}}
CHAT: dict[str, Any] = {"name": "chat"}


def test_the_default_spec_puts_long_prompts_behind_chats() -> None:
    classes = load_checked_spec(DEFAULT_SPEC).classes
    assert classes.declared and classes.names == ("doc", "chat")
    doc, chat = classes.get("doc"), classes.get("chat")
    assert doc.priority > chat.priority and doc.max_in_flight and chat.max_in_flight is None
    assert doc.max_queue is not None and chat.max_queue is None
    assert classes.classify(CHAT_COMPLETIONS_PATH, {}, 5000) is doc
    assert classes.classify(CHAT_COMPLETIONS_PATH, {CLASS_HEADER: "doc"}, 10) is doc
    # A header can demote a request but not promote a long one.
    assert classes.classify(CHAT_COMPLETIONS_PATH, {CLASS_HEADER: "chat"}, 5000) is doc
    assert classes.classify(CHAT_COMPLETIONS_PATH, {}, 200) is chat


def test_without_classes_every_request_is_in_the_default_class() -> None:
    spec = parse_checked_spec(minimal())
    assert not spec.classes.declared
    assert spec.classes.names == (svc.DEFAULT_CLASS,)
    only = spec.classes.default
    assert (only.priority, only.max_in_flight, only.thresholds) == (0, None, ())
    assert spec.classes.classify(COMPLETIONS_PATH, {CLASS_HEADER: "doc"}, 10**6) is only


def test_classes_are_tried_in_order_and_the_last_takes_the_rest() -> None:
    classes = parse_checked_spec(with_classes(DOC, BATCH, CHAT)).classes
    assert classes.names == ("doc", "batch", "chat")
    assert classes.classify(COMPLETIONS_PATH, {}, 5000).name == "doc"  # doc comes first
    assert classes.classify(COMPLETIONS_PATH, {}, 50).name == "batch"
    assert classes.classify(CHAT_COMPLETIONS_PATH, {}, 50).name == "chat"
    assert classes.get("batch").priority == 5


def test_a_match_needs_every_condition_and_any_alternative() -> None:
    both = Match(min_prompt_tokens=10, max_prompt_tokens=20, routes=(COMPLETIONS_PATH,),
                 headers=(("x-tier", ("gold", "silver")),))
    assert both.matches(COMPLETIONS_PATH, {"x-tier": "silver"}, 10)
    assert both.matches(COMPLETIONS_PATH, {"x-tier": "gold"}, 20)
    assert not both.matches(COMPLETIONS_PATH, {"x-tier": "gold"}, 21)
    assert not both.matches(CHAT_COMPLETIONS_PATH, {"x-tier": "gold"}, 15)
    assert not both.matches(COMPLETIONS_PATH, {"x-tier": "bronze"}, 15)
    assert not both.matches(COMPLETIONS_PATH, {}, 15)


def test_header_names_ignore_case_in_the_spec() -> None:
    spec = parse_checked_spec(with_classes(
        {"name": "gold", "match": {"header": {"X-Tier": ["gold", "gold"]}}}, CHAT))
    assert spec.classes.get("gold").match[0].headers == (("x-tier", ("gold",)),)


def test_a_class_threshold_overrides_the_slo_and_defaults_to_it() -> None:
    classes = parse_checked_spec(with_classes(DOC, CHAT)).classes
    assert classes.thresholds("time-to-first-token", 1.0) == {"doc": 20.0, "chat": 1.0}
    assert classes.thresholds("inter-token-latency", 0.12) == {"doc": 0.25, "chat": 0.12}


def test_the_model_is_frozen_and_hashable() -> None:
    spec = parse_checked_spec(with_classes(DOC, CHAT))
    assert hash(spec) == hash(parse_checked_spec(with_classes(DOC, CHAT)))
    with pytest.raises(AttributeError):
        spec.classes.default.priority = 3  # type: ignore[misc]
    with pytest.raises(ValueError, match="default"):
        RequestClasses((RequestClass("x", (Match(min_prompt_tokens=1),)),))


def test_every_problem_of_the_classes_is_reported_at_once_with_its_line(tmp_path: Path) -> None:
    text = (DEFAULT_SPEC.read_text(encoding="utf-8")
            .replace("priority: 10", "priority: ten")
            .replace("max_in_flight: 4", "max_in_flight: 0")
            .replace("min: 3000", "min: 3000, max: 20")
            .replace("time-to-first-token: 20s", "time-to-first-token: 0s")
            .replace("  - name: chat\n", "  - name: chat\n    match: {route: /v1/embeddings}\n"))
    with pytest.raises(SpecError) as caught:
        load_checked_spec(write(tmp_path, text))
    errors = caught.value.errors
    wanted = ["classes[0].priority: must be a whole number", "classes[0].max_in_flight",
              "classes[0].match[0].prompt_tokens: min (3000) is above max (20)",
              "classes[0].targets.time-to-first-token: must be a positive duration",
              "classes[1].match: the last class is the default"]
    for piece in wanted:
        assert any(piece in error for error in errors), (piece, errors)
    assert len(errors) == len(wanted)
    assert all(error.startswith(f"{tmp_path / 'slo.yaml'}:") for error in errors)
    lines = {error.split(":")[1] for error in errors}
    assert len(lines) == len(wanted)  # each at its own line


@pytest.mark.parametrize(("classes", "message"), [
    ("chat", "must be a list of 1 to 16 request classes"),
    ([], "must be a list of 1 to 16 request classes"),
    ([{"name": f"c{i}", "match": {"route": COMPLETIONS_PATH}} for i in range(MAX_CLASSES)]
     + [CHAT], "got a list of 17"),
    ([{"name": "Chat"}], "must be lower-case letters"),
    ([{"priority": 1}], "missing required key 'name'"),
    ([{"name": "a", "match": {"route": COMPLETIONS_PATH}}, {"name": "a"}],
     "'a' is already classes[0]"),
    ([{"name": "a"}, CHAT], "only the last class may leave out match"),
    ([{"name": "a", "match": {}}, CHAT], "a match needs at least one of"),
    ([{"name": "a", "match": []}, CHAT], "must be a match or a list of 1 to 8"),
    ([{"name": "a", "match": [{"route": COMPLETIONS_PATH}] * 9}, CHAT], "list of 1 to 8"),
    ([{"name": "a", "match": {"prompt_token": {"min": 1}}}, CHAT],
     "did you mean 'prompt_tokens'"),
    ([{"name": "a", "match": {"prompt_tokens": {}}}, CHAT], "give min, max or both"),
    ([{"name": "a", "match": {"prompt_tokens": {"min": -1}}}, CHAT], "whole number from 0"),
    ([{"name": "a", "match": {"prompt_tokens": {"min": True}}}, CHAT], "got a boolean"),
    ([{"name": "a", "match": {"prompt_tokens": {"max": 1.5}}}, CHAT], "got 1.5"),
    ([{"name": "a", "match": {"prompt_tokens": 3000}}, CHAT], "must be a mapping with keys"),
    ([{"name": "a", "match": {"route": "/v1/embeddings"}}, CHAT], "generation routes only"),
    ([{"name": "a", "match": {"route": [COMPLETIONS_PATH] * 3}}, CHAT], "a list of 1 to 2"),
    ([{"name": "a", "match": {"header": {"authorization": "Bearer x"}}}, CHAT],
     "carries credentials"),
    ([{"name": "a", "match": {"header": {"Cookie": "x"}}}, CHAT], "carries credentials"),
    ([{"name": "a", "match": {"header": {"x tier": "gold"}}}, CHAT], "not a header name"),
    ([{"name": "a", "match": {"header": {"x-a": "1", "X-A": "2"}}}, CHAT], "given twice"),
    ([{"name": "a", "match": {"header": {}}}, CHAT], "must map 1 to 8 header names"),
    ([{"name": "a", "match": {"header": {"x-a": "v" * 257}}}, CHAT], "1 to 256 characters"),
    ([{"name": "a", "match": {"header": {"x-a": "bad\nvalue"}}}, CHAT], "printable text"),
    ([{"name": "a", "match": {"header": {"x-a": [str(i) for i in range(17)]}}}, CHAT],
     "a list of 1 to 16"),
    ([{"name": "a", "match": {"header": {"x-a": 3}}}, CHAT], "printable text"),
    ([{"name": "chat", "priority": 1.5}], "whole number from -1000000 to 1000000: got 1.5"),
    ([{"name": "chat", "priority": 10**7}], "whole number from -1000000"),
    ([{"name": "chat", "max_in_flight": 0}], "whole number from 1"),
    ([{"name": "chat", "max_in_flight": None}], "got nothing (null)"),
    ([{"name": "chat", "max_queue": -1}], "max_queue: must be a whole number from 0"),
    ([{"name": "chat", "max_queue": "16"}], "got a string"),
    ([{"name": "chat", "targets": {"availability": "1s"}}], "unknown key 'availability'"),
    ([{"name": "chat", "targets": {"inter-token-latency": "fast"}}], "not a duration"),
    ([{"name": "chat", "targets": {"inter-token-latency": "-1s"}}], "not a duration"),
    ([{"name": "chat", "targets": "1s"}], "must be a mapping"),
    ([{"name": "chat", "colour": "red"}], "unknown key 'colour'"),
])
def test_a_class_mistake_is_reported_where_it_is(classes: object, message: str) -> None:
    data = with_classes()
    data["classes"] = classes
    errors = errors_of(data)
    assert any(message in error for error in errors), errors


def test_a_class_label_clashes_with_the_per_class_rules_only_when_classes_exist() -> None:
    data = with_classes(CHAT)
    data["labels"] = {"class": "x"}
    data["slos"][0]["labels"] = {"class": "y"}
    errors = errors_of(data)
    assert sum("per-class rules" in error for error in errors) == 2
    del data["classes"]
    assert parse_checked_spec(data).labels == {"class": "x"}


def test_an_slo_whose_alerts_would_pass_for_another_slos_class_alerts_is_refused() -> None:
    data = with_classes(CHAT)
    data["slos"].append({"name": "inter-token-latency-class", "objective": 99, "sli": {
        "latency": {"metric": svc.INTER_TOKEN_LATENCY.name, "threshold": "120ms"}}})
    (error,) = errors_of(data)
    assert "slos[3].name: 'inter-token-latency-class': its alerts would share" in error
    del data["classes"]
    assert len(parse_checked_spec(data).slos) == 4


def test_a_target_for_a_broken_slo_adds_nothing_to_its_own_error() -> None:
    data = with_classes({"name": "chat", "targets": {"time-to-first-token": "20s"}})
    data["slos"][2]["objective"] = 150
    errors = errors_of(data)
    assert len(errors) == 1 and "objective" in errors[0]


def test_an_slo_that_selects_its_class_takes_no_class_targets() -> None:
    data = with_classes({"name": "chat", "targets": {"time-to-first-token": "20s"}})
    data["slos"][2]["sli"]["latency"]["selector"] = {"class": "chat"}
    assert any("unknown key 'time-to-first-token'" in e for e in errors_of(data))


# ---- hostile and oversized ----------------------------------------------------------------------


def test_a_huge_list_of_classes_is_one_error_at_once() -> None:
    data = with_classes(*([{"name": "x", "match": {"route": COMPLETIONS_PATH}}] * 100_000))
    started = time.monotonic()
    errors = errors_of(data)
    assert time.monotonic() - started < 1.0
    assert errors == ("<memory>: classes: must be a list of 1 to 16 request classes, the "
                      "default last: got a list of 100000",)


def test_oversized_values_in_a_class_are_refused_not_stored(tmp_path: Path) -> None:
    huge = "x" * 100_000
    data = with_classes({"name": huge, "description": huge, "match": {"header": {huge: huge}}},
                        {"name": "chat"})
    errors = errors_of(data)
    assert len(errors) == 3 and all(len(e) < 400 for e in errors)


def test_hostile_yaml_in_the_classes_is_a_spec_error(tmp_path: Path) -> None:
    bomb = ("a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefg", "bcdefgh", strict=True)))
    text = DEFAULT_SPEC.read_text(encoding="utf-8") + "\nextra:\n" + "".join(
        "  " + line + "\n" for line in bomb.splitlines())
    with pytest.raises(SpecError, match=r"alias|nodes|expand"):
        load_spec(write(tmp_path, text))
    dup = DEFAULT_SPEC.read_text(encoding="utf-8").replace("    priority: 10\n",
                                                          "    priority: 10\n    priority: 1\n")
    with pytest.raises(SpecError, match="duplicate"):
        load_spec(write(tmp_path, dup))


def _outcome(data: object) -> SloSpec | SpecError:
    try:
        return parse_checked_spec(data)
    except SpecError as exc:
        return exc


def _class_mutations() -> st.SearchStrategy[dict[str, Any]]:
    """The spec with classes, one value of a class (or of its match) replaced by anything."""
    def mutate(args: tuple[int, str, bool, object]) -> dict[str, Any]:
        index, key, in_match, value = args
        data = with_classes(copy.deepcopy(DOC), copy.deepcopy(BATCH), {"name": "chat"})
        target = data["classes"][index % 3]
        if in_match and "match" in target:
            match = target["match"]
            (match[0] if isinstance(match, list) else match)[key] = value
        else:
            target[key] = value
        return data
    keys = st.sampled_from(["name", "match", "priority", "max_in_flight", "max_queue", "targets",
                            "description", "prompt_tokens", "route", "header"])
    return st.tuples(st.integers(0, 2), keys, st.booleans(), JSON).map(mutate)


@settings(max_examples=300, deadline=None)
@given(_class_mutations())
def test_a_mutated_class_is_a_spec_or_a_spec_error(data: dict[str, Any]) -> None:
    outcome = _outcome(data)
    if isinstance(outcome, SpecError):
        assert outcome.errors and all(isinstance(e, str) and e for e in outcome.errors)
    else:
        assert outcome.classes.declared and outcome.classes.default.match == ()


@settings(max_examples=200, deadline=None)
@given(st.lists(JSON, max_size=4))
def test_arbitrary_classes_are_a_spec_or_a_spec_error(classes: list[object]) -> None:
    data = with_classes()
    data["classes"] = classes
    outcome = _outcome(data)
    assert isinstance(outcome, SpecError | SloSpec)
