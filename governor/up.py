"""``governor up``: the whole stack natively, without Docker.

It renders the SLO spec's rules and configuration for localhost into a run directory, then starts
and supervises, in order: the inference service (sim engine by default), the GPU exporter (fake
GPUs unless ``--real-gpus``), the controller, Debian's Alertmanager and Prometheus binaries. It
waits until each answers, prints where everything is, and stops them all on Ctrl-C, on
``--duration`` or when one of them dies. ``--load`` adds a demo workload (chat streams plus long
documents) so the boards, alerts and controller have something to show.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from governor.alerts.alertmanager import alertmanager_args
from governor.alerts.control_rules import fast_tail
from governor.alerts.prometheus_config import prometheus_args
from governor.alerts.render import ALERTMANAGER_CONFIG, PROMETHEUS_CONFIG, render_all, write_all
from governor.common.cli import EnvArgumentParser, parse_duration_seconds, positive_int
from governor.common.commands import Controller, Exporter, Probe, Serve
from governor.common.logs import FORMATS, setup_logging
from governor.common.ports import taken_ports
from governor.common.process import Child, ChildError, first_exited, http_ok, running
from governor.common.secrets import write_private
from governor.contracts.endpoints import (
    ALERTMANAGER,
    CONTROLLER,
    EXPORTER,
    INFERENCE,
    LOCAL_HOST,
    PROBE,
    PROMETHEUS,
)
from governor.contracts.metrics.slo import FAST_ALERT_SUFFIX
from governor.contracts.simdevice import fake_gpu_uuid
from governor.contracts.tokens import (
    ADMIN_TOKEN_ENV,
    ADMIN_TOKEN_FILE_ENV,
    GRAFANA_TOKEN_ENV,
    GRAFANA_TOKEN_FILE_ENV,
    PROBE_TOKEN_ENV,
    PROBE_TOKEN_FILE_ENV,
    WEBHOOK_TOKEN_ENV,
    WEBHOOK_TOKEN_FILE_ENV,
)
from governor.generation.catalog import load_checked_spec
from governor.generation.params import Endpoints, RenderParams
from governor.slo.probe import DEFAULT_TARGET
from governor.slo.spec import LatencySLI, SloSpec, SpecError
from governor.story import Sources, Story, look

ALERTMANAGER_BINARIES = ("prometheus-alertmanager", "alertmanager")
PROMETHEUS_BINARIES = ("prometheus",)
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a command stopped by Ctrl-C
DEMO_RESYNC_SECONDS = 120.0


class UpError(Exception):
    """Something the user can fix (a missing binary, a port in use, a bad slo.yaml)."""


@dataclass(frozen=True)
class Ports:
    inference: int = INFERENCE.port
    exporter: int = EXPORTER.port
    controller: int = CONTROLLER.port
    prometheus: int = PROMETHEUS.port
    alertmanager: int = ALERTMANAGER.port
    probe: int = PROBE.port


@dataclass(frozen=True)
class UpConfig:
    run_dir: Path = Path(".run")
    slo: Path = Path("slo.yaml")
    host: str = LOCAL_HOST
    ports: Ports = field(default_factory=Ports)
    preset: str = "llama-3-8b@h200"
    fake_gpus: int = 2
    real_gpus: bool = False
    # Short intervals (5 s scrapes, 30 s fast-alert window) so a demo reacts within a minute.
    fast: bool = True
    load: bool = False
    duration_seconds: float | None = None
    log_format: str = "text"
    # Inference replicas, on consecutive ports from ports.inference; each is scraped, alerted on
    # and retuned on its own.
    replicas: int = 1
    # The controller's periodic check. Deployed, it runs every 10 s and, with its own 30 s
    # window and its prediction of prefill spikes, cuts before the fast alert could fire (15 s
    # `for` on a 30 s window here, 1 m on 1 m deployed). The demo slows it so that the alert is
    # what wakes the controller, as the README tells it; `--controller-resync 10s` shows the other.
    controller_resync_seconds: float = DEMO_RESYNC_SECONDS

    def inference_ports(self) -> list[int]:
        return [self.ports.inference + i for i in range(self.replicas)]

    def check_ports(self) -> None:
        """Refuse replica ports that run into another component's port or past 65535."""
        others = {self.ports.exporter, self.ports.controller, self.ports.prometheus,
                  self.ports.alertmanager, self.ports.probe}
        ports = self.inference_ports()
        clash = sorted(others.intersection(ports))
        if clash or ports[-1] > 65535:
            raise UpError(f"{self.replicas} inference replicas from port {self.ports.inference} "
                          f"need ports {ports[0]}-{ports[-1]}, which "
                          + (f"include port {clash[0]} of another component" if clash
                             else "run past 65535")
                          + "; choose another --inference-port or fewer --replicas")

    def inference_urls(self) -> list[str]:
        return [f"http://{self.host}:{port}" for port in self.inference_ports()]

    def listening_ports(self) -> dict[str, int]:
        """Every port the stack listens on, by the part that does (``inference-1``, …)."""
        ports = self.inference_ports()
        replicas = {"inference" if len(ports) == 1 else f"inference-{i}": port
                    for i, port in enumerate(ports)}
        return {**replicas, **{name: port for name, port in vars(self.ports).items()
                               if name != "inference"}}

    def check_free(self) -> None:
        """Refuse to start anything while one of the stack's ports is taken (a stack already up
        would answer this one's health probes), naming each port and what holds it."""
        taken = taken_ports(self.host, self.listening_ports())
        if not taken:
            return
        options = sorted({f"--{t.name.split('-')[0]}-port" for t in taken})
        raise UpError(
            f"nothing was started: {len(taken)} of the stack's ports on {self.host} "
            f"{'is' if len(taken) == 1 else 'are'} in use\n"
            + "".join(f"  {t}\n" for t in taken)
            + f"stop what holds {'it' if len(taken) == 1 else 'them'} (another governor up?) "
            f"or choose other ports ({', '.join(options)})")


def find_binary(candidates: Sequence[str]) -> str:
    for name in candidates:
        path = shutil.which(name)
        if path:
            return path
    raise UpError(f"none of {list(candidates)} is on PATH; on Debian: "
                  "apt-get install prometheus prometheus-alertmanager")


def render_params(config: UpConfig) -> RenderParams:
    token_file = str((config.run_dir / "controller_token").resolve())
    if not config.fast:
        return RenderParams(controller_token_file=token_file)
    return RenderParams.fast(token_file)


def load(slo: Path) -> SloSpec:
    try:
        return load_checked_spec(slo)
    except SpecError as exc:
        raise UpError(f"{slo} is invalid:\n  " + "\n  ".join(exc.errors)) from None


def prepare(config: UpConfig) -> tuple[dict[str, str], RenderParams]:
    """Write the rendered configuration and the tokens; returns the tokens and parameters."""
    spec = load(config.slo)
    host, ports = config.host, config.ports
    endpoints = Endpoints(tuple(f"{host}:{port}" for port in config.inference_ports()),
                          (f"{host}:{ports.exporter}",), (f"{host}:{ports.controller}",),
                          (f"{host}:{ports.alertmanager}",), (f"{host}:{ports.probe}",))
    params = render_params(config)
    config.run_dir.mkdir(parents=True, exist_ok=True)
    write_all(render_all(spec, endpoints, params, source=str(config.slo)), config.run_dir)
    tokens = {}
    for name in ("admin_token", "controller_token", "probe_token"):
        path = config.run_dir / name
        if not path.exists():
            write_private(path, secrets.token_urlsafe(32) + "\n")
        tokens[name] = str(path.resolve())
    return tokens, params


def children(config: UpConfig, tokens: dict[str, str], params: RenderParams) -> list[Child]:
    host, ports, run = config.host, config.ports, config.run_dir.resolve()
    logs = run / "logs"
    spec = load(config.slo)

    def child(name: str, argv: list[str], health: str) -> Child:
        return Child(name, argv, health, logs / f"{name}.log",
                     env=child_environment(os.environ, OWN_PREFIX.get(name)))

    def replica(index: int, port: int) -> Child:
        name = "inference" if config.replicas == 1 else f"inference-{index}"
        # Replica i runs on fake GPU i, which the exporter follows.
        gpu = None if config.real_gpus else fake_gpu_uuid(index)
        serve = Serve(engine="sim", preset=config.preset, host=host, port=port,
                      slo=str(config.slo.resolve()), admin_token_file=tokens["admin_token"],
                      probe_token_file=tokens["probe_token"], log_format=config.log_format,
                      seed=index, gpu_uuid=gpu)
        made = child(name, serve.python(), f"http://{host}:{port}/health")
        made.env = child_environment(os.environ, OWN_PREFIX["inference"])  # its own, by kind
        return made

    return [
        *(replica(i, port) for i, port in enumerate(config.inference_ports())),
        child("exporter", Exporter(fake_gpus=None if config.real_gpus else config.fake_gpus,
                                   follow=None if config.real_gpus else ",".join(
                                       config.inference_urls()[:config.fake_gpus]),
                                   host=host, port=ports.exporter,
                                   log_format=config.log_format).python(),
              f"http://{host}:{ports.exporter}/health"),
        child("controller", Controller(
            slo=str(config.slo.resolve()), host=host, port=ports.controller,
            prometheus=f"http://{host}:{ports.prometheus}",
            targets=",".join(config.inference_urls()),
            scrape_interval=f"{params.scrape_interval_seconds}s",
            resync=f"{config.controller_resync_seconds:g}s",
            admin_token_file=tokens["admin_token"], webhook_token_file=tokens["controller_token"],
            state_file=str(run / "controller" / "state.json"),
            audit_log=str(run / "controller" / "audit.jsonl"),
            log_format=config.log_format).python(),
              f"http://{host}:{ports.controller}/health"),
        child("probe", probe_command(config, spec, tokens["probe_token"]).python(),
              f"http://{host}:{ports.probe}/health"),
        child("alertmanager", [find_binary(ALERTMANAGER_BINARIES), *alertmanager_args(
            config_file=str(run / ALERTMANAGER_CONFIG), storage_path=str(run / "alertmanager-data"),
            listen_address=f"{host}:{ports.alertmanager}")],
              f"http://{host}:{ports.alertmanager}/-/ready"),
        child("prometheus", [find_binary(PROMETHEUS_BINARIES), *prometheus_args(
            spec, params, config_file=str(run / PROMETHEUS_CONFIG),
            storage_path=str(run / "prometheus-data"),
            listen_address=f"{host}:{ports.prometheus}")],
              f"http://{host}:{ports.prometheus}/-/ready"),
    ]


def probe_command(config: UpConfig, spec: SloSpec, token_file: str) -> Probe:
    """The probe, its ``inference`` target (the spec's default) moved to this stack's replicas;
    any other target the spec names it probes where the spec says. It marks its requests with
    the token the replicas check."""
    names = {target.name for target in spec.probe.targets}
    moved = (f"{DEFAULT_TARGET}={','.join(config.inference_urls())}",) \
        if DEFAULT_TARGET in names else ()
    return Probe(slo=str(config.slo.resolve()), target=moved, probe_token_file=token_file,
                 host=config.host, port=config.ports.probe, log_format=config.log_format)


# Each child reads its own options' variables; governor up's own and the others' stay behind.
OWN_PREFIX = {"inference": "GOVERNOR_SERVE_", "exporter": "GOVERNOR_EXPORTER_",
              "controller": "GOVERNOR_CONTROLLER_", "probe": "GOVERNOR_PROBE_"}
SHARED = frozenset({ADMIN_TOKEN_ENV, WEBHOOK_TOKEN_ENV, GRAFANA_TOKEN_ENV, PROBE_TOKEN_ENV,
                    ADMIN_TOKEN_FILE_ENV, WEBHOOK_TOKEN_FILE_ENV, GRAFANA_TOKEN_FILE_ENV,
                    PROBE_TOKEN_FILE_ENV})


def child_environment(env: Mapping[str, str], own_prefix: str | None) -> dict[str, str]:
    """The environment of one child: everything but ``GOVERNOR_*`` variables that are neither
    its own nor the shared token variables.

    >>> sorted(child_environment({"PATH": "/bin", "GOVERNOR_PORT": "1",
    ...                           "GOVERNOR_SERVE_MAX_QUEUE": "5", "GOVERNOR_UP_LOAD": "1",
    ...                           "GOVERNOR_ADMIN_TOKEN": "t"}, "GOVERNOR_SERVE_"))
    ['GOVERNOR_ADMIN_TOKEN', 'GOVERNOR_SERVE_MAX_QUEUE', 'PATH']
    """
    return {key: value for key, value in env.items()
            if not key.startswith("GOVERNOR_") or key in SHARED
            or (own_prefix is not None and key.startswith(own_prefix))}


# Prometheus's alerts page: its own builds serve /alerts; Debian's (the one `make up` installs)
# leave the new UI out and serve the classic one under /classic/, where /alerts is a 404.
ALERTS_PAGES = ("/alerts", "/classic/alerts")


def alerts_page(prometheus: str) -> str:
    """The alerts page the Prometheus at ``prometheus`` serves (its base URL if neither does)."""
    return next((prometheus + path for path in ALERTS_PAGES if http_ok(prometheus + path)),
                prometheus)


def summary(config: UpConfig, prometheus_page: str | None = None) -> str:
    h, p = config.host, config.ports
    return "\n".join([
        "governor up: the stack is running",
        *(f"  inference   {url}/v1   (OpenAI API; /metrics, /admin/batching)"
          for url in config.inference_urls()),
        f"  exporter    http://{h}:{p.exporter}/metrics",
        f"  controller  http://{h}:{p.controller}/status",
        f"  probe       http://{h}:{p.probe}/metrics",
        f"  prometheus  {prometheus_page or f'http://{h}:{p.prometheus}'}",
        f"  alertmanager http://{h}:{p.alertmanager}",
        f"  logs, state and tokens in {config.run_dir.resolve()}",
        "Ctrl-C stops everything.",
    ])


class Interrupted:
    """Set by SIGINT/SIGTERM; every wait of ``governor up`` polls it, so Ctrl-C works at once,
    during start-up too."""

    def __init__(self) -> None:
        self.signal: int | None = None

    def __call__(self) -> bool:
        return self.signal is not None

    def install(self) -> None:
        def on_signal(signum: int, _frame: object) -> None:
            self.signal = signum

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)


def _ready(child: Child, seconds: float) -> None:
    print(f"  {child.name:<12} ready in {seconds:4.1f}s", flush=True)


def run(config: UpConfig) -> int:
    """Bring the stack up, supervise it, stop it; 0 at --duration's end, 130 on Ctrl-C."""
    config.check_free()
    tokens, params = prepare(config)
    stack = children(config, tokens, params)
    interrupted = Interrupted()
    interrupted.install()
    print(f"governor up: starting {len(stack)} components (logs in "
          f"{(config.run_dir / 'logs').resolve()}) …", flush=True)
    load: Child | None = None
    try:
        with running(stack, on_ready=_ready, should_stop=interrupted):
            if interrupted():
                return EXIT_INTERRUPTED
            print(summary(config, alerts_page(f"http://{config.host}:{config.ports.prometheus}")),
                  flush=True)
            narrator = None
            if config.load:
                load = _load_child(config).start()
                narrator = Narrator.of(config, params)
            try:
                _supervise(stack, config.duration_seconds, interrupted, narrator)
            finally:
                if load is not None:
                    load.stop()
    finally:
        print("governor up: stopped" + (" (interrupted)" if interrupted() else ""), flush=True)
    return EXIT_INTERRUPTED if interrupted() else 0


class Narrator:
    """Tells the demo's story (:mod:`governor.story`) as the stack shows it, a look a second."""

    def __init__(self, story: Story, sources: Sources) -> None:
        self.story, self.sources = story, sources
        self.started = self.last = time.monotonic()
        self._say(story.opening())

    @classmethod
    def of(cls, config: UpConfig, params: RenderParams) -> Narrator | None:
        spec = load(config.slo)
        slo = next((s for s in spec.slos if s.controller), None)
        if slo is None or not isinstance(slo.sli, LatencySLI):  # no fast alert: no story
            return None
        base, p = f"http://{config.host}", config.ports
        return cls(Story(slo.camel_name + FAST_ALERT_SUFFIX, slo.sli.threshold_seconds),
                   Sources(f"{base}:{p.prometheus}", f"{base}:{p.alertmanager}",
                           f"{base}:{p.controller}", fast_tail(spec, slo, params)))

    def __call__(self) -> None:
        if time.monotonic() - self.last < 1.0:
            return
        self.last = time.monotonic()
        for line in self.story.tell(look(self.sources, self.story.alert)):
            self._say(line)

    def _say(self, line: str) -> None:
        print(f"  {time.monotonic() - self.started:+5.0f}s  {line}", flush=True)


def _supervise(stack: list[Child], duration: float | None, interrupted: Interrupted,
               narrator: Narrator | None = None) -> None:
    deadline = None if duration is None else time.monotonic() + duration
    while not interrupted() and (deadline is None or time.monotonic() < deadline):
        dead = first_exited(stack)
        if dead is not None:
            raise ChildError(dead, f"exited with status {dead.poll()}")
        if narrator is not None:
            narrator()
        time.sleep(0.5)


def _load_child(config: UpConfig) -> Child:
    return Child("load", [sys.executable, "-m", "governor.demo_load", "--url",
                          ",".join(config.inference_urls())], None,
                 (config.run_dir / "logs" / "load.log").resolve())


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="governor up", env_prefix="GOVERNOR_UP_",
                          legacy_prefix="GOVERNOR_", description=__doc__)
    p.add_argument("--run-dir", type=Path, default=Path(".run"),
                   help="where configuration, data, logs and tokens go")
    p.add_argument("--slo", type=Path, default=Path("slo.yaml"), help="the SLO spec")
    p.add_argument("--host", default=LOCAL_HOST, help="address every component listens on")
    p.add_argument("--preset", default="llama-3-8b@h200", help="the sim engine's preset")
    p.add_argument("--fake-gpus", type=positive_int, default=2,
                   help="simulated GPUs for the exporter")
    p.add_argument("--real-gpus", action="store_true", help="export the real GPUs over NVML")
    p.add_argument("--slow", action="store_true",
                   help="production intervals (15 s scrapes, 1 m alert windows)")
    p.add_argument("--load", action="store_true", help="drive a demo workload")
    p.add_argument("--replicas", type=positive_int, default=1,
                   help="inference replicas, on consecutive ports from --inference-port")
    p.add_argument("--log-format", choices=FORMATS, default="text",
                   help="the components' log format (json: one object per line, with trace ids)")
    p.add_argument("--controller-resync", type=parse_duration_seconds,
                   default=DEMO_RESYNC_SECONDS,
                   help="the controller's periodic check (slower than deployed, 10 s, so that "
                        "the fast alert is what wakes it)")
    p.add_argument("--duration", type=parse_duration_seconds, default=None,
                   help="stop after this long (default: until Ctrl-C)")
    for name, default in vars(Ports()).items():
        p.add_argument(f"--{name}-port", type=positive_int, default=default,
                       help=f"{name} port")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    setup_logging("info")
    ports = Ports(**{name: getattr(args, f"{name}_port") for name in vars(Ports())})
    config = UpConfig(run_dir=args.run_dir, slo=args.slo, host=args.host, ports=ports,
                      preset=args.preset, fake_gpus=args.fake_gpus, real_gpus=args.real_gpus,
                      fast=not args.slow, load=args.load, duration_seconds=args.duration,
                      log_format=args.log_format, replicas=args.replicas,
                      controller_resync_seconds=args.controller_resync)
    try:
        config.check_ports()
    except UpError as exc:
        parser.error(str(exc))
    try:
        return run(config)
    except (UpError, ChildError) as exc:
        print(f"governor up: {exc}", file=sys.stderr)
        return 1
