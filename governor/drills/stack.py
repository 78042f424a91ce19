"""The stack a drill runs on: ``governor up``'s, on ports of its own, from a clean run directory.

The children are ``governor up``'s (the service on the simulated engine, the fake-GPU exporter
following it, the controller, Prometheus and Alertmanager with the generated rules at the fast
intervals), on six consecutive ports from ``port_base``, so a drill never meets a stack already
running. A drill adds options to its service (``serve``), exposes dcgm-exporter's names from
the fake GPUs where the spec reads dcgm-exporter, and sets faults on the simulated GPU through
the service's admin API::

    stack = Stack(StackConfig(run_dir=Path(".run/drill"), slo=Path("slo.yaml"), port_base=28100))
    with stack.running():
        stack.set_faults({"clock_ratio": 0.5, "clock_reasons": ["hw_thermal"]})
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from governor.common.ports import taken_ports
from governor.common.process import Child, running
from governor.contracts.endpoints import LOCAL_HOST
from governor.contracts.simdevice import FAULTS_PATH
from governor.up import Ports, UpConfig, UpError, children, prepare

# What a drill leaves in its run directory and clears before the next one: Prometheus's data
# (the verdict's long window would remember the last drill), the controller's state (it would
# start from the last drill's limits), the logs.
_RUN_STATE: Final = ("prometheus-data", "alertmanager-data", "controller", "logs")
_FOLLOW_FLAG: Final = "--follow"
_NAMES_FLAG: Final = "--names"
_DCGM_NAMES: Final = "dcgm"
START_SECONDS: Final = 120.0


class StackError(Exception):
    """The stack cannot be started as asked (a port in use, a bad spec, a missing binary)."""


@dataclass(frozen=True, slots=True)
class StackConfig:
    run_dir: Path
    slo: Path
    port_base: int
    host: str = LOCAL_HOST
    serve: tuple[str, ...] = ()  # more governor serve options
    dcgm: bool = False  # the fake GPUs expose dcgm-exporter's names

    @property
    def ports(self) -> Ports:
        return ports_from(self.port_base)


def ports_from(base: int) -> Ports:
    """The six ports of a stack, consecutive from ``base``.

    >>> list(vars(ports_from(28100)).values())
    [28100, 28101, 28102, 28103, 28104, 28105]
    """
    names = list(vars(Ports()))
    if not 1024 <= base <= 65535 - len(names) + 1:
        raise StackError(f"port base {base}: the stack's {len(names)} ports must lie in "
                         "1024-65535")
    return Ports(**{name: base + i for i, name in enumerate(names)})


def ports_in_use(host: str, ports: Ports) -> list[tuple[str, int]]:
    """The ports of ``ports`` something already listens on (or may not be bound)."""
    taken = []
    for name, port in vars(ports).items():
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError:
                taken.append((name, port))
    return taken


class Stack:
    """The stack of one drill: where its parts are, how to start it and how to fault it."""

    def __init__(self, config: StackConfig) -> None:
        self.config = config
        self.up = UpConfig(run_dir=config.run_dir, slo=config.slo, host=config.host,
                           ports=config.ports, fast=True)
        self._admin_token_file: Path | None = None

    @property
    def inference_url(self) -> str:
        return self.up.inference_urls()[0]

    def url(self, part: str) -> str:
        return f"http://{self.config.host}:{getattr(self.config.ports, part)}"

    @property
    def logs(self) -> Path:
        return self.config.run_dir.resolve() / "logs"

    @property
    def audit_log(self) -> Path:
        return self.config.run_dir.resolve() / "controller" / "audit.jsonl"

    def check_ports(self) -> None:
        """Refuse to start while a port is taken, naming each and what holds it (a stack
        already up there would answer this one's health probes)."""
        taken = taken_ports(self.config.host, vars(self.config.ports))
        if taken:
            listed = "; ".join(str(t) for t in taken)
            raise StackError(f"already in use: {listed}; "
                             "choose another --port-base")

    def children(self) -> list[Child]:
        """``governor up``'s children, the service and the exporter with the drill's options,
        their configuration rendered into a run directory cleared of a former drill's state."""
        _clean(self.config.run_dir)
        try:
            tokens, params = prepare(self.up)
            made = children(self.up, tokens, params)
        except UpError as exc:
            raise StackError(str(exc)) from None
        self._admin_token_file = Path(tokens["admin_token"])
        for child in made:
            if child.name == "inference":
                child.argv = [*child.argv, *self.config.serve]
            elif child.name == "exporter":
                child.argv = [*child.argv, *self._exporter_flags(child.argv)]
        return made

    def _exporter_flags(self, argv: Sequence[str]) -> list[str]:
        flags = [] if _FOLLOW_FLAG in argv else [_FOLLOW_FLAG, self.inference_url]
        if self.config.dcgm and _NAMES_FLAG not in argv:
            flags += [_NAMES_FLAG, _DCGM_NAMES]
        return flags

    @contextlib.contextmanager
    def running(self, on_ready: Callable[[Child, float], None] = lambda child, seconds: None,
                should_stop: Callable[[], bool] = lambda: False) -> Iterator[list[Child]]:
        """Start every part, each healthy before the next; stop them all on the way out."""
        self.check_ports()
        made = self.children()
        with running(made, START_SECONDS, on_ready, should_stop):
            yield made

    def load(self, drill: str, phase: str, seed: int, scale: float = 1.0) -> Child:
        """The load generator of ``drill``'s ``phase`` (not started)."""
        argv = [sys.executable, "-m", "governor.drills.loadgen", "--url", self.inference_url,
                "--drill", drill, "--phase", phase, "--seed", str(seed), "--scale", str(scale)]
        return Child(f"load-{phase}", argv, None, self.logs / f"load-{phase}.log", grace_seconds=5)

    def set_faults(self, faults: Mapping[str, object]) -> None:
        """Replace the faults of the simulated GPU (``{}`` heals it); :class:`StackError` when
        the service refuses them."""
        if self._admin_token_file is None:
            raise StackError("the stack was never started")
        token = self._admin_token_file.read_text().strip()
        request = urllib.request.Request(  # noqa: S310 (our own service, on http)
            self.inference_url + FAULTS_PATH, data=json.dumps(dict(faults)).encode(),
            method="PUT", headers={"Authorization": f"Bearer {token}",
                                   "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10):  # noqa: S310 (our own service)
                pass
        except urllib.error.HTTPError as exc:
            raise StackError(f"PUT {FAULTS_PATH} answered {exc.code}: "
                             f"{exc.read(400).decode(errors='replace')}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise StackError(f"PUT {FAULTS_PATH} failed: {exc}") from None


def _clean(run_dir: Path) -> None:
    for name in _RUN_STATE:
        path = run_dir / name
        if path.is_dir():
            shutil.rmtree(path)
