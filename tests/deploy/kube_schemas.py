"""Validate Kubernetes objects against the pinned schemas in ``tests/data/kubernetes``.

Built-in kinds use the Kubernetes OpenAPI (strict: unknown fields are errors); custom resources
use the ``openAPIV3Schema`` of their CRD, as the API server would.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from jsonschema import Draft7Validator, Draft202012Validator

DATA = Path(__file__).resolve().parents[1] / "data" / "kubernetes"


@functools.cache
def _kubernetes() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((DATA / "kubernetes.json").read_text())
    return loaded


@functools.cache
def _crds() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((DATA / "crds.json").read_text())
    return loaded


def kinds() -> set[str]:
    """Every ``apiVersion/kind`` a schema is pinned for."""
    return set(_kubernetes()["kinds"]) | set(_crds())


def errors(document: dict[str, Any]) -> list[str]:
    """What is wrong with one object, as ``path: message`` lines; empty when it is valid."""
    key = f"{document.get('apiVersion')}/{document.get('kind')}"
    if key in _kubernetes()["kinds"]:
        schema = {"$defs": _kubernetes()["$defs"], **_kubernetes()["kinds"][key]}
        validator: Any = Draft202012Validator(schema)
    elif key in _crds():
        validator = Draft7Validator(_crds()[key])
    else:
        return [f"no pinned schema for {key}"]
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
            for e in sorted(validator.iter_errors(document), key=lambda e: list(map(str, e.path)))]
