"""Every generated board against Grafana's JSON schemas (grafana-foundation-sdk, vendored).

The dashboard schema is strict (no unknown keys, no legacy keys, datasources as objects); each
panel's ``options`` and ``fieldConfig.defaults.custom`` are checked against its panel type's
schema, and each query target against the Prometheus query schema.
"""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

import jsonschema
import pytest

from governor.dashboards.readback import panels
from tests.dashboards.boards import CASES, EXAMPLES, SCHEMAS, boards

BOARDS = boards()


@functools.cache
def _schema(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((SCHEMAS / f"{name}.jsonschema.json").read_text())
    return loaded


def validator(name: str, definition: str | None = None) -> jsonschema.Draft7Validator:
    """A validator for a schema file, or for one of its definitions (panel schemas have no
    root: ``Options`` and ``FieldConfig`` are definitions)."""
    schema = dict(_schema(name))
    if definition is not None:
        schema["$ref"] = f"#/definitions/{definition}"
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def errors(validator_: jsonschema.Draft7Validator, instance: object) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
            for e in validator_.iter_errors(instance)]


@pytest.mark.parametrize("uid", sorted(BOARDS))
def test_each_board_validates_against_the_dashboard_schema(uid: str) -> None:
    board = BOARDS[uid]
    assert errors(validator("dashboard"), board) == []
    assert board["schemaVersion"] >= 36


@pytest.mark.parametrize("uid", sorted(BOARDS))
def test_each_panel_validates_against_its_panel_schema(uid: str) -> None:
    problems = []
    for panel in panels(BOARDS[uid]):
        definitions = _schema(panel["type"])["definitions"]
        options = validator(panel["type"], "Options")
        problems += [f"{panel['title']}: options: {e}" for e in errors(options, panel["options"])]
        custom = panel.get("fieldConfig", {}).get("defaults", {}).get("custom")
        if "FieldConfig" in definitions:
            assert custom is not None, f"{panel['title']}: no fieldConfig.defaults.custom"
            problems += [f"{panel['title']}: custom: {e}"
                         for e in errors(validator(panel["type"], "FieldConfig"), custom)]
        else:  # stat and text panels have no custom field config
            assert not custom, f"{panel['title']}: custom config on a {panel['type']} panel"
    assert problems == []


@pytest.mark.parametrize("uid", sorted(BOARDS))
def test_each_query_target_validates_against_the_prometheus_query_schema(uid: str) -> None:
    problems = [f"{panel['title']} {target.get('refId')}: {e}"
                for panel in panels(BOARDS[uid]) for target in panel.get("targets", [])
                for e in errors(validator("prometheus"), target)]
    assert problems == []


@pytest.mark.parametrize("case", sorted({**CASES, **EXAMPLES}))
def test_boards_of_other_specs_validate_too(case: str) -> None:
    from governor.dashboards.render import render_all
    from governor.generation.catalog import load_checked_spec

    spec = load_checked_spec({**CASES, **EXAMPLES}[case])
    for board in boards(render_all(spec)).values():
        assert errors(validator("dashboard"), board) == [], board["uid"]


# ---- the schemas catch what they must, so passing above means something ----------------------


def _first(board: dict[str, Any], panel_type: str) -> dict[str, Any]:
    return next(p for p in panels(board) if p["type"] == panel_type)


@pytest.mark.parametrize(("breakage", "expected"), [
    pytest.param(lambda b: b.update(rows=[]), "rows", id="a legacy rows key"),
    pytest.param(lambda b: b["panels"][1].update(datasource="Prometheus"), "not valid under any",
                 id="a datasource given as a plain string"),
    pytest.param(lambda b: b.update(gnetId=None), "None", id="a null value"),
    pytest.param(lambda b: b["templating"]["list"][0].update(useTags=False), "useTags",
                 id="a pre-9 variable key"),
])
def test_the_dashboard_schema_rejects_legacy_output(breakage: Any, expected: str) -> None:
    board = copy.deepcopy(BOARDS["governor-inference"])
    breakage(board)
    found = errors(validator("dashboard"), board)
    assert found and any(expected in e for e in found), found


def test_the_panel_schemas_reject_unknown_options() -> None:
    board = copy.deepcopy(BOARDS["governor-inference"])
    timeseries = _first(board, "timeseries")
    timeseries["options"]["legend"]["displayMode"] = "sideways"
    timeseries["fieldConfig"]["defaults"]["custom"]["bars"] = True
    assert errors(validator("timeseries", "Options"), timeseries["options"])
    assert errors(validator("timeseries", "FieldConfig"),
                  timeseries["fieldConfig"]["defaults"]["custom"])


def test_the_heatmap_schema_rejects_what_grafana_would_not_read() -> None:
    board = copy.deepcopy(BOARDS["governor-inference"])
    heatmap = _first(board, "heatmap")
    assert errors(validator("heatmap", "Options"), heatmap["options"]) == []
    heatmap["options"]["color"]["steps"] = 1  # at least two colours
    heatmap["options"]["rowsFrame"]["layout"] = "middle"
    heatmap["fieldConfig"]["defaults"]["custom"]["lineWidth"] = 1  # a time-series key
    assert len(errors(validator("heatmap", "Options"), heatmap["options"])) == 2
    assert errors(validator("heatmap", "FieldConfig"),
                  heatmap["fieldConfig"]["defaults"]["custom"])


@pytest.mark.parametrize("uid", ["governor-inference", "governor-gpu"])
def test_the_boards_with_heat_maps_have_them_in_every_fleet(uid: str) -> None:
    from governor.dashboards.render import render_all
    from governor.generation.catalog import load_checked_spec

    for case, path in {**CASES, **EXAMPLES, "default": None}.items():
        found = BOARDS[uid] if path is None else boards(render_all(load_checked_spec(path)))[uid]
        assert any(p["type"] == "heatmap" for p in panels(found)), case
