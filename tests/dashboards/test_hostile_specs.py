"""A hostile slo.yaml through ``governor generate``: a message, never a traceback, and text
that reaches the boards escaped."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from governor.generate import main as generate
from tests.dashboards.boards import ROOT, SCHEMAS, boards

SLO = str(ROOT / "slo.yaml")


@pytest.mark.parametrize("text", [
    "\x00\xff binary",
    "slos: [" * 200,
    "version: governor/v1\nservice: x\nperiod: 30d\nslos:\n" + "  - name: a\n" * 5000,
], ids=["binary", "deeply nested", "oversized"])
def test_hostile_spec_files_are_messages(
    tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "slo.yaml"
    spec.write_text(text, encoding="utf-8", errors="surrogateescape")
    assert generate(["--slo", str(spec), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "SLO spec" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_hostile_text_in_a_valid_spec_stays_text(tmp_path: Path) -> None:
    """Markdown, HTML, quotes and a regex pipe in the spec reach the boards escaped."""
    data = yaml.safe_load(Path(SLO).read_text(encoding="utf-8"))
    data["slos"][0]["description"] = '</script><img src=x onerror=alert(1)> "quoted" | {{x}} ✓'
    data["slos"][2]["sli"]["ratio"]["errors"] = 'governor_requests_total{code=~"5..|429"}'
    spec = tmp_path / "slo.yaml"
    spec.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert generate(["--slo", str(spec), "--out", str(tmp_path / "out")]) == 0
    files = {str(p.relative_to(tmp_path / "out")): p.read_text(encoding="utf-8")
             for p in (tmp_path / "out").rglob("*.json")}
    board = boards(files)["governor-slo"]
    schema = json.loads((SCHEMAS / "dashboard.jsonschema.json").read_text())
    jsonschema.Draft7Validator(schema).validate(board)
    objective = next(p for p in board["panels"] if p.get("title") == "Objective")
    assert objective["description"].startswith('</script><img src=x onerror=alert(1)> "quoted"')
    table = next(p for p in board["panels"] if p["type"] == "text")["options"]["content"]
    row = next(line for line in table.splitlines() if line.startswith("| availability |"))
    assert row.count("|") - row.count("\\|") == 5  # four cells: the pipe is escaped
