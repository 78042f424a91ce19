"""``governor status``: how the SLOs are doing, on one screen.

It asks the three places that know — Prometheus for each SLO's error budget and burn rates (the
generated recording rules), for a latency SLO that burns, the stage of the requests that grew
most (five minutes against the hour: the tokenizer, the client's reading, the engine's prefill…),
and the verdict on each target where it burns (who is to blame, ``governor why`` for the
numbers);
each GPU's recorded state (HEALTHY, WARN, CRITICAL), its reasons and its runbook;
Alertmanager for what is firing; the controller for the limits in force on every target and the
decisions it took, with their reasons::

    governor status                       # the stack of `governor up`, on localhost
    governor status --watch 5             # redraw every 5 s until Ctrl-C
    governor status --json | jq .slos     # the same, as one JSON document

A source that does not answer is reported as such and the rest is still shown; the exit status
is 1 when any source failed, so the command also serves as a check in scripts.
"""

from __future__ import annotations

import argparse
import json
import signal
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from governor.alerts.runbooks import state_section
from governor.common.answers import get_json
from governor.common.cli import EnvArgumentParser, parse_duration_seconds
from governor.common.prometheus_api import PrometheusHTTP
from governor.contracts.endpoints import ALERTMANAGER, CONTROLLER, LOCAL_HOST, PROMETHEUS
from governor.contracts.metrics import gpu_health as gh
from governor.contracts.metrics import service as svc
from governor.contracts.metrics import slo as n
from governor.contracts.metrics import verdict as v
from governor.contracts.promql import format_duration
from governor.contracts.stages import shift
from governor.slo.burn import SLI_WINDOWS
from governor.slo.fleet import DEFAULT_RUNBOOKS

# Burn-rate windows shown: a short and a long one of each alert tier.
SHOWN_WINDOWS = tuple(w for w in SLI_WINDOWS if w in (300, 3600, 21600, 259200))
RECENT_DECISIONS = 5
MAX_RESPONSE_BYTES = 8 * 2**20
EXIT_INTERRUPTED = 130
# A latency SLO burns when its shortest window spends the budget faster than it lasts; then its
# stages are compared, five minutes against the hour (the stage means stages.yml records).
BURNING = 1.0
STAGE_WINDOWS = (300, 3600)


@dataclass
class SloStatus:
    name: str
    objective: float | None = None
    budget_remaining: float | None = None
    burn_rates: dict[str, float | None] = field(default_factory=dict)
    # For a burning latency SLO on the service's histograms: where its time went.
    stages: dict[str, Any] | None = None
    # Per target where it burns: the verdict's causes, largest share first (governor why).
    verdict: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


@dataclass
class GpuStatus:
    instance: str
    gpu: str
    state: str  # HEALTHY, WARN, CRITICAL (or "?" for a value the rules never record)
    reasons: dict[str, str] = field(default_factory=dict)  # in force: reason → its severity
    runbook: str = ""


@dataclass
class Report:
    slos: list[SloStatus] = field(default_factory=list)
    gpus: list[GpuStatus] = field(default_factory=list)
    alerts: list[dict[str, Any]] = field(default_factory=list)
    targets: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # source → what went wrong

    def as_dict(self) -> dict[str, Any]:
        return {"slos": [asdict(s) for s in self.slos], "gpus": [asdict(g) for g in self.gpus],
                "alerts": self.alerts,
                "targets": self.targets, "errors": self.errors}


def _get(url: str, timeout: float) -> Any:
    return get_json(url, limit=MAX_RESPONSE_BYTES, timeout=timeout)


def _instant(prometheus: str, expr: str, timeout: float) -> list[dict[str, Any]]:
    return PrometheusHTTP(prometheus, timeout_seconds=timeout).instant(expr)


def _by_slo(samples: list[dict[str, Any]]) -> dict[str, float]:
    return {s["metric"].get(n.LABEL_SLO, "?"): float(s["value"][1]) for s in samples}


def slos(prometheus: str, timeout: float) -> list[SloStatus]:
    """Every SLO the recording rules know, with its budget left and its burn rates, and for a
    latency SLO that burns, where its time went."""
    objectives = _by_slo(_instant(prometheus, n.OBJECTIVE.name, timeout))
    remaining = _by_slo(_instant(prometheus, n.ERROR_BUDGET_REMAINING.name, timeout))
    burns = {format_duration(w): _by_slo(_instant(prometheus, n.BURN_RATE.at(w).name, timeout))
             for w in SHOWN_WINDOWS}
    names = sorted(set(objectives) | set(remaining))
    found = [SloStatus(name, objectives.get(name), remaining.get(name),
                       {w: values.get(name) for w, values in burns.items()}) for name in names]
    burning = [s for s in found if (_first(s.burn_rates) or 0.0) > BURNING]
    if burning:
        metrics = {s["metric"].get(n.LABEL_SLO, "?"): s["metric"].get("metric", "")
                   for s in _instant(prometheus, n.INFO.name, timeout)}
        short, long = (_by_stage(_instant(prometheus, n.STAGE_MEAN.at(w).name, timeout))
                       for w in STAGE_WINDOWS)
        for status in burning:
            status.stages = where_it_went(metrics.get(status.name, ""), short, long)
    attach_verdicts(prometheus, found, timeout)
    return found


def attach_verdicts(prometheus: str, found: list[SloStatus], timeout: float) -> None:
    """The verdict of every SLO that burns on some target in the verdict's short window (the
    burn table's windows are longer: an SLO may burn there before it shows above)."""
    by_name = {status.name: status for status in found}
    samples = _instant(prometheus, v.CAUSE_SHARE.name, timeout)
    for sample in sorted(samples, key=lambda x: -float(x["value"][1])):
        labels = sample["metric"]
        status = by_name.get(labels.get(n.LABEL_SLO, ""))
        if status is None:
            continue
        status.verdict.setdefault(labels.get("instance", "?"), []).append(
            {"cause": labels.get(v.LABEL_CAUSE, "?"), "share": float(sample["value"][1])})


def _first(burn_rates: dict[str, float | None]) -> float | None:
    return next(iter(burn_rates.values()), None)


def _by_stage(samples: list[dict[str, Any]]) -> dict[str, float]:
    return {s["metric"].get(svc.LABEL_STAGE, "?"): float(s["value"][1]) for s in samples}


def where_it_went(metric: str, short: dict[str, float], long: dict[str, float]
                  ) -> dict[str, Any] | None:
    """For a latency SLO on ``metric``: the stage on its path that grew most from ``long`` to
    ``short`` (mean seconds per request by stage), and whether the growth sits outside the
    engine; ``None`` for a histogram without stages (a ratio SLO, stock vLLM's)."""
    path = svc.STAGE_PATHS.get(metric)
    if path is None:
        return None
    moved = shift(path, short, long)
    if moved is None:
        return {"stage": None, "note": "no stage series (are the rules of stages.yml loaded?)"}
    return {"stage": moved.stage.value if moved.stage else None,
            "stage_growth_seconds": moved.stage_growth_seconds,
            "engine_growth_seconds": moved.engine_growth_seconds,
            "service_growth_seconds": moved.service_growth_seconds,
            "outside_engine": moved.outside_engine}


def _gpu_key(labels: dict[str, str]) -> tuple[str, str]:
    return labels.get("instance", "?"), labels.get("gpu", "?")


def gpus(prometheus: str, timeout: float) -> list[GpuStatus]:
    """Each GPU's recorded state and the reasons in force, worst first, with its runbook."""
    found: dict[tuple[str, str], GpuStatus] = {}
    for sample in _instant(prometheus, gh.STATE.name, timeout):
        instance, index = _gpu_key(sample["metric"])
        value = float(sample["value"][1])
        state = gh.STATE_NAMES.get(int(value), "?") if value.is_integer() else "?"
        runbook = (f"{DEFAULT_RUNBOOKS}#{state_section(int(value))}" if state != "?" else "")
        found[(instance, index)] = GpuStatus(instance, index, state, runbook=runbook)
    for sample in _instant(prometheus, f"{gh.REASON.name} > 0", timeout):
        status = found.get(_gpu_key(sample["metric"]))
        value = float(sample["value"][1])
        if status is not None and value.is_integer():
            status.reasons[sample["metric"].get("reason", "?")] = gh.STATE_NAMES.get(
                int(value), "?")
    order = {name: rank for rank, name in gh.STATE_NAMES.items()}
    return sorted(found.values(), key=lambda g: (-order.get(g.state, 3), g.instance, g.gpu))


def alerts(alertmanager: str, timeout: float) -> list[dict[str, Any]]:
    """Alerts firing now (not silenced, not inhibited), as Alertmanager holds them."""
    query = urllib.parse.urlencode({"active": "true", "silenced": "false",
                                    "inhibited": "false"})
    found = _get(f"{alertmanager}/api/v2/alerts?{query}", timeout)
    return sorted(({"name": a["labels"].get("alertname", "?"),
                    "severity": a["labels"].get(n.LABEL_SEVERITY, ""),
                    "slo": a["labels"].get(n.LABEL_SLO, ""),
                    "instance": a["labels"].get("instance", ""),
                    "since": a.get("startsAt", "")} for a in found),
                  key=lambda a: (a["severity"], a["name"], a["instance"]))


def targets(controller: str, timeout: float) -> dict[str, dict[str, Any]]:
    """Per target: the limits in force, their floor and ceiling, and the latest decisions."""
    status = _get(f"{controller}/status?limit=0", timeout)  # its alerts: Alertmanager's
    shown = {}
    for name, target in (status.get("targets") or {}).items():
        limits = target.get("limits") or {}
        recent = _worth_showing(list(target.get("recent_decisions") or []))
        shown[name] = {
            "limits": {k: limits.get(k) for k in ("max_num_seqs", "max_num_batched_tokens")},
            "ceiling": limits.get("ceiling"),
            "last_result": target.get("last_result"), "last_error": target.get("last_error"),
            "decisions": [{"at": d.get("at"), "action": d.get("action"),
                           "reason": d.get("reason"), "after": d.get("after"),
                           "explanation": d.get("explanation")} for d in recent],
        }
    return shown


_FAILURES = (urllib.error.URLError, OSError, ValueError, KeyError, TypeError)


def _worth_showing(decisions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The latest changes, and the latest decision when it held (why nothing moves now)."""
    changes = [d for d in decisions if d.get("action") != "hold"][-RECENT_DECISIONS:]
    if decisions and decisions[-1].get("action") == "hold":
        changes = [*changes[1 - RECENT_DECISIONS:], decisions[-1]]
    return changes


def collect(args: argparse.Namespace) -> Report:
    report = Report()
    try:
        report.slos = slos(args.prometheus, args.timeout)
        report.gpus = gpus(args.prometheus, args.timeout)
    except _FAILURES as exc:
        report.errors["prometheus"] = _why(exc)
    try:
        report.alerts = alerts(args.alertmanager, args.timeout)
    except _FAILURES as exc:
        report.errors["alertmanager"] = _why(exc)
    try:
        report.targets = targets(args.controller, args.timeout)
    except _FAILURES as exc:
        report.errors["controller"] = _why(exc)
    return report


def _why(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    if isinstance(exc, urllib.error.URLError):
        return f"unreachable ({exc.reason})"
    return f"{type(exc).__name__}: {exc}"


# ---- the screen ------------------------------------------------------------------------------

def _pct(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value * 100:.{digits}f}%"


def _burn(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def render(report: Report, sources: dict[str, str]) -> str:
    lines = ["SLOs (error budget left over the period; burn rate 1x spends it exactly)"]
    if "prometheus" in report.errors:
        lines.append(f"  Prometheus {sources['prometheus']}: {report.errors['prometheus']}")
    elif not report.slos:
        lines.append("  no SLO series yet (are the generated rules loaded?)")
    else:
        windows = [format_duration(w) for w in SHOWN_WINDOWS]
        rows = [["slo", "objective", "budget left", *[f"burn {w}" for w in windows]]]
        rows += [[s.name, _pct(s.objective, 2), _pct(s.budget_remaining),
                  *[_burn(s.burn_rates.get(w)) for w in windows]] for s in report.slos]
        lines += _table(rows)
        lines += [line for s in report.slos if s.stages is not None
                  for line in _stages_lines(s.name, s.stages)]
        lines += [line for s in report.slos for line in _verdict_lines(s)]
    lines += ["", "GPUs (recorded state, the reasons in force)"]
    if "prometheus" in report.errors:
        lines.append(f"  Prometheus {sources['prometheus']}: {report.errors['prometheus']}")
    elif not report.gpus:
        lines.append("  no GPU state yet (are the rules of health.yml loaded?)")
    else:
        lines += _table([["instance", "gpu", "state", "reasons", "runbook"]] +
                        [[g.instance, g.gpu, g.state,
                          ", ".join(f"{r} ({s})" for r, s in sorted(g.reasons.items())) or "—",
                          g.runbook] for g in report.gpus])
    lines += ["", "Firing alerts"]
    if "alertmanager" in report.errors:
        lines.append(f"  Alertmanager {sources['alertmanager']}: {report.errors['alertmanager']}")
    elif not report.alerts:
        lines.append("  none")
    else:
        lines += _table([["alert", "severity", "slo", "instance", "since"]] +
                        [[a["name"], a["severity"], a["slo"], a["instance"], a["since"]]
                         for a in report.alerts])
    lines += ["", "Limits in force, and the controller's recent decisions"]
    if "controller" in report.errors:
        lines.append(f"  controller {sources['controller']}: {report.errors['controller']}")
    for name, target in report.targets.items():
        limits, ceiling = target["limits"], target["ceiling"] or {}
        lines.append(f"  {name}: max_num_batched_tokens {limits['max_num_batched_tokens']} "
                     f"(of {ceiling.get('max_num_batched_tokens', '?')}), max_num_seqs "
                     f"{limits['max_num_seqs']} (of {ceiling.get('max_num_seqs', '?')})"
                     + (f"; last error: {target['last_error']}" if target["last_error"] else ""))
        for d in target["decisions"]:
            lines.append(f"    {d['at']}  {d['action']:<8} {d['reason']}: "
                         f"{_short(d['explanation'])}")
        if not target["decisions"]:
            lines.append("    no decision has changed anything yet")
    return "\n".join(lines)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:+.0f} ms"


def _stages_lines(name: str, stages: dict[str, Any]) -> list[str]:
    """Where a burning SLO's time went, in a line or two under the table."""
    short, long = (format_duration(w) for w in STAGE_WINDOWS)
    if "note" in stages:
        return [f"  {name} burns; where its time went: {stages['note']}"]
    if stages["stage"] is None:
        return [f"  {name} burns, and none of its stages grew ({short} against {long})"]
    head = (f"  {name} burns: {stages['stage']} grew most ({_ms(stages['stage_growth_seconds'])}"
            f" per request, {short} against {long}); the engine's stages "
            f"{_ms(stages['engine_growth_seconds'])}, the service's "
            f"{_ms(stages['service_growth_seconds'])}")
    verdict = ("the time went outside the engine: the fix is not batching, and the controller "
               "holds" if stages["outside_engine"] else "the engine's share grew: the "
               "controller's batching limits apply")
    return [head, f"    {verdict}"]


def _verdict_lines(status: SloStatus) -> list[str]:
    """Who is to blame, per target where the SLO burns (``governor why`` for the evidence)."""
    lines = []
    for instance, blamed in sorted(status.verdict.items()):
        ranked = ", ".join(f"{b['cause']} {b['share'] * 100:.0f}%" for b in blamed)
        lines.append(f"  {status.name} burns on {instance}: {ranked} "
                     f"(governor why {instance} says why)")
    return lines


def _short(text: str | None, width: int = 110) -> str:
    text = (text or "").replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in rows]


# ---- command line ------------------------------------------------------------------------------

def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="governor status", description=__doc__.split("\n\n")[0],
                          env_prefix="GOVERNOR_STATUS_")
    p.add_argument("--prometheus", default=PROMETHEUS.url(LOCAL_HOST), help="Prometheus URL")
    p.add_argument("--alertmanager", default=ALERTMANAGER.url(LOCAL_HOST),
                   help="Alertmanager URL")
    p.add_argument("--controller", default=CONTROLLER.url(LOCAL_HOST), help="controller URL")
    p.add_argument("--json", action="store_true", help="one JSON document instead of the screen")
    p.add_argument("--watch", type=parse_duration_seconds, nargs="?", const=5.0, default=None,
                   metavar="INTERVAL", help="redraw every INTERVAL (default 5s) until Ctrl-C")
    p.add_argument("--timeout", type=parse_duration_seconds, default=5.0,
                   help="how long to wait for each source")
    return p


def _show(args: argparse.Namespace) -> int:
    report = collect(args)
    sources = {"prometheus": args.prometheus, "alertmanager": args.alertmanager,
               "controller": args.controller}
    if args.json:
        print(json.dumps(report.as_dict(), indent=1), flush=True)
    else:
        print(render(report, sources), flush=True)
    return 1 if report.errors else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for name in ("prometheus", "alertmanager", "controller"):
        setattr(args, name, getattr(args, name).rstrip("/"))
    if args.watch is None:
        return _show(args)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        while True:
            if not args.json:
                print("\033[H\033[2J", end="")  # clear the screen, cursor home
            _show(args)
            time.sleep(args.watch)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
