"""Generated files on disk: write what changed, find what is stale, say what differs.

Each generator owns some folders of the output tree; a file there that the generator no longer
produces but that carries its "generated" mark is stale and goes (an SLO removed from the spec
must not leave its rules behind), while a hand-made file beside it is left alone. Tables of
owners add up, so one writer serves several generators::

    rules = Artifacts((Owned("prometheus/rules", "*.yml", has_header),))
    artifacts = rules + boards                      # boards: the Grafana generator's table
    artifacts.write_all(files, Path("deploy"))      # → the paths written or deleted
    artifacts.differences(files, Path("deploy"))    # → what `--check` reports
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Owned:
    """Files matching ``pattern`` in ``folder`` (relative to the output root) that
    ``is_generated`` recognises belong to a generator, which may delete them."""

    folder: str
    pattern: str
    is_generated: Callable[[Path], bool]


@dataclass(frozen=True)
class Artifacts:
    owned: tuple[Owned, ...]

    def __add__(self, other: Artifacts) -> Artifacts:
        return Artifacts(self.owned + other.owned)

    def stale_files(self, files: Mapping[str, str], out: Path) -> list[Path]:
        """Generated files under ``out`` that ``files`` no longer contains."""
        found = []
        for owned in self.owned:
            for path in sorted((out / owned.folder).glob(owned.pattern)):
                if path.relative_to(out).as_posix() not in files and owned.is_generated(path):
                    found.append(path)
        return found

    def differences(self, files: Mapping[str, str], out: Path) -> list[str]:
        """Relative paths under ``out`` that differ from ``files`` (missing, changed or stale)."""
        differing = [relative for relative, text in files.items()
                     if not (out / relative).is_file()
                     or (out / relative).read_text(encoding="utf-8") != text]
        return differing + [p.relative_to(out).as_posix() for p in self.stale_files(files, out)]

    def write_all(self, files: Mapping[str, str], out: Path) -> list[Path]:
        """Write what changed and delete stale generated files; returns the paths touched."""
        changed = []
        for relative, text in files.items():
            path = out / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                path.write_text(text, encoding="utf-8")
                changed.append(path)
        for stale in self.stale_files(files, out):
            stale.unlink()
            changed.append(stale)
        return changed
