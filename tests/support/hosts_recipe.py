"""docs/stock-vllm.md's recipe for hosts, as the doc writes it: its shell command lines and its
YAML blocks, read from the doc itself so that the tests hold the doc to what they run and to what
``governor generate`` writes."""

from __future__ import annotations

import re
import shlex
from typing import Any

import yaml

from tests.dashboards.boards import ROOT

DOC = ROOT / "docs" / "stock-vllm.md"
HEADING = "## 8. On hosts"


def recipe() -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index(HEADING)
    end = text.find("\n## ", start + len(HEADING))
    return text[start:end if end >= 0 else None]


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", recipe(), flags=re.DOTALL)


def commands() -> list[list[str]]:
    """Every command line of the recipe's shell blocks, continuations joined, comments dropped."""
    lines = "\n".join(blocks("sh")).replace("\\\n", " ").splitlines()
    return [words for words in (shlex.split(line, comments=True) for line in lines) if words]


def command(*program: str) -> tuple[dict[str, str], list[str]]:
    """The one command running ``program``: its leading ``VAR=value`` assignments, its words."""
    found = []
    for words in commands():
        assignments = [w for w in words if re.fullmatch(r"[A-Z_]+=.*", w)]
        rest = words[len(assignments):]
        if tuple(rest[:len(program)]) == program:
            found.append((dict(w.split("=", 1) for w in assignments), rest))
    assert len(found) == 1, f"{DOC}: expected one `{' '.join(program)}` command, got {found}"
    return found[0]


def snippet(key: str) -> dict[str, Any]:
    """The recipe's YAML block holding ``key``."""
    (found,) = [data for data in (yaml.safe_load(block) for block in blocks("yaml"))
                if key in data]
    assert isinstance(found, dict)
    return found
