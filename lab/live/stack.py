"""``start`` and ``stop``: the service, Alertmanager and Prometheus, in sessions of their own.

``start`` launches the service (``governor serve``, or with ``--server vllm`` stock ``vllm serve``
with Governor's admin middleware), Alertmanager and Prometheus (Debian's
binaries, or ``--prometheus-bin``/``--alertmanager-bin``), so they outlive the command that started
them, with the configuration ``governor generate`` renders at the short intervals ``governor up``
uses; ``stop`` ends them. :func:`wait_ready` is how every later step waits for them.

``--replicas N`` starts N servers side by side, replica ``i`` on GPU ``i``
(``CUDA_VISIBLE_DEVICES=i``) at the inference port plus ``i``, all scraped by the one Prometheus;
the runs split the arrivals between them (:func:`lab.live.replay.replica_of`).

The GPU exporter (the part ``exporter``) reads the real GPUs through NVML beside vLLM, or shows
fake GPUs following the simulated engines (each replica on a fake GPU of its own, as ``governor
up`` runs them). It starts once the engines answer: vLLM allocates its memory while it starts,
and an exporter watching that would show the verdict's rules a GPU whose memory grew by tens of
GiB, which they read as another process on it for the length of their long window.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from governor.admission.deadline import DEFAULT_CALIBRATION_QUANTILE
from governor.alerts.alertmanager import alertmanager_args
from governor.alerts.prometheus_config import prometheus_args
from governor.alerts.render import ALERTMANAGER_CONFIG, PROMETHEUS_CONFIG, render_all, write_all
from governor.common.commands import Exporter, Serve, VllmServe, vllm_flags
from governor.common.process import Child, http_ok
from governor.common.secrets import write_private
from governor.contracts.endpoints import HEALTH_PATH, LOCAL_HOST
from governor.contracts.simdevice import fake_gpu_uuid
from governor.generation.catalog import load_checked_spec
from governor.generation.params import Endpoints, RenderParams
from governor.slo.model import SloSpec
from governor.vllm import MIDDLEWARE
from governor.vllm.admin import TOKEN_FILE_ENV
from governor.vllm.gate import SPEC_ENV as GATE_SPEC_ENV
from lab.live.state import MAX_REPLICAS, SERVED, State, replica_name

ENGINE_START_SECONDS = 600.0
STOCK_SERVER = "vllm serve (stock)"  # the environment's "server" when start --server vllm
GATE = "deadline gate"  # the environment's "admission" when start --admission
MONITORING_START_SECONDS = 60.0
DEBIAN_TEMPLATES = Path("/usr/share/prometheus/alertmanager")
READY_PATH = "/-/ready"  # Prometheus's and Alertmanager's own readiness endpoint


def _environment(engine: str) -> dict[str, str]:
    found = {"python": platform.python_version(), "engine": engine}
    probes = {"vllm": "import vllm; print(vllm.__version__)",
              "torch": "import torch; print(torch.__version__, torch.version.cuda)"}
    for name, code in probes.items():
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 timeout=120, check=False).stdout.strip()
            if out:
                found[name] = out.splitlines()[-1]
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=30, check=False).stdout.strip()
        if gpu:
            found["gpu"] = gpu.splitlines()[0]
    return found


def _service_argv(args: argparse.Namespace, model: str, token: Path, port: int,
                  index: int = 0) -> list[str]:
    if args.server == "vllm":
        # Stock vLLM with Governor's admin middleware; the token comes from the environment.
        return VllmServe(model=model, host=LOCAL_HOST, port=port,
                         served_model_name=SERVED, middleware=(MIDDLEWARE,),
                         max_num_seqs=args.max_num_seqs,
                         max_num_batched_tokens=args.max_num_batched_tokens,
                         max_model_len=args.max_model_len,
                         extra=vllm_flags(args.engine_arg)).python()
    serve = Serve(engine=args.engine, host=LOCAL_HOST, port=port,
                  served_model_name=SERVED, admin_token_file=str(token),
                  max_num_seqs=args.max_num_seqs,
                  max_num_batched_tokens=args.max_num_batched_tokens, min_num_seqs=1,
                  min_num_batched_tokens=256, max_in_flight=2048, max_queue=8192,
                  slo=str(args.slo.resolve()) if args.classes or args.admission else None,
                  deadlines=args.admission)
    if args.engine != "vllm":
        # Replica i runs on fake GPU i, which the exporter follows.
        return replace(serve, preset=args.preset, gpu_uuid=fake_gpu_uuid(index)).python()
    return replace(serve, model=model, max_model_len=args.max_model_len,
                   max_tokens_limit=args.max_model_len,
                   engine_arg=tuple(args.engine_arg)).python()


def _replicas(args: argparse.Namespace, state: State, model: str, token: Path,
              logs: Path) -> list[Child]:
    """One server per replica; with several, each sees only its own GPU."""
    children = []
    for index in range(state.replicas):
        env = {**os.environ, TOKEN_FILE_ENV: str(token)}
        if args.admission and args.server == "vllm":
            # The middleware's deadline gate, from the spec's first-token targets.
            env[GATE_SPEC_ENV] = str(args.slo.resolve())
        if state.replicas > 1:
            env["CUDA_VISIBLE_DEVICES"] = str(index)
        name = replica_name(index, state.replicas)
        children.append(Child(name, _service_argv(args, model, token,
                                                  state.port("inference", index), index),
                              f"http://{state.address('inference', index)}{HEALTH_PATH}",
                              logs / f"{name}.log", env=env))
    return children


def exporter_child(args: argparse.Namespace, state: State, logs: Path) -> Child:
    """The real GPUs through NVML beside vLLM; beside the simulated engine, one fake GPU per
    replica, following it."""
    sim = args.engine != "vllm"
    argv = Exporter(fake_gpus=state.replicas if sim else None,
                    follow=",".join(state.inference_urls()) if sim else None,
                    host=LOCAL_HOST, port=state.port("exporter")).python()
    return Child("exporter", argv, state.url("exporter") + HEALTH_PATH, logs / "exporter.log")


def spec_mismatch(server: str, spec: SloSpec, path: Path) -> str | None:
    """Why a spec does not fit the server it watches (None where it does): the rules ``governor
    generate`` renders read ``governor serve``'s series unless the spec says ``kubernetes.server:
    vllm``, and stock ``vllm serve`` has none of them (its first-token causes would all read
    ``unknown``)."""
    stock = server in {"vllm", STOCK_SERVER}
    if stock == spec.stock_vllm:
        return None
    if stock:
        return (f"{path} does not say kubernetes.server: vllm, so its rules read governor "
                f"serve's series, which stock vllm serve does not export: use a stock-vLLM spec "
                f"(examples/stock-vllm/slo.yaml)")
    return (f"{path} says kubernetes.server: vllm, so its rules read vLLM's series alone, "
            f"while governor serve runs here: use a spec without it (slo.yaml)")


def start(args: argparse.Namespace) -> int:
    folder: Path = args.state
    folder.mkdir(parents=True, exist_ok=True)
    if args.server == "vllm" and args.engine != "vllm":
        raise SystemExit("--server vllm runs stock vllm serve: it needs --engine vllm")
    if args.server == "vllm" and args.classes:
        raise SystemExit("--classes applies the spec's request classes in governor serve; "
                         "stock vllm serve has none")
    if not 1 <= args.replicas <= MAX_REPLICAS:
        raise SystemExit(f"--replicas must be between 1 and {MAX_REPLICAS}: got {args.replicas}")
    model = args.preset
    if args.engine == "vllm":
        from lab.gpu.vllm_proof import full_vocab_model

        model = str(full_vocab_model(Path(args.model), folder / "model"))
        if args.server == "vllm":
            with_chat_template(Path(model))
    tokens = {name: folder / name for name in ("admin_token", "controller_token")}
    for path in tokens.values():
        if not path.exists():
            write_private(path, os.urandom(24).hex() + "\n")
    known = (folder / "state.json").exists()
    environment = State.load(folder).environment if known else _environment(args.engine)
    environment["server"] = STOCK_SERVER if args.server == "vllm" else "governor serve"
    environment["replicas"] = str(args.replicas)
    environment["engine_args"] = " ".join(args.engine_arg)
    # governor serve's deadlines are its classes' (--admission applies them too).
    classes = args.classes or (args.admission and args.server == "governor")
    environment["classes"] = "the spec's" if classes else "none"
    environment["admission"] = GATE if args.admission else "none"
    # Both servers' default calibration: the forecast replays the gate the run had.
    environment["deadline_calibration"] = (f"{DEFAULT_CALIBRATION_QUANTILE:g}" if args.admission
                                           else "none")
    state = State(folder, args.engine, model, args.slo.resolve(),
                  {"max_num_seqs": args.max_num_seqs,
                   "max_num_batched_tokens": args.max_num_batched_tokens}, environment,
                  args.max_model_len, args.replicas, args.port_offset)
    spec = load_checked_spec(args.slo)
    mismatch = spec_mismatch(args.server, spec, args.slo)
    if mismatch is not None:  # the gate and the controller still work; the verdict does not
        print(f"warning: {mismatch}", file=sys.stderr, flush=True)
    params = RenderParams.fast(str(tokens["controller_token"]))
    exporters = (state.address("exporter"),) if "exporter" in args.parts else ()
    endpoints = Endpoints(
        inference=tuple(state.address("inference", i) for i in range(state.replicas)),
        exporter=exporters, controller=(state.address("controller"),),
        alertmanager=(state.address("alertmanager"),),
        probe=())  # no synthetic probe runs here: a job for one would only be down
    deploy = folder / "deploy"
    write_all(render_all(spec, endpoints, params, source=str(args.slo)), deploy)
    logs = folder / "logs"
    children = [
        *_replicas(args, state, model, tokens["admin_token"], logs),
        Child("alertmanager", [args.alertmanager_bin, *alertmanager_args(
            config_file=str(deploy / ALERTMANAGER_CONFIG),
            storage_path=str(folder / "alertmanager-data"),
            listen_address=state.address("alertmanager"))],
              state.url("alertmanager") + READY_PATH, logs / "alertmanager.log"),
        Child("prometheus", [args.prometheus_bin, *prometheus_args(
            spec, params, config_file=str(deploy / PROMETHEUS_CONFIG),
            storage_path=str(folder / "prometheus-data"),
            listen_address=state.address("prometheus"))],
              state.url("prometheus") + READY_PATH, logs / "prometheus.log"),
    ]
    children = [c for c in children if _part(c.name) in args.parts]
    later = [exporter_child(args, state, logs)] if "exporter" in args.parts else []
    if args.alertmanager_templates is not None:
        install_templates(args.alertmanager_templates)
    if args.no_wait:  # nobody waits for the engines: everything starts now
        children, later = children + later, []
    _launch(children, folder)
    state.save()
    print(json.dumps({"started": [c.name for c in children], "state": str(folder),
                      "environment": state.environment}), flush=True)
    if args.no_wait:
        return 0
    for child in children:
        seconds = child.wait_healthy(ENGINE_START_SECONDS)
        print(f"{child.name} healthy after {seconds:.0f} s", flush=True)
    _launch(later, folder)
    for child in later:
        seconds = child.wait_healthy(MONITORING_START_SECONDS)
        print(f"{child.name} started after the engines, healthy after {seconds:.0f} s",
              flush=True)
    return 0


# The messages' contents, one per line: what a model built offline without a template is sent.
PLAIN_CHAT_TEMPLATE = ("{% for message in messages %}{{ message['content'] }}\n{% endfor %}"
                       "{% if add_generation_prompt %}{% endif %}")


def with_chat_template(model: Path) -> None:
    """Stock ``vllm serve`` answers a chat 400 for a model whose tokenizer has no chat template
    (``governor serve`` renders one itself): give the model's copy a plain one where it has
    none, so that the drills' chats reach the engine there too."""
    path = model / "tokenizer_config.json"
    config = json.loads(path.read_text())
    if not config.get("chat_template"):
        config["chat_template"] = PLAIN_CHAT_TEMPLATE
        path.write_text(json.dumps(config, indent=1))


def _launch(children: list[Child], folder: Path) -> None:
    for child in children:
        child.start()  # a session of its own: it outlives this command
        (folder / f"{child.name}.pid").write_text(str(child.pid))


def _part(name: str) -> str:
    """``inference-1`` is a replica of the part ``inference``."""
    return name.split("-", 1)[0]


def stop(args: argparse.Namespace) -> int:
    for pid_file in sorted(args.state.glob("*.pid")):
        with contextlib.suppress(ProcessLookupError, ValueError, PermissionError):
            os.killpg(int(pid_file.read_text()), signal.SIGTERM)
        pid_file.unlink()
    return 0


def wait_ready(state: State, limit_seconds: float = ENGINE_START_SECONDS) -> float:
    """Block until the service, Prometheus and Alertmanager answer; the seconds it took.

    Fails at once when one of them has exited, and after a minute when Prometheus or
    Alertmanager still does not answer (only an engine's start takes minutes), with the end of
    the part's log: a device session is too short to wait out a part that will never come up.
    """
    started = time.monotonic()
    parts = {replica_name(i, state.replicas): (url + HEALTH_PATH, limit_seconds)
             for i, url in enumerate(state.inference_urls())}
    if (state.folder / "exporter.pid").exists():
        parts["exporter"] = (state.url("exporter") + HEALTH_PATH, MONITORING_START_SECONDS)
    parts["prometheus"] = (state.url("prometheus") + READY_PATH, MONITORING_START_SECONDS)
    parts["alertmanager"] = (state.url("alertmanager") + READY_PATH, MONITORING_START_SECONDS)
    waiting = dict(parts)
    while waiting:
        for name, (url, limit) in list(waiting.items()):
            if http_ok(url):
                del waiting[name]
            elif not _alive(state.folder / f"{name}.pid"):
                raise RuntimeError(f"{name} is not running; its log ends:\n{_tail(state, name)}")
            elif time.monotonic() - started > limit:
                raise RuntimeError(f"{name} did not answer {url} within {limit:.0f} s; its log "
                                   f"ends:\n{_tail(state, name)}")
        if waiting:
            time.sleep(1.0)
    return time.monotonic() - started


def _alive(pid_file: Path) -> bool:
    try:
        os.kill(int(pid_file.read_text()), 0)
    except (OSError, ValueError):
        return False
    return True


def _tail(state: State, name: str, lines: int = 20) -> str:
    log = state.folder / "logs" / f"{name}.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    return "\n".join(text.splitlines()[-lines:])


def install_templates(source: Path, target: Path = DEBIAN_TEMPLATES) -> None:
    """Debian's Alertmanager binary loads its notification templates from a fixed folder and
    answers nothing without them; a machine without the Debian package gets copies."""
    target.mkdir(parents=True, exist_ok=True)
    for template in sorted(source.glob("*.tmpl")):
        if not (target / template.name).exists():
            shutil.copy(template, target / template.name)

