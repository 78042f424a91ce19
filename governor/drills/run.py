"""One drill, from the stack's start to its JSON line.

It starts the stack (:mod:`.stack`), drives the healthy load, and polls what a team would see
(:mod:`.observe`) through a warm-up; at the onset it injects the drill's cause (faults on the
simulated GPU, traffic, or both); then it polls until a verdict holds (:mod:`.finding`) and
``settle_seconds`` more for the controller's answer to it, or until ``wait_seconds`` after the
onset pass without one. The stack is stopped on the way out, Ctrl-C included, unless ``keep``.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from governor.common.process import Child, ChildError, first_exited
from governor.drills import catalog
from governor.drills.catalog import Drill
from governor.drills.finding import Finder, Finding
from governor.drills.observe import Decision, Observer, decisions_since
from governor.drills.report import (
    Result,
    Timeline,
    describe_decision,
    describe_verdict,
    verdict_rows,
)
from governor.drills.spec import DrillSpecError, check, tightened_copy
from governor.drills.stack import Stack, StackConfig, StackError

DEFAULT_PORT_BASE: Final = 28100
_SPEC_COPY: Final = "drill-slo.yaml"


class DrillError(Exception):
    """The drill could not run (not: it ran and found nothing)."""


class Interrupted(Exception):
    """Ctrl-C (or SIGTERM) stopped the drill."""


@dataclass(frozen=True, slots=True)
class DrillOptions:
    drill: str
    slo: Path = Path("slo.yaml")
    seed: int = 1
    onset_seconds: float = 90.0
    wait_seconds: float = 150.0
    settle_seconds: float = 45.0
    poll_seconds: float = 5.0
    port_base: int = DEFAULT_PORT_BASE
    run_dir: Path = Path(".run/drill")
    keep: bool = False
    load_scale: float = 1.0


def injected(drill: Drill) -> dict[str, Any]:
    return {"summary": drill.summary, "faults": dict(drill.faults),
            "traffic": drill.workload.describe(), "background": drill.background.describe(),
            "serve": list(drill.serve),
            "itl_threshold_seconds": drill.itl_threshold_seconds}


def _setup(options: DrillOptions, drill: Drill, notes: list[str]
           ) -> tuple[Stack, bool, bool]:
    """The drill's stack, on the user's spec or a tightened copy, whether the spec can see
    the drill's cause, and whether it is a stock-vLLM spec; notes what it changed."""
    try:
        spec = check(options.slo)
        slo = options.slo
        if drill.itl_threshold_seconds is not None:
            why = (f"the {drill.name} drill cannot breach a looser inter-token SLO on the "
                   "simulated H200")
            slo = tightened_copy(options.slo, drill.itl_threshold_seconds,
                                 options.run_dir / _SPEC_COPY, why)
            notes.append(f"inter-token SLO at {drill.itl_threshold_seconds * 1000:g} ms on a "
                         f"copy of the spec ({slo}): {why}")
    except DrillSpecError as exc:
        raise DrillError(str(exc)) from None
    if spec.stock_vllm and not drill.stock_vllm:
        notes.append(f"a stock-vLLM spec reads vLLM's own histograms, which cannot see "
                     f"{drill.name}: no verdict is expected")
    dcgm = spec.targets.gpu.source == "dcgm"
    if dcgm:
        notes.append("the fake GPUs expose dcgm-exporter's names")
    if drill.note:
        notes.append(drill.note)
    try:
        stack = Stack(StackConfig(run_dir=options.run_dir, slo=slo, port_base=options.port_base,
                                  serve=(*drill.serve, "--seed", str(options.seed)), dcgm=dcgm))
    except StackError as exc:
        raise DrillError(str(exc)) from None
    return stack, drill.stock_vllm or not spec.stock_vllm, spec.stock_vllm


class _Run:
    """The state of one drill between its start and its JSON line."""

    def __init__(self, options: DrillOptions, write: Callable[[str], None],
                 should_stop: Callable[[], bool]) -> None:
        self.options, self.write, self.should_stop = options, write, should_stop
        try:
            self.drill = catalog.by_name(options.drill)
        except catalog.UnknownDrill as exc:
            raise DrillError(str(exc)) from None
        self.notes: list[str] = []
        self.stack, self.applicable, self.stock_vllm_spec = _setup(options, self.drill,
                                                                    self.notes)
        self.finder = Finder()
        self.changes: list[Decision] = []

    def header(self) -> None:
        o, stack = self.options, self.stack
        self.write(f"governor drill {self.drill.name}: {self.drill.summary}")
        self.write(f"  spec {o.slo}, seed {o.seed}, healthy load x{o.load_scale:g}, onset after "
                   f"{o.onset_seconds:g} s, verdict awaited {o.wait_seconds:g} s")
        self.write(f"  stack on ports {o.port_base}-{o.port_base + 5} (Prometheus "
                   f"{stack.url('prometheus')}), run directory {o.run_dir.resolve()}")
        for line in self.drill.background.describe():
            self.write(f"  beside the healthy load from the start: {line}")
        for note in self.notes:
            self.write(f"  note: {note}")

    def watch(self, parts: Sequence[Child], loads: Sequence[Child]) -> None:
        dead = first_exited([*parts, *loads])
        if dead is not None:
            raise ChildError(dead, f"exited with status {dead.poll()}")

    def sleep_until(self, deadline: float, parts: Sequence[Child], loads: Sequence[Child]
                    ) -> None:
        while time.monotonic() < deadline:
            if self.should_stop():
                raise Interrupted()
            self.watch(parts, loads)
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))

    def warm_up(self, observer: Observer, parts: Sequence[Child], loads: Sequence[Child]
                ) -> None:
        """The healthy load until the onset; a verdict, or a limit the controller moved, is
        noted (the healthy load itself burns, or comes near it)."""
        o = self.options
        onset = time.monotonic() + o.onset_seconds
        timeline = Timeline(self.write)
        next_poll, seen = time.monotonic() + o.poll_seconds, 0
        while next_poll < onset:
            self.sleep_until(next_poll, parts, loads)
            seconds = time.monotonic() - onset
            snap = observer.snapshot()
            timeline.snapshot(seconds, snap)
            if snap.shares and timeline.verdict_polls == 1:
                self.notes.append(f"a verdict before the onset, at {seconds:.0f} s: "
                                  f"{describe_verdict(snap.shares)}")
            decisions = observer.decisions()
            timeline.decisions(seconds, decisions[seen:])
            moved = [d for d in decisions[seen:] if d.changed]
            if moved:
                self.notes.append(f"the controller moved limits before the onset, at "
                                  f"{seconds:.0f} s: {describe_decision(moved[-1])}")
            seen = len(decisions)
            next_poll += o.poll_seconds
        self.sleep_until(onset, parts, loads)

    def inject(self, loads: list[Child]) -> float:
        """Set the drill's faults and start its traffic; the onset's Unix time."""
        at = time.time()
        if self.drill.faults:
            try:
                self.stack.set_faults(self.drill.faults)
            except StackError as exc:
                raise DrillError(str(exc)) from None
        if self.drill.workload.traffic:
            loads.append(self.stack.load(self.drill.name, "inject", self.options.seed).start())
        what = ", ".join(part for part in (
            f"faults {json.dumps(dict(self.drill.faults))}" if self.drill.faults else "",
            "; ".join(self.drill.workload.describe())) if part) or "nothing"
        self.write(f"{0.0:+8.1f}s  injected: {what}")
        return at

    def observe(self, observer: Observer, onset_at: float, parts: Sequence[Child],
                loads: Sequence[Child]) -> Timeline:
        """Polls from the onset until a verdict holds and settles, or the wait ends."""
        o = self.options
        start = time.monotonic()
        timeline = Timeline(self.write)
        seen, next_poll = 0, start
        while True:
            next_poll += o.poll_seconds
            self.sleep_until(next_poll, parts, loads)
            seconds = time.monotonic() - start
            snap = observer.snapshot()
            timeline.snapshot(seconds, snap)
            self.finder.observe(seconds, snap.shares)
            after = decisions_since(observer.decisions(), onset_at)
            timeline.decisions(seconds, after[seen:])
            seen = len(after)
            self.changes = after
            if self._done(seconds):
                return timeline

    def _done(self, seconds: float) -> bool:
        """A fault drill ends once its verdict has held and settled; healthy, and a fault
        drill without a verdict, at the wait's end."""
        found, o = self.finder.found, self.options
        if found is not None and self.drill.cause is not None:
            return seconds >= found.seconds + o.settle_seconds
        return seconds >= o.wait_seconds

    def result(self, timeline: Timeline) -> Result:
        found: Finding | None = self.finder.found
        verdict = list(found.verdict) if found is not None else timeline.last_verdict
        reasons = list(dict.fromkeys(f"{d.action}: {d.reason}" for d in self.changes))
        return Result(
            drill=self.drill.name, spec=str(self.options.slo), seed=self.options.seed,
            injected=injected(self.drill), found=None if found is None else found.cause,
            verdict=verdict_rows(verdict),
            onset_to_verdict_seconds=None if found is None else round(found.seconds, 1),
            alerts=timeline.alerts,
            controller_changes=sum(1 for d in self.changes if d.changed),
            controller_reasons=reasons, notes=self.notes, load_scale=self.options.load_scale,
            expected=self.drill.cause, applicable=self.applicable,
            verdict_polls=timeline.verdict_polls, leading=timeline.leading,
            max_burn=timeline.max_burn, max_share=timeline.max_share,
            stock_vllm_spec=self.stock_vllm_spec)


def say(line: str) -> None:
    """A line of the timeline, out at once (a drill's output is often a pipe or a file)."""
    print(line, flush=True)


def run_drill(options: DrillOptions, write: Callable[[str], None] = say,
              should_stop: Callable[[], bool] = lambda: False,
              on_result: Callable[[Result], None] = lambda result: None) -> Result:
    """Run one drill; ``on_result`` gets its result before the stack stops (or, with
    ``keep``, before the drill waits for Ctrl-C). :class:`DrillError` when it cannot run,
    :class:`Interrupted` on Ctrl-C; the stack is stopped either way."""
    run = _Run(options, write, should_stop)
    run.header()

    def ready(child: Child, seconds: float) -> None:
        write(f"  {child.name:<12} ready in {seconds:4.1f}s")

    loads: list[Child] = []
    try:
        with run.stack.running(on_ready=ready, should_stop=should_stop) as parts:
            if should_stop():
                raise Interrupted()
            try:
                loads.append(run.stack.load(run.drill.name, "healthy", options.seed,
                                            options.load_scale).start())
                observer = Observer(run.stack.url("prometheus"), run.stack.audit_log)
                run.warm_up(observer, parts, loads)
                onset_at = run.inject(loads)
                result = run.result(run.observe(observer, onset_at, parts, loads))
                on_result(result)
                if options.keep:
                    _keep(run, parts, loads)
                return result
            finally:
                for load in reversed(loads):
                    load.stop()
    except (StackError, ChildError) as exc:
        raise DrillError(str(exc)) from None


def _keep(run: _Run, parts: Sequence[Child], loads: Sequence[Child]) -> None:
    print(f"governor drill: the stack stays up as the drill left it (Prometheus "
          f"{run.stack.url('prometheus')}, controller {run.stack.url('controller')}/status); "
          "Ctrl-C stops it", file=sys.stderr, flush=True)
    with contextlib.suppress(Interrupted):
        run.sleep_until(float("inf"), parts, loads)
