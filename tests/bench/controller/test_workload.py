"""Workload files: classes with lengths and phased arrival rates, validated at once."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from governor.bench.controller import workload as workload_module
from governor.bench.controller.request_logs import ReplayOptions, load_traffic
from governor.bench.controller.workload import (
    HEADLINE_FILE,
    Workload,
    WorkloadError,
    dump_workload,
    load_workload,
    parse_workload,
)

REPO = Path(__file__).resolve().parents[3]
WORKLOADS = REPO / "benchmarks" / "workloads"
STRESS = REPO / "lab" / "workloads" / "stress"  # loads the law is checked on beyond the table's


def minimal(**changes: object) -> dict[str, object]:
    data: dict[str, object] = {
        "version": "governor/workload/v1", "duration": "10m",
        "classes": {"chat": {"prompt_tokens": [10, 20], "output_tokens": [5, 9],
                             "rate": [{"start": "0%", "end": "100%", "from": 2}]}}}
    data.update(changes)
    return data


def test_the_built_in_headline_is_the_shipped_file_the_benchmarks_folder_links_to() -> None:
    shipped = Path(workload_module.__file__).with_name(HEADLINE_FILE)
    assert (WORKLOADS / "headline.yaml").resolve() == shipped.resolve()
    assert shipped.read_text().split("\n", 1)[1] == dump_workload(Workload.headline())
    assert load_workload(shipped).arrivals(5) == Workload.headline().arrivals(5)


@pytest.mark.parametrize(
    "path", sorted([*WORKLOADS.glob("*.yaml"), *STRESS.glob("*.yaml")]),
    ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_committed_workload_loads_and_generates_traffic(path: Path) -> None:
    workload = load_traffic(path, ReplayOptions())
    arrivals = workload.with_minutes(5).arrivals(1)
    kinds = {c.name for c in workload.classes} if isinstance(workload, Workload) else \
        set(workload.kinds)
    assert arrivals and {a.kind for a in arrivals} == kinds
    assert all(0 <= a.at < 300 for a in arrivals)


def test_phases_step_ramp_hold_and_leave_gaps() -> None:
    workload = parse_workload(minimal(classes={"x": {
        "prompt_tokens": [1, 1], "output_tokens": [1, 1],
        "rate": [{"start": "0s", "end": "2m", "from": 1},
                 {"start": "50%", "end": "100%", "from": 2, "to": 4}]}}))
    assert workload.rate_of("x", 60) == 1.0
    assert workload.rate_of("x", 200) == 0.0  # between the phases: no arrivals
    assert workload.rate_of("x", 450) == pytest.approx(3.0)  # half way up the ramp


def test_compressing_keeps_the_shape() -> None:
    long, short = Workload.headline(40), Workload.headline(4)
    assert long.rate_of("doc", 0.5 * 2400) == short.rate_of("doc", 0.5 * 240)


def test_every_problem_is_reported_at_once() -> None:
    bad = minimal(version="v0", duration="soon", extra=1, classes={
        "chat": {"prompt_tokens": [20, 10], "output_tokens": [5], "rate": [],
                 "colour": "red"},
        "bad name!": {"prompt_tokens": [1, 2], "output_tokens": [1, 2],
                      "rate": [{"start": "0%", "end": "100%", "from": 1}]}})
    with pytest.raises(WorkloadError) as exc:
        parse_workload(bad, "w.yaml")
    text = "\n".join(exc.value.errors)
    for expected in ("extra: unknown field", "version:", "duration:", "prompt_tokens",
                     "output_tokens", "rate: expected a list", "colour: unknown field",
                     "bad name!"):
        assert expected in text


@pytest.mark.parametrize(("phases", "message"), [
    ([{"start": "50%", "end": "10%", "from": 1}], "start must come before end"),
    ([{"start": "0%", "end": "60%", "from": 1}, {"start": "50%", "end": "90%", "from": 1}],
     "overlaps"),
    ([{"start": "0%", "end": "150%", "from": 1}], "within the run"),
    ([{"start": "0%", "end": "100%", "from": -1}], "requests per second"),
    ([{"start": "0%", "end": "100%", "from": True}], "requests per second"),
    ([{"start": "0%", "end": "100%"}], "expected start, end, from"),
])
def test_bad_phases_say_where(phases: list[object], message: str) -> None:
    data = minimal(classes={"c": {"prompt_tokens": [1, 1], "output_tokens": [1, 1],
                                  "rate": phases}})
    with pytest.raises(WorkloadError, match=message):
        parse_workload(data)


@pytest.mark.parametrize("text", ["", "[1, 2]", "version: [", "a: !!python/object:os.system x"])
def test_files_that_are_not_workloads_are_clear_errors(tmp_path: Path, text: str) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(text)
    with pytest.raises(WorkloadError, match=str(path)):
        load_workload(path)


def test_a_huge_file_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("x: " + "y" * 2_000_000)
    with pytest.raises(WorkloadError, match="larger than 1 MB"):
        load_workload(path)


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="cannot read"):
        load_workload(tmp_path / "absent.yaml")


def test_the_yaml_form_round_trips() -> None:
    workload = load_workload(WORKLOADS / "phase-shift.yaml")
    again = parse_workload(yaml.safe_load(dump_workload(workload)), "again")
    assert again.arrivals(2) == workload.arrivals(2)
