"""Spec → every Grafana file, as text, laid out as compose mounts them under ``grafana/``::

    files = render_all(load_checked_spec("slo.yaml"))       # relative path → text
    write_all(files, Path("deploy"))

Output is deterministic: sorted keys, fixed uids and panel ids, no timestamps.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as dm

from governor.dashboards import (
    controller_board,
    dcgm_board,
    gpu_board,
    inference_board,
    slo_board,
)
from governor.dashboards.board import GENERATED_NOTE
from governor.dashboards.provisioning import GrafanaParams, dashboard_providers, datasources
from governor.generation.artifacts import Artifacts, Owned
from governor.generation.yamltext import GENERATED_MARK, dump_yaml
from governor.slo.spec import SloSpec

DASHBOARDS_DIR: Final = "grafana/dashboards"
DATASOURCES: Final = "grafana/provisioning/datasources/governor.yml"
PROVIDERS: Final = "grafana/provisioning/dashboards/governor.yml"
# How a generated board says so: the note's text before the source name.
BOARD_MARK: Final = GENERATED_NOTE.split("{source}")[0]


def boards(spec: SloSpec, source: str) -> tuple[dm.Dashboard, ...]:
    gpus = dcgm_board if spec.targets.gpu.dcgm else gpu_board
    return (slo_board.build(spec, source), inference_board.build(spec, source),
            gpus.build(spec, source), controller_board.build(spec, source))


def dashboard_json(dashboard: dm.Dashboard) -> str:
    return json.dumps(dashboard, cls=JSONEncoder, sort_keys=True, indent=2,
                      ensure_ascii=False) + "\n"


def render_all(spec: SloSpec, params: GrafanaParams | None = None, *,
               source: str = "slo.yaml") -> dict[str, str]:
    params = params or GrafanaParams()
    files = {f"{DASHBOARDS_DIR}/{board.uid}.json": dashboard_json(board)
             for board in boards(spec, source)}
    files[DATASOURCES] = dump_yaml(datasources(params), source)
    files[PROVIDERS] = dump_yaml(dashboard_providers(), source)
    return dict(sorted(files.items()))


def _is_generated(path: Path) -> bool:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    if path.suffix == ".yml":
        return text.startswith(GENERATED_MARK)
    try:
        description = json.loads(text).get("description", "")
    except (ValueError, AttributeError):
        return False
    return isinstance(description, str) and BOARD_MARK in description


# A hand-made board or datasource next to the generated ones is left alone.
ARTIFACTS = Artifacts((Owned(DASHBOARDS_DIR, "*.json", _is_generated),
                       Owned(str(Path(DATASOURCES).parent), "*.yml", _is_generated),
                       Owned(str(Path(PROVIDERS).parent), "*.yml", _is_generated)))
write_all = ARTIFACTS.write_all
stale_files = ARTIFACTS.stale_files
differences = ARTIFACTS.differences
