"""Running generated ``promtool test rules`` files on every core.

promtool evaluates one file's test groups one after another on one core, and the verdict's file
alone holds about twenty groups of eight simulated minutes each. The same groups, cut into small
files that keep the original's rule files and settings, run side by side: every group still runs,
and each small file must say SUCCESS.
"""

from __future__ import annotations

import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

GROUPS_PER_FILE = 4


def split(files: list[Path], work: Path, groups_per_file: int = GROUPS_PER_FILE) -> list[Path]:
    """Each file's test groups, ``groups_per_file`` to a new file under ``work``."""
    work.mkdir(parents=True, exist_ok=True)
    pieces = []
    for path in files:
        document: dict[str, Any] = yaml.safe_load(path.read_text())
        settings = {key: value for key, value in document.items() if key != "tests"}
        settings["rule_files"] = [str((path.parent / rule).resolve())
                                  for rule in document.get("rule_files", [])]
        groups = document.get("tests", [])
        assert groups, f"{path} has no test groups"
        for start in range(0, len(groups), groups_per_file):
            piece = work / f"{path.name.removesuffix('.test.yml')}.{start}.test.yml"
            piece.write_text(yaml.safe_dump({**settings,
                                             "tests": groups[start:start + groups_per_file]},
                                            sort_keys=False, width=1000))
            pieces.append(piece)
    return pieces


def run_all(promtool: str, files: list[Path], work: Path) -> list[str]:
    """The failures (promtool's own words), after every group of every file has run."""
    pieces = split(files, work)

    def one(piece: Path) -> str:
        result = subprocess.run([promtool, "test", "rules", str(piece)], capture_output=True,
                                text=True, timeout=300, check=False)
        if result.returncode == 0 and "SUCCESS" in result.stdout:
            return ""
        return f"{piece.name}:\n{result.stdout}{result.stderr}"

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return [failure for failure in pool.map(one, pieces) if failure]
