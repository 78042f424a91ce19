"""A wheel that holds only the project's metadata, for a GPU machine without network.

vLLM finds Governor's plugins (``governor_batching``, ``governor_admin``) through the project's
distribution metadata, in every process it starts, while the code itself comes from the checkout
on ``PYTHONPATH``. Installing this wheel there (``pip install --no-deps --target SITE``) writes the
``.dist-info`` with the entry points and nothing else, so the checkout is never shadowed by an
older copy of its own code::

    python -m lab.gpu.metadata_wheel --out DIR      # → DIR/governor_slo-<version>-py3-none-any.whl
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def metadata_only(wheel: Path, out: Path) -> Path:
    """A copy of ``wheel`` without its packages: the ``.dist-info`` folder alone."""
    target = out / wheel.name
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(target, "w") as copy:
        kept = [n for n in source.namelist() if ".dist-info/" in n and not n.endswith("RECORD")]
        record = next(n for n in source.namelist() if n.endswith(".dist-info/RECORD"))
        lines = []
        for name in kept:
            data = source.read(name)
            copy.writestr(name, data)
            lines.append(_record_line(name, data))
        copy.writestr(record, "\n".join([*lines, f"{record},,"]) + "\n")
    return target


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.gpu.metadata_wheel",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / "source"
        shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".gpukit", "lab"))
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                        "-q", "-w", scratch, str(source)], check=True)
        (wheel,) = Path(scratch).glob("governor_slo-*.whl")
        print(metadata_only(wheel, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
