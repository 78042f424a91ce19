"""The controller benchmark on a live stack: a real engine, Prometheus, Alertmanager, controller.

``governor bench controller`` scores policies on the simulator in virtual time. This runs the same
workload and the same scoring against real processes over HTTP, on a GPU machine with vLLM (or on
any machine with the simulated engine in real time), in steps that each fit a short session::

    python -m lab.live.loop start --engine vllm --model DIR --state /tmp/live
    python -m lab.live.loop table --state /tmp/live --out OUT        # vllm bench serve
    python -m lab.live.loop runs --state /tmp/live --out OUT \\
        --policies default,static:3072/1024,controller --minutes 4
    python -m lab.live.loop stop --state /tmp/live
    python -m lab.live.loop report OUT --out lab/results   # here, any time

``start`` launches the service (``governor serve``), Alertmanager and Prometheus (Debian's
binaries, or ``--prometheus-bin``/``--alertmanager-bin``) in sessions of their own, so they outlive
the command that started them, with the configuration ``governor generate`` renders at the short
intervals ``governor up`` uses. ``table`` runs vLLM's own benchmark client in closed loop.
``runs`` replays one workload once per policy, never restarting the engine: vLLM's default limits,
static limits set live through ``PUT /admin/batching``, and ``governor controller`` (started fresh
for its run, stopped after). Each run's file holds every request's streamed-event times, the
controller's audit lines and what Prometheus saw, so ``report`` can score it offline with exactly
the definitions of ``governor bench controller``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from governor.alerts.alertmanager import alertmanager_args
from governor.alerts.prometheus import prometheus_args
from governor.alerts.render import ALERTMANAGER_CONFIG, PROMETHEUS_CONFIG, render_all, write_all
from governor.bench.controller.workload import Workload
from governor.common.cli import EnvArgumentParser, positive_int
from governor.common.process import Child, http_ok
from governor.common.secrets import write_private
from governor.contracts.metrics import vllm
from governor.controller.slo import objectives
from governor.render.catalog import load_checked_spec
from governor.render.params import Endpoints, RenderParams
from governor.slo.spec import camel_case
from lab.live.replay import SIM_WORDS, PromptBook, replay, words_of

SERVED = "llama-3-8b"
LOOPBACK = "127.0.0.1"
PORTS = {"inference": 8000, "controller": 9500, "prometheus": 9090, "alertmanager": 9093}
CONTROLLER_RESYNC_SECONDS = 10
ENGINE_START_SECONDS = 600.0
DEBIAN_TEMPLATES = Path("/usr/share/prometheus/alertmanager")


@dataclass(frozen=True)
class State:
    """What ``start`` left running, for the later steps (kept as JSON in the state folder)."""

    folder: Path
    engine: str
    model: str  # the model directory the service and the benchmark client tokenize with
    slo: Path
    ceiling: dict[str, int]
    environment: dict[str, str]

    def url(self, name: str) -> str:
        return f"http://{LOOPBACK}:{PORTS[name]}"

    def save(self) -> None:
        data = {"engine": self.engine, "model": self.model, "slo": str(self.slo),
                "ceiling": self.ceiling, "environment": self.environment}
        (self.folder / "state.json").write_text(json.dumps(data, indent=1))

    @classmethod
    def load(cls, folder: Path) -> State:
        data = json.loads((folder / "state.json").read_text())
        return cls(folder, data["engine"], data["model"], Path(data["slo"]), data["ceiling"],
                   data["environment"])

    @property
    def admin_token(self) -> str:
        return (self.folder / "admin_token").read_text().strip()


# ---- start -----------------------------------------------------------------------------------

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


def _service_argv(args: argparse.Namespace, model: str, token: Path) -> list[str]:
    argv = [sys.executable, "-m", "governor", "serve", "--engine", args.engine,
            "--host", LOOPBACK, "--port", str(PORTS["inference"]),
            "--served-model-name", SERVED, "--admin-token-file", str(token),
            "--max-num-seqs", str(args.max_num_seqs),
            "--max-num-batched-tokens", str(args.max_num_batched_tokens),
            "--min-num-seqs", "1", "--min-num-batched-tokens", "256",
            "--max-in-flight", "2048", "--max-queue", "8192"]
    if args.engine == "vllm":
        argv += ["--model", model, "--max-model-len", str(args.max_model_len),
                 "--max-tokens-limit", str(args.max_model_len)]
        for pair in args.engine_arg:
            argv += ["--engine-arg", pair]
    else:
        argv += ["--preset", args.preset]
    return argv


def start(args: argparse.Namespace) -> int:
    folder: Path = args.state
    folder.mkdir(parents=True, exist_ok=True)
    model = args.preset
    if args.engine == "vllm":
        from lab.gpu.vllm_proof import full_vocab_model

        model = str(full_vocab_model(Path(args.model), folder / "model"))
    tokens = {name: folder / name for name in ("admin_token", "controller_token")}
    for path in tokens.values():
        if not path.exists():
            write_private(path, os.urandom(24).hex() + "\n")
    spec = load_checked_spec(args.slo)
    params = RenderParams.fast(str(tokens["controller_token"]))
    endpoints = Endpoints((f"{LOOPBACK}:{PORTS['inference']}",), (),
                          (f"{LOOPBACK}:{PORTS['controller']}",),
                          (f"{LOOPBACK}:{PORTS['alertmanager']}",))
    deploy = folder / "deploy"
    write_all(render_all(spec, endpoints, params, source=str(args.slo)), deploy)
    logs = folder / "logs"
    children = [
        Child("inference", _service_argv(args, model, tokens["admin_token"]),
              f"http://{LOOPBACK}:{PORTS['inference']}/health", logs / "inference.log"),
        Child("alertmanager", [args.alertmanager_bin, *alertmanager_args(
            config_file=str(deploy / ALERTMANAGER_CONFIG),
            storage_path=str(folder / "alertmanager-data"),
            listen_address=f"{LOOPBACK}:{PORTS['alertmanager']}")],
              f"http://{LOOPBACK}:{PORTS['alertmanager']}/-/ready", logs / "alertmanager.log"),
        Child("prometheus", [args.prometheus_bin, *prometheus_args(
            spec, params, config_file=str(deploy / PROMETHEUS_CONFIG),
            storage_path=str(folder / "prometheus-data"),
            listen_address=f"{LOOPBACK}:{PORTS['prometheus']}")],
              f"http://{LOOPBACK}:{PORTS['prometheus']}/-/ready", logs / "prometheus.log"),
    ]
    children = [c for c in children if c.name in args.parts]
    if args.alertmanager_templates is not None:
        install_templates(args.alertmanager_templates)
    for child in children:
        child.start()  # a session of its own: it outlives this command
        (folder / f"{child.name}.pid").write_text(str(child.pid))
    known = (folder / "state.json").exists()
    environment = State.load(folder).environment if known else _environment(args.engine)
    state = State(folder, args.engine, model, args.slo.resolve(),
                  {"max_num_seqs": args.max_num_seqs,
                   "max_num_batched_tokens": args.max_num_batched_tokens}, environment)
    state.save()
    print(json.dumps({"started": [c.name for c in children], "state": str(folder),
                      "environment": state.environment}), flush=True)
    if args.no_wait:
        return 0
    for child in children:
        seconds = child.wait_healthy(ENGINE_START_SECONDS)
        print(f"{child.name} healthy after {seconds:.0f} s", flush=True)
    return 0


def stop(args: argparse.Namespace) -> int:
    import signal

    for pid_file in sorted(args.state.glob("*.pid")):
        with contextlib.suppress(ProcessLookupError, ValueError, PermissionError):
            os.killpg(int(pid_file.read_text()), signal.SIGTERM)
        pid_file.unlink()
    return 0


MONITORING_START_SECONDS = 60.0


def wait_ready(state: State, limit_seconds: float = ENGINE_START_SECONDS) -> float:
    """Block until the service, Prometheus and Alertmanager answer; the seconds it took.

    Fails at once when one of them has exited, and after a minute when Prometheus or
    Alertmanager still does not answer (only an engine's start takes minutes), with the end of
    the part's log: a device session is too short to wait out a part that will never come up.
    """
    started = time.monotonic()
    parts = {"inference": (state.url("inference") + "/health", limit_seconds),
             "prometheus": (state.url("prometheus") + "/-/ready", MONITORING_START_SECONDS),
             "alertmanager": (state.url("alertmanager") + "/-/ready", MONITORING_START_SECONDS)}
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


# ---- HTTP helpers ------------------------------------------------------------------------------

def _request(url: str, *, method: str = "GET", body: dict[str, Any] | None = None,
             token: str | None = None, timeout: float = 30.0) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 (our URL)
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
        return json.loads(response.read() or b"null")


def set_limits(state: State, limits: dict[str, int]) -> dict[str, Any]:
    answer: dict[str, Any] = _request(state.url("inference") + "/admin/batching", method="PUT",
                                      body=limits, token=state.admin_token)
    return answer


def busy(state: State) -> float:
    """Requests running or waiting in the engine, from the service's own /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(state.url("inference") + "/metrics", timeout=10) as response:  # noqa: S310
        text = response.read().decode()
    total = 0.0
    for family in text_string_to_metric_families(text):
        if family.name in (vllm.NUM_REQUESTS_RUNNING.name, vllm.NUM_REQUESTS_WAITING.name):
            total += sum(s.value for s in family.samples)
    return total


def wait_idle(state: State, limit_seconds: float = 180.0) -> None:
    deadline = time.monotonic() + limit_seconds
    while busy(state) > 0:
        if time.monotonic() > deadline:
            raise RuntimeError("the engine did not drain")
        time.sleep(1.0)


def prometheus_range(state: State, expr: str, start: float, end: float,
                     step: float) -> list[dict[str, Any]]:
    query = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    answer = _request(f"{state.url('prometheus')}/api/v1/query_range?{query}")
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


# ---- table: vLLM's own benchmark client in closed loop ---------------------------------------

VLLM_BENCH = (
    "import sys\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "parser = FlexibleArgumentParser()\n"
    "add_cli_args(parser)\n"
    "main(parser.parse_args(sys.argv[1:]))\n"
)


def table(args: argparse.Namespace) -> int:
    state = State.load(args.state)
    print(f"ready after {wait_ready(state):.0f} s", flush=True)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    set_limits(state, {"max_num_seqs": args.max_num_seqs,
                       "max_num_batched_tokens": args.max_num_batched_tokens})
    rows = []
    try:
        for concurrency in args.concurrency:
            wait_idle(state)
            name = f"closed-loop-c{concurrency}.json"
            argv = [sys.executable, "-c", VLLM_BENCH, "--backend", "vllm",
                    "--base-url", state.url("inference"), "--model", SERVED,
                    "--tokenizer", state.model, "--dataset-name", "random",
                    "--random-input-len", str(args.input_len),
                    "--random-output-len", str(args.output_len), "--random-range-ratio", "0",
                    "--ignore-eos", "--max-concurrency", str(concurrency),
                    "--num-prompts", str(concurrency * args.num_prompts_per_stream),
                    "--request-rate", "inf", "--percentile-metrics", "ttft,tpot,itl,e2el",
                    "--metric-percentiles", "50,99", "--save-result", "--save-detailed",
                    "--result-dir", str(out), "--result-filename", name, "--seed", str(args.seed)]
            started = time.monotonic()
            subprocess.run(argv, check=True, timeout=args.timeout)
            result = json.loads((out / name).read_text())
            from lab.calibration.closed_loop import from_vllm_bench

            row = from_vllm_bench(result).as_dict()
            rows.append(row)
            print(json.dumps({**row, "wall_seconds": round(time.monotonic() - started, 1)}),
                  flush=True)
    finally:
        set_limits(state, state.ceiling)
    summary = {"workload": {"dataset": "random", "input_len": args.input_len,
                            "output_len": args.output_len, "ignore_eos": True,
                            "num_prompts_per_stream": args.num_prompts_per_stream,
                            "limits": {"max_num_seqs": args.max_num_seqs,
                                       "max_num_batched_tokens": args.max_num_batched_tokens}},
               "environment": state.environment, "rows": rows}
    (out / "closed-loop.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 0


# ---- runs: one workload, one policy at a time, the engine never restarted ---------------------

@dataclass(frozen=True)
class Policy:
    name: str  # "default" | "static" | "controller"
    limits: dict[str, int] | None  # the static limits; None: the ceiling

    @classmethod
    def parse(cls, text: str) -> Policy:
        if text in ("default", "controller"):
            return cls(text, None)
        kind, _, value = text.partition(":")
        budget, _, seqs = value.partition("/")
        if kind != "static" or not budget.isdigit() or not seqs.isdigit():
            raise argparse.ArgumentTypeError(
                f"expected default, controller or static:BUDGET/SEQS, got {text!r}")
        return cls("static", {"max_num_batched_tokens": int(budget), "max_num_seqs": int(seqs)})

    @property
    def label(self) -> str:
        if self.limits is None:
            return self.name
        return f"static {self.limits['max_num_batched_tokens']}/{self.limits['max_num_seqs']}"


def _policies(text: str) -> tuple[Policy, ...]:
    return tuple(Policy.parse(part.strip()) for part in text.split(",") if part.strip())


def _controller(state: State, run_dir: Path) -> Child:
    folder = state.folder
    return Child("controller", [
        sys.executable, "-m", "governor", "controller", "--slo", str(state.slo),
        "--host", LOOPBACK, "--port", str(PORTS["controller"]),
        "--prometheus", state.url("prometheus"), "--targets", state.url("inference"),
        "--scrape-interval", "5s", "--resync", f"{CONTROLLER_RESYNC_SECONDS}s",
        "--admin-token-file", str(folder / "admin_token"),
        "--webhook-token-file", str(folder / "controller_token"),
        "--state-file", str(run_dir / "controller-state.json"),
        "--audit-log", str(run_dir / "audit.jsonl")],
        state.url("controller") + "/health", run_dir / "controller.log")


def _prompts(state: State) -> PromptBook:
    if state.engine != "vllm":
        return PromptBook.from_words(SIM_WORDS)
    vocab = json.loads((Path(state.model) / "tokenizer.json").read_text())["model"]["vocab"]
    return PromptBook.from_words(words_of(vocab))


def _series(state: State, started: float, duration: float) -> dict[str, Any]:
    """What Prometheus saw during the run: the controller's own ITL query, the fast alert, the
    limits in force, the queue."""
    spec = objectives(load_checked_spec(state.slo))
    queries = spec.queries.expressions()
    alert = camel_case(spec.itl_slo_name) + "P99High"
    exprs = {
        "itl_tail": queries["itl_tail_seconds"],
        "ttft_tail": queries["ttft_tail_seconds"],
        "waiting": queries["requests_waiting"],
        "running": queries["requests_running"],
        "alert": f'ALERTS{{alertname="{alert}",alertstate="firing"}}',
        "limit": "governor_batching_limit",
    }
    end = started + duration
    return {name: prometheus_range(state, expr, started, end, CONTROLLER_RESYNC_SECONDS / 2)
            for name, expr in exprs.items()}


def one_run(state: State, policy: Policy, workload: Workload, seed: int, index: int,
            out: Path, rate_scale: float = 1.0) -> Path:
    wait_idle(state)
    set_limits(state, policy.limits or state.ceiling)
    run_dir = state.folder / f"run-{index}"
    run_dir.mkdir(parents=True, exist_ok=True)
    for stale in ("controller-state.json", "audit.jsonl"):  # an aborted attempt's
        (run_dir / stale).unlink(missing_ok=True)
    controller = _controller(state, run_dir) if policy.name == "controller" else None
    if controller is not None:
        controller.start().wait_healthy(60.0)
    arrivals = workload.arrivals(seed)
    started = time.time()
    try:
        traces = asyncio.run(replay(state.url("inference"), SERVED, arrivals, _prompts(state),
                                    seed=seed))
    finally:
        if controller is not None:
            controller.stop()
    time.sleep(6)  # one more scrape and evaluation of the run's end
    audit = []
    if (run_dir / "audit.jsonl").exists():
        audit = [json.loads(line) for line in (run_dir / "audit.jsonl").read_text().splitlines()]
    data = {
        "policy": policy.name, "label": policy.label,
        "limits": policy.limits or state.ceiling, "seed": seed,
        "workload": {"minutes": workload.duration_seconds / 60, "kind": "headline",
                     "rate_scale": rate_scale, "requests": len(arrivals)},
        "started_unix": started, "duration_seconds": workload.duration_seconds,
        "environment": state.environment, "audit": audit,
        "prometheus": _series(state, started, workload.duration_seconds + 10),
        "traces": [t.as_row() for t in traces],
        "prompt_token_errors": sum(1 for t, a in zip(traces, arrivals, strict=True)
                                   if t.prompt_tokens and t.prompt_tokens != a.prompt_tokens),
        "errors": sorted({t.error for t in traces if t.error})[:10],
    }
    path = out / f"run-{index}-{policy.name}.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        json.dump(data, handle)
    finished = sum(t.finished for t in traces)
    print(json.dumps({"run": index, "policy": policy.label, "requests": len(traces),
                      "finished": finished, "changes": len(audit),
                      "prompt_token_errors": data["prompt_token_errors"]}), flush=True)
    return path


def runs(args: argparse.Namespace) -> int:
    state = State.load(args.state)
    print(f"ready after {wait_ready(state):.0f} s", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    workload = Workload.headline(args.minutes)
    if args.rate_scale != 1.0:
        workload = workload.scaled(args.rate_scale)
    try:
        for index, policy in enumerate(args.policies, start=args.first_index):
            one_run(state, policy, workload, args.seed, index, args.out, args.rate_scale)
    finally:
        set_limits(state, state.ceiling)
    return 0


# ---- command line ------------------------------------------------------------------------------

def _ints(text: str) -> tuple[int, ...]:
    values = tuple(int(x) for x in text.split(",") if x.strip())
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    parser = EnvArgumentParser(prog="python -m lab.live.loop",
                               description=__doc__.split("\n\n")[0],
                               env_prefix="GOVERNOR_LIVE_LOOP_")
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("start", help="start the service, Prometheus and Alertmanager")
    p.add_argument("--state", type=Path, required=True)
    p.add_argument("--engine", choices=("vllm", "sim"), default="sim")
    p.add_argument("--model", default=None, help="the vLLM model directory")
    p.add_argument("--preset", default="llama-3-8b@h200", help="the sim engine's preset")
    p.add_argument("--slo", type=Path, default=Path("slo.yaml"))
    p.add_argument("--max-num-seqs", type=positive_int, default=1024)
    p.add_argument("--max-num-batched-tokens", type=positive_int, default=8192)
    p.add_argument("--max-model-len", type=positive_int, default=8192)
    p.add_argument("--engine-arg", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--prometheus-bin", default="prometheus")
    p.add_argument("--alertmanager-bin", default="prometheus-alertmanager")
    p.add_argument("--alertmanager-templates", type=Path, default=None, metavar="DIR",
                   help="copy DIR/*.tmpl where Debian's Alertmanager binary looks for them")
    p.add_argument("--no-wait", action="store_true", help="return once everything is launched")
    p.add_argument("--parts", type=lambda s: tuple(s.split(",")),
                   default=("inference", "alertmanager", "prometheus"),
                   help="which of inference, alertmanager, prometheus to start (a slow engine "
                        "can start in one command and the monitoring in the next)")
    p = commands.add_parser("table", help="vllm bench serve in closed loop at each concurrency")
    p.add_argument("--state", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--concurrency", type=_ints, default=(1, 32, 128, 256))
    p.add_argument("--input-len", type=positive_int, default=512)
    p.add_argument("--output-len", type=positive_int, default=256)
    p.add_argument("--num-prompts-per-stream", type=positive_int, default=4)
    p.add_argument("--max-num-seqs", type=positive_int, default=256)
    p.add_argument("--max-num-batched-tokens", type=positive_int, default=8192)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=300.0)
    p = commands.add_parser("runs", help="replay the workload once per policy")
    p.add_argument("--state", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--policies", type=_policies, default=_policies("default,controller"))
    p.add_argument("--minutes", type=float, default=4.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rate-scale", type=float, default=1.0,
                   help="scale every arrival rate (a rehearsal on a small machine)")
    p.add_argument("--first-index", type=int, default=0, help="number of the first run")
    p = commands.add_parser("stop", help="stop what start launched")
    p.add_argument("--state", type=Path, required=True)
    p = commands.add_parser("report", help="score run files like governor bench controller")
    p.add_argument("results", type=Path, nargs="+", help="folders holding run-*.json.gz")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--window", type=float, default=20.0, help="attainment window (s)")
    p.add_argument("--predict", default="llama-3-8b@h200", metavar="PRESET",
                   help="replay each run on this sim preset for its prediction ('none': skip)")
    p.add_argument("--slo", type=Path, default=Path("slo.yaml"), help="the SLO spec")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "report":
        from lab.live.report import report

        return report(args)
    command = {"start": start, "table": table, "runs": runs, "stop": stop}[args.command]
    result: int = command(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
