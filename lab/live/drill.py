"""``drill``: each cause of a latency SLO burn injected into the live stack, and what the team
would see — the verdict, the alerts, the controller's decisions — in seconds since the onset::

    python -m lab.live drill healthy,batching,queue --state S --out OUT

The stack is ``start``'s (a real engine, the GPU exporter, Prometheus with the generated rules,
Alertmanager) and stays up between drills. Each drill, in turn: waits for the engine to drain,
sets the engine's ceiling limits, starts the healthy load, waits for the last drill's burn to
leave the verdict's window, starts a fresh ``governor controller`` (no tuning options; its own
state and audit log), polls through a warm-up, injects its cause (traffic, limits set live, or
a co-tenant on the GPU), then polls every few seconds until a verdict holds
(:class:`governor.drills.finding.Finder`: the leading cause of the first verdict that holds two
polls) and ``--settle`` seconds more for the controller's answer, or until ``--wait`` passes. It
prints the timeline as ``governor drill`` does and ends with one JSON line, ``governor drill``'s
(:class:`governor.drills.report.Result`) plus the card, what the verdict read at the poll that
confirmed it, the second of the two it held (``governor why``'s verdicts and the ``verdict:*``
inputs), every controller decision after the onset and the engine's preemptions.
``OUT/drills.jsonl`` collects the lines, ``OUT/polls.jsonl`` every poll's readings.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Final

from governor.common.process import Child
from governor.common.prometheus_api import PrometheusError, PrometheusHTTP
from governor.drills.finding import Finder
from governor.drills.observe import Alert, Decision, Observer, decisions_since
from governor.drills.report import Result, Timeline, describe_decision, describe_verdict
from governor.drills.report import verdict_rows as rows_of
from governor.generation.catalog import load_checked_spec
from governor.why import read as read_why
from lab.live import evidence
from lab.live.drills import LiveDrill, by_name
from lab.live.runs import controller_child
from lab.live.stack import spec_mismatch, wait_ready
from lab.live.state import State, set_limits, wait_idle

RESULTS: Final = "drills.jsonl"
POLLS: Final = "polls.jsonl"
_BURNING: Final = 1.0
_LONG_SECONDS: Final = 900  # the verdict's long window at the stack's intervals (30 x 30 s)


@dataclass(frozen=True)
class Timing:
    warm_up_seconds: float = 35.0
    wait_seconds: float = 120.0
    settle_seconds: float = 30.0
    clear_seconds: float = 60.0
    poll_seconds: float = 5.0


@dataclass
class Polls:
    """Every poll's readings, for ``polls.jsonl``, and what the result keeps of them."""

    drill: str
    sink: Callable[[dict[str, Any]], None]
    at_found: dict[str, Any] = field(default_factory=dict)
    last: dict[str, Any] = field(default_factory=dict)

    def add(self, seconds: float, prometheus: PrometheusHTTP, shares: list[Any]) -> None:
        row = {"drill": self.drill, "seconds": round(seconds, 1),
               "verdict": rows_of(shares), **evidence.read(prometheus)}
        self.sink(row)
        self.last = row


class _Drill:
    """One drill on the live stack, from its setup to its JSON line."""

    def __init__(self, state: State, drill: LiveDrill, args: argparse.Namespace,
                 write: Callable[[str], None]) -> None:
        self.state, self.drill, self.args, self.write = state, drill, args, write
        self.timing: Timing = args.timing
        self.folder = state.folder / "drills" / drill.name
        self.folder.mkdir(parents=True, exist_ok=True)
        for stale in ("controller-state.json", "audit.jsonl", "go"):
            (self.folder / stale).unlink(missing_ok=True)
        self.prometheus = PrometheusHTTP(state.url("prometheus"), timeout_seconds=10)
        self.observer = Observer(state.url("prometheus"), self.folder / "audit.jsonl")
        self.notes: list[str] = []
        self.children: list[Child] = []
        self._exited: set[str] = set()
        self.before_onset: set[Alert] = set()
        self.finder = Finder()
        self.changes: list[Decision] = []
        self.why: list[dict[str, Any]] = []
        self.limits = {**state.ceiling, **(drill.limits or {})}  # from the onset

    # ---- the parts the drill starts ----------------------------------------------------------

    def load(self, phase: str) -> Child:
        argv = [sys.executable, "-m", "lab.live.drill_load", "--state", str(self.state.folder),
                "--drill", self.drill.name, "--phase", phase, "--seed", str(self.args.seed),
                "--scale", str(self.args.load_scale)]
        return Child(f"load-{phase}", argv, None, self.folder / f"load-{phase}.log",
                     grace_seconds=5, fresh_log=True).start()

    def cotenant(self) -> Child:
        seconds = self.timing.wait_seconds + self.timing.settle_seconds + 60
        argv = [sys.executable, "-m", "lab.live.cotenant", "--gib", str(self.drill.cotenant_gib),
                "--trigger", str(self.folder / "go"), "--seconds", str(seconds)]
        return Child("cotenant", argv, None, self.folder / "cotenant.log", grace_seconds=10,
                     fresh_log=True).start()

    def _watch(self) -> None:
        """Note a load or co-tenant that exited (once): the drill goes on without it."""
        for child in self.children:
            status = child.poll()
            if status is None or child.name in self._exited:
                continue
            self._exited.add(child.name)
            note = f"{child.name} exited with status {status}: {child.tail(3)}"
            self.notes.append(note)
            self.write(f"  note: {note}")

    # ---- before the warm-up ------------------------------------------------------------------

    def prepare(self) -> None:
        try:
            wait_idle(self.state, limit_seconds=120.0)
        except RuntimeError as exc:
            self.notes.append(f"the engine had not drained before the drill: {exc}")
        set_limits(self.state, self.state.ceiling)

    def clear(self) -> None:
        """Wait until no SLO burns in the verdict's window (the last drill's breach), the
        healthy load running (its good events wash the window out sooner)."""
        deadline = time.monotonic() + self.timing.clear_seconds
        while time.monotonic() < deadline:
            snap = self.observer.snapshot()
            if snap.error is None and not any(b >= _BURNING for b in snap.burns.values()):
                return
            time.sleep(self.timing.poll_seconds)
        self.notes.append(f"an SLO still burned {self.timing.clear_seconds:g} s after the last "
                          "drill: the warm-up started anyway")

    # ---- the drill ---------------------------------------------------------------------------

    def header(self) -> None:
        d, t = self.drill, self.timing
        self.write(f"live drill {d.name}: {d.summary}")
        self.write(f"  spec {self.state.slo}, seed {self.args.seed}, healthy load "
                   f"x{self.args.load_scale:g}, onset after {t.warm_up_seconds:g} s, verdict "
                   f"awaited {t.wait_seconds:g} s, limits {self.state.ceiling}")
        for line in d.background.describe():
            self.write(f"  beside the healthy load from the start: {line}")
        if d.note:
            self.notes.append(d.note)
        for note in self.notes:
            self.write(f"  note: {note}")

    def warm_up(self, polls: Polls) -> None:
        """The healthy load until the onset; a verdict, or a limit the controller moved, is
        noted, and so are alerts still firing at the onset (a ticket's long windows remember
        the last drill): the onset's timeline leaves them out."""
        t = self.timing
        onset = time.monotonic() + t.warm_up_seconds
        timeline = Timeline(self.write)
        seen = 0
        while time.monotonic() + t.poll_seconds < onset:
            time.sleep(t.poll_seconds)
            self._watch()
            seconds = time.monotonic() - onset
            snap = self.observer.snapshot()
            self.before_onset = set(snap.alerts)
            timeline.snapshot(seconds, snap)
            polls.add(seconds, self.prometheus, list(snap.shares))
            if snap.shares and timeline.verdict_polls == 1:
                self.notes.append(f"a verdict before the onset, at {seconds:.0f} s: "
                                  f"{describe_verdict(snap.shares)}")
            decisions = self.observer.decisions()
            timeline.decisions(seconds, decisions[seen:])
            for d in decisions[seen:]:
                if d.changed:
                    self.notes.append(f"the controller moved limits before the onset, at "
                                      f"{seconds:.0f} s: {describe_decision(d)}")
            seen = len(decisions)
        time.sleep(max(0.0, onset - time.monotonic()))
        if self.before_onset:
            names = sorted({a.name for a in self.before_onset})
            self.notes.append(f"firing at the onset, left out of the drill's alerts: "
                              f"{', '.join(names)}")

    def inject(self) -> float:
        """Start the drill's traffic and release its co-tenant; the onset's Unix time."""
        at = time.time()
        if self.drill.limits:
            set_limits(self.state, self.limits)
        if self.drill.workload.traffic:
            self.children.append(self.load("inject"))
        if self.drill.cotenant_gib:
            (self.folder / "go").touch()
        what = [f"limits {self.limits}"] if self.drill.limits else []
        what += self.drill.workload.describe()
        if self.drill.cotenant_gib:
            what.append(f"a co-tenant's bf16 matmuls and {self.drill.cotenant_gib:g} GiB")
        self.write(f"{0.0:+8.1f}s  injected: {'; '.join(what) or 'nothing'}")
        return at

    def observe(self, onset_at: float, polls: Polls) -> Timeline:
        t = self.timing
        start = time.monotonic()
        timeline = Timeline(self.write)
        seen, next_poll = 0, start
        while True:
            next_poll += t.poll_seconds
            time.sleep(max(0.0, next_poll - time.monotonic()))
            self._watch()
            seconds = time.monotonic() - start
            snap = self.observer.snapshot()
            news = tuple(a for a in snap.alerts if a not in self.before_onset)
            timeline.snapshot(seconds, replace(snap, alerts=news))
            had = self.finder.found
            self.finder.observe(seconds, snap.shares)
            polls.add(seconds, self.prometheus, list(snap.shares))
            if had is None and self.finder.found is not None:
                polls.at_found = polls.last
                self.why = self._why()
            after = decisions_since(self.observer.decisions(), onset_at)
            timeline.decisions(seconds, after[seen:])
            seen = len(after)
            self.changes = after
            found = self.finder.found
            if found is not None and self.drill.cause is not None:
                if seconds >= found.seconds + t.settle_seconds:
                    return timeline
            elif seconds >= t.wait_seconds:
                return timeline

    def _why(self) -> list[dict[str, Any]]:
        """``governor why``'s verdicts now: each cause's share and its evidence."""
        try:
            return [asdict(v) for v in read_why(self.prometheus, long_seconds=_LONG_SECONDS)]
        except (OSError, PrometheusError, ValueError) as exc:
            return [{"error": str(exc)[:200]}]

    def stop(self) -> None:
        for child in reversed(self.children):
            child.stop()
        self.children.clear()

    def result(self, timeline: Timeline, polls: Polls, preempted: float | None) -> dict[str, Any]:
        found = self.finder.found
        verdict = list(found.verdict) if found is not None else timeline.last_verdict
        reasons = list(dict.fromkeys(f"{d.action}: {d.reason}" for d in self.changes))
        result = Result(
            drill=self.drill.name, spec=str(self.state.slo), seed=self.args.seed,
            injected=self.drill.describe(), found=None if found is None else found.cause,
            verdict=rows_of(verdict),
            onset_to_verdict_seconds=None if found is None else round(found.seconds, 1),
            alerts=timeline.alerts, controller_changes=sum(1 for d in self.changes if d.changed),
            controller_reasons=reasons, notes=self.notes, load_scale=self.args.load_scale,
            expected=self.drill.cause, verdict_polls=timeline.verdict_polls,
            leading=timeline.leading, max_burn=timeline.max_burn, max_share=timeline.max_share)
        return {**asdict(result),
                "card": self.state.environment.get("gpu", "unknown"),
                "environment": self.state.environment,
                "limits_from_onset": self.limits,
                "controller_decisions": [_decision_row(d) for d in self.changes],
                "preemptions_during_drill": preempted,
                "evidence_at_found": polls.at_found, "why_at_found": self.why,
                "evidence_at_end": polls.last}


def _decision_row(d: Decision) -> dict[str, Any]:
    return {"at": d.at, "action": d.action, "reason": d.reason, "changed": d.changed,
            "before": dict(d.before), "after": dict(d.after), "explanation": d.explanation}


def _preemptions(prometheus: PrometheusHTTP) -> float | None:
    row = evidence.read(prometheus)
    value = row.get("preemptions_total")
    return float(value) if isinstance(value, (int, float)) else None


def run_one(state: State, drill: LiveDrill, args: argparse.Namespace,
            write: Callable[[str], None], sink: Callable[[dict[str, Any]], None]
            ) -> dict[str, Any]:
    run = _Drill(state, drill, args, write)
    run.prepare()
    polls = Polls(drill.name, sink)
    controller = controller_child(state, run.folder)
    try:
        run.children.append(run.load("healthy"))
        if drill.cotenant_gib:
            run.children.append(run.cotenant())
        run.clear()
        run.header()
        controller.start().wait_healthy(60.0)
        run.warm_up(polls)
        before = _preemptions(run.prometheus)
        onset_at = run.inject()
        timeline = run.observe(onset_at, polls)
        after = _preemptions(run.prometheus)
        preempted = None if before is None or after is None else after - before
        return run.result(timeline, polls, preempted)
    finally:
        run.stop()
        controller.stop()
        set_limits(state, state.ceiling)


def _terminated(signum: int, frame: object) -> None:
    """SIGTERM (a command's time limit) unwinds like Ctrl-C: the drill's loads, co-tenant and
    controller are stopped and the engine's limits reset on the way out."""
    raise SystemExit(128 + signum)


def drill(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, _terminated)
    state = State.load(args.state)
    mismatch = spec_mismatch(state.environment.get("server", ""), load_checked_spec(state.slo),
                             state.slo)
    if mismatch is not None:
        raise SystemExit(f"lab.live drill: {mismatch}; start the stack again with one")
    print(f"ready after {wait_ready(state):.0f} s", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)

    def write(line: str) -> None:
        print(line, flush=True)

    with (args.out / POLLS).open("a", encoding="utf-8") as polls:
        def sink(row: dict[str, Any]) -> None:
            polls.write(json.dumps(row, default=str) + "\n")
            polls.flush()

        for name in args.drills:
            line = json.dumps(run_one(state, by_name(name), args, write, sink),
                              default=str)
            print(line, flush=True)
            with (args.out / RESULTS).open("a", encoding="utf-8") as results:
                results.write(line + "\n")
    return 0
