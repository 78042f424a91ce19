"""``runs``: one workload replayed once per policy, the engine never restarted.

vLLM's default limits, static limits set live through ``PUT /admin/batching``, and
``governor controller`` (started fresh for its run, stopped after). Each run's file holds every
request's streamed-event times, the controller's audit lines and what Prometheus saw, so
``report`` can score it offline with exactly the definitions of ``governor bench controller``.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from governor.bench.api import (
    Arrival,
    ReplayOptions,
    Traffic,
    Workload,
    WorkloadError,
    load_traffic,
)
from governor.common.commands import Controller
from governor.common.process import Child
from governor.contracts.admission import MAX_SLACK
from governor.contracts.endpoints import HEALTH_PATH, LOCAL_HOST
from governor.contracts.metrics import controller, service
from governor.controller.slo import objectives
from governor.generation.catalog import load_checked_spec
from governor.slo.spec import camel_case
from lab.live.replay import SIM_WORDS, PromptBook, replay, words_of
from lab.live.stack import wait_ready
from lab.live.state import (
    SERVED,
    State,
    prometheus_range,
    set_admission,
    set_limits,
    wait_idle,
)

CONTROLLER_RESYNC_SECONDS = 10
SCRAPE_SECONDS = 5  # governor up's short scrape interval, which start renders
DRAIN_SECONDS = 120.0  # how long requests may stream after the last arrival before the cut


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


def parse_policies(text: str) -> tuple[Policy, ...]:
    """``default,static:2048/1024,controller`` → the policies, in order."""
    return tuple(Policy.parse(part.strip()) for part in text.split(",") if part.strip())


def controller_child(state: State, run_dir: Path) -> Child:
    """One controller for every replica, each a target of its own, with no tuning options;
    its state and audit log in ``run_dir``."""
    folder = state.folder
    argv = Controller(slo=str(state.slo), host=LOCAL_HOST, port=state.port("controller"),
                      prometheus=state.url("prometheus"),
                      targets=",".join(state.inference_urls()),
                      scrape_interval="5s", resync=f"{CONTROLLER_RESYNC_SECONDS}s",
                      admin_token_file=str(folder / "admin_token"),
                      webhook_token_file=str(folder / "controller_token"),
                      state_file=str(run_dir / "controller-state.json"),
                      audit_log=str(run_dir / "audit.jsonl")).python()
    return Child("controller", argv, state.url("controller") + HEALTH_PATH,
                 run_dir / "controller.log")


def prompt_book(state: State) -> PromptBook:
    """Prompts of exact token lengths for the state's engine: the model's tokenizer's whole
    words for vLLM, the simulated tokenizer's for the sim."""
    if state.engine != "vllm":
        return PromptBook.from_words(SIM_WORDS)
    vocab = json.loads((Path(state.model) / "tokenizer.json").read_text())["model"]["vocab"]
    return PromptBook.from_words(words_of(vocab))


def _series(state: State, started: float, duration: float) -> dict[str, Any]:
    """What Prometheus saw during the run: the controller's own ITL query, the fast alert, the
    limits in force, the queue; one series per replica (and per data-parallel rank where the
    engine's series name it)."""
    spec = objectives(load_checked_spec(state.slo))
    queries = spec.queries.expressions()
    alert = camel_case(spec.itl_slo_name) + "P99High"
    exprs = {
        "itl_tail": queries["itl_tail_seconds"],
        "ttft_tail": queries["ttft_tail_seconds"],
        "waiting": queries["requests_waiting"],
        "running": queries["requests_running"],
        "alert": f'ALERTS{{alertname="{alert}",alertstate="firing"}}',
        # The service's own gauge; stock vLLM has none, the controller's says what it set.
        "limit": f"{service.BATCHING_LIMIT.name} or {controller.TARGET_LIMITS.name}",
    }
    end = started + duration
    return {name: prometheus_range(state, expr, started, end, CONTROLLER_RESYNC_SECONDS / 2)
            for name, expr in exprs.items()}


def gate_slack(state: State, policy: Policy) -> float | None:
    """The deadline slack a run starts its gate at (``start --admission``): the spec's targets
    for the controller, which moves it from there; for a static policy the widest slack the gate
    takes, so that it refuses next to nothing and the run is the engine's as vLLM would run it."""
    if not state.gated:
        return None
    return 1.0 if policy.name == "controller" else MAX_SLACK


def one_run(state: State, policy: Policy, workload: Traffic, seed: int, index: int,
            out: Path, rate_scale: float = 1.0, source: str = "headline",
            drain_seconds: float = DRAIN_SECONDS) -> Path:
    wait_idle(state)
    set_limits(state, policy_limits(policy, state.ceiling))
    slack = gate_slack(state, policy)
    gate = set_admission(state, slack)[0] if slack is not None else None
    time.sleep(SCRAPE_SECONDS + 1)  # a scrape of the limits set: what the run's series start at
    run_dir = state.folder / f"run-{index}"
    run_dir.mkdir(parents=True, exist_ok=True)
    for stale in ("controller-state.json", "audit.jsonl"):  # an aborted attempt's
        (run_dir / stale).unlink(missing_ok=True)
    controller = controller_child(state, run_dir) if policy.name == "controller" else None
    if controller is not None:
        controller.start().wait_healthy(60.0)
    arrivals = workload.arrivals(seed)
    started = time.time()
    try:
        traces = asyncio.run(replay(state.inference_urls(), SERVED, arrivals,
                                    prompt_book(state), seed=seed,
                                    drain_seconds=drain_seconds))
    finally:
        if controller is not None:
            controller.stop()
    time.sleep(6)  # one more scrape and evaluation of the run's end
    audit = []
    if (run_dir / "audit.jsonl").exists():
        audit = [json.loads(line) for line in (run_dir / "audit.jsonl").read_text().splitlines()]
    data = {
        "policy": policy.name, "label": policy.label,
        "limits": policy_limits(policy, state.ceiling), "seed": seed,
        "workload": {"minutes": workload.duration_seconds / 60, "kind": source,
                     "name": workload.name, "rate_scale": rate_scale,
                     "requests": len(arrivals)},
        # The run's own arrivals: what the simulator's prediction replays.
        "arrivals": [arrival_row(a) for a in arrivals],
        "started_unix": started, "duration_seconds": workload.duration_seconds,
        # Arrival i went to replica i mod replicas (lab.live.replay.replica_of).
        "replicas": state.replicas, "split": "round-robin",
        "environment": state.environment, "audit": audit,
        # The gate's bound at the run's start (None: no gate), as every replica answered it.
        "admission": None if gate is None else {
            "deadline_slack": gate["deadline_slack"],
            "max_tokens_ahead": gate["max_tokens_ahead"]},
        "drain_seconds": drain_seconds,
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
                      "finished": finished, "refused": sum(t.status == 429 for t in traces),
                      "changes": len(audit),
                      "prompt_token_errors": data["prompt_token_errors"]}), flush=True)
    return path


def arrival_row(arrival: Arrival) -> list[Any]:
    return [round(arrival.at, 4), arrival.prompt_tokens, arrival.output_tokens, arrival.kind]


def arrivals_of(rows: list[list[Any]]) -> list[Arrival]:
    return [Arrival(float(at), int(prompt), int(output), str(kind))
            for at, prompt, output, kind in rows]


def workload_from(path: Path | None, slo: Path, max_model_len: int, *, speed: float = 1.0,
                  minutes: float | None = None) -> tuple[Traffic, str]:
    """The headline over ``minutes``, or the workload ``path`` (phases, a named replay or a
    request log, at ``speed``), cut to ``minutes`` when given; and where it came from."""
    if path is None:
        return Workload.headline(minutes or 4.0), "headline"
    options = ReplayOptions(speed=speed, context_tokens=max_model_len,
                            classes=load_checked_spec(slo).classes)
    workload = load_traffic(path, options)
    if minutes is not None:
        workload = workload.with_minutes(minutes)
    return workload, str(path)


def workload_of(args: argparse.Namespace, state: State) -> tuple[Traffic, str]:
    """``workload_from`` with the run's options and the state's spec and context, scaled by
    ``--rate-scale``."""
    workload, source = workload_from(args.workload, state.slo, state.max_model_len,
                                     speed=args.speed, minutes=args.minutes)
    if args.rate_scale != 1.0:
        if not isinstance(workload, Workload):
            raise SystemExit("runs: --rate-scale scales phases; a request log takes --speed")
        workload = workload.scaled(args.rate_scale)
    return workload, source


def policy_limits(policy: Policy, ceiling: dict[str, int]) -> dict[str, int]:
    """The limits a run starts at: the policy's own, or the ceiling (vLLM's defaults, where the
    controller starts)."""
    return policy.limits or ceiling


def runs(args: argparse.Namespace) -> int:
    state = State.load(args.state)
    try:
        workload, source = workload_of(args, state)
    except (WorkloadError, ValueError) as exc:
        raise SystemExit(f"runs: {exc}") from None
    print(f"ready after {wait_ready(state):.0f} s", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        for index, policy in enumerate(args.policies, start=args.first_index):
            one_run(state, policy, workload, args.seed, index, args.out, args.rate_scale,
                    source, args.drain)
    finally:
        set_limits(state, state.ceiling)
        if state.gated:
            set_admission(state, 1.0)
    return 0

