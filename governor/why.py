"""``governor why [TARGET]``: why a latency SLO burns, cause by cause, with the numbers.

It reads the verdict the generated rules record (``verdict.yml``): for each latency SLO that
burns on a target, the causes ranked by the share of the breach each explains; under each, the
evidence behind it now and over the longer window (what changed), what the controller does about
it, what a team does, and the runbook::

    governor why                              # every target of the stack on localhost
    governor why 10.0.0.5:8000                # one target (its Prometheus ``instance``)
    governor why --json | jq '.verdicts[0]'

Nothing burning is an answer too. The exit status is 1 when Prometheus could not be asked.
"""

from __future__ import annotations

import json
import math
import urllib.error
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from governor.alerts.verdict_evidence import EVIDENCE, Evidence
from governor.common.cli import EnvArgumentParser, parse_duration_seconds
from governor.common.prometheus_api import PrometheusError, PrometheusHTTP
from governor.contracts import causes
from governor.contracts.causes import Action
from governor.contracts.endpoints import LOCAL_HOST, PROMETHEUS
from governor.contracts.metrics import slo as n
from governor.contracts.metrics import verdict as v
from governor.contracts.metrics.scrape import LABEL_INSTANCE
from governor.contracts.promql import format_duration

ACTIONS = {
    Action.RETUNE: "the controller retunes the batching limits for it",
    Action.SCALE: "the controller holds the limits and raises the scale-out signal",
    Action.HOLD: "the controller holds the limits: no batching limit fixes it",
    Action.NONE: "the controller's law decides on its own evidence",
}
DEFAULT_LONG_SECONDS = 1800


@dataclass
class Fact:
    label: str
    unit: str
    now: float | None
    usual: float | None  # the same over the longer window


@dataclass
class Blame:
    cause: str
    share: float
    summary: str
    action: str
    remedy: str
    runbook: str
    evidence: list[Fact] = field(default_factory=list)


@dataclass
class Verdict:
    slo: str
    instance: str
    burn: float | None
    quantile_seconds: float | None
    excess_seconds: float | None
    causes: list[Blame] = field(default_factory=list)


def _value(samples: list[dict[str, Any]]) -> float | None:
    for sample in samples:
        value = float(sample["value"][1])
        if math.isfinite(value):
            return value
    return None


def _by(samples: list[dict[str, Any]], *labels: str) -> dict[tuple[str, ...], float]:
    return {tuple(s["metric"].get(label, "") for label in labels): float(s["value"][1])
            for s in samples}


def _fact(prometheus: PrometheusHTTP, item: Evidence, instance: str, long: str) -> Fact:
    query = item.query(json.dumps(instance))
    usual = f"avg_over_time(({query})[{long}:])"
    return Fact(item.label, item.unit, _value(prometheus.instant(query)),
                _value(prometheus.instant(usual)))


def read(prometheus: PrometheusHTTP, *, instance: str | None = None, slo: str | None = None,
         long_seconds: int = DEFAULT_LONG_SECONDS, runbooks: str = "docs/runbooks.md"
         ) -> list[Verdict]:
    """Every verdict Prometheus holds now (of ``instance`` and ``slo`` where given), the SLO with
    the most burn first, causes by share."""
    shares = prometheus.instant(v.CAUSE_SHARE.name)
    burns = _by(prometheus.instant(v.BURN.name), n.LABEL_SLO, LABEL_INSTANCE)
    quantiles = _by(prometheus.instant(v.CLIENT_QUANTILE.name), n.LABEL_SLO, LABEL_INSTANCE)
    excess = _by(prometheus.instant(v.EXCESS.name), n.LABEL_SLO, LABEL_INSTANCE)
    found: dict[tuple[str, str], Verdict] = {}
    long = format_duration(long_seconds)
    for sample in shares:
        labels = sample["metric"]
        key = (labels.get(n.LABEL_SLO, "?"), labels.get(LABEL_INSTANCE, "?"))
        if (instance and key[1] != instance) or (slo and key[0] != slo):
            continue
        verdict = found.setdefault(key, Verdict(key[0], key[1], burns.get(key),
                                                quantiles.get(key), excess.get(key)))
        name = labels.get(v.LABEL_CAUSE, "")
        if name not in causes.NAMES:
            continue
        cause = causes.by_name(name)
        verdict.causes.append(Blame(
            name, float(sample["value"][1]), cause.summary, ACTIONS[cause.action], cause.remedy,
            f"{runbooks}#{cause.runbook_anchor}",
            [_fact(prometheus, item, key[1], long) for item in EVIDENCE[name]]))
    for verdict in found.values():
        verdict.causes.sort(key=lambda b: (-b.share, causes.NAMES.index(b.cause)))
    return sorted(found.values(), key=lambda x: (-(x.burn or 0.0), x.slo, x.instance))


# ---- the screen ------------------------------------------------------------------------------

def _number(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "ratio":
        return f"{value * 100:.0f}%"
    if unit == "seconds":
        return f"{value * 1000:.0f} ms" if value < 10 else f"{value:.1f} s"
    if unit == "per_second":
        return f"{value:.2f}/s"
    return f"{value:.3g}"


def render(verdicts: list[Verdict]) -> str:
    if not verdicts:
        return ("No latency SLO burns on any target in the verdict's window: nothing to blame.\n"
                "(No verdict series at all? Check that the rules of verdict.yml are loaded.)")
    lines: list[str] = []
    for verdict in verdicts:
        head = f"{verdict.slo} burns on {verdict.instance}"
        if verdict.quantile_seconds is not None and verdict.excess_seconds is not None:
            head += (f": its quantile is {_number(verdict.quantile_seconds, 'seconds')}, "
                     f"{_number(verdict.excess_seconds, 'seconds')} over the SLO")
        if verdict.burn is not None:
            head += f" (burn rate {verdict.burn:.1f}x in the verdict's window)"
        lines.append(head)
        for rank, blame in enumerate(verdict.causes, 1):
            lines.append(f"  {rank}. {blame.cause}: {blame.share * 100:.0f}% of the breach — "
                         f"{blame.summary}")
            for fact in blame.evidence:
                lines.append(f"       {fact.label}: {_number(fact.now, fact.unit)} "
                             f"(over the longer window: {_number(fact.usual, fact.unit)})")
            lines.append(f"       controller: {blame.action}")
            lines.append(f"       what to do: {blame.remedy}")
            lines.append(f"       runbook: {blame.runbook}")
        lines.append("")
    return "\n".join(lines).rstrip()


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="governor why", description=__doc__.split("\n\n")[0],
                          env_prefix="GOVERNOR_WHY_")
    p.add_argument("target", nargs="?", default=None,
                   help="one inference target, as Prometheus names it (its instance label)")
    p.add_argument("--slo", default=None, help="only this SLO")
    p.add_argument("--prometheus", default=PROMETHEUS.url(LOCAL_HOST), help="Prometheus URL")
    p.add_argument("--long", type=parse_duration_seconds, default=float(DEFAULT_LONG_SECONDS),
                   help="the longer window the evidence is compared with")
    p.add_argument("--runbooks", default="docs/runbooks.md",
                   help="where the runbooks are (the spec's alerting.runbooks)")
    p.add_argument("--timeout", type=parse_duration_seconds, default=5.0,
                   help="how long to wait for Prometheus")
    p.add_argument("--json", action="store_true", help="one JSON document instead of the screen")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    prometheus = PrometheusHTTP(args.prometheus, timeout_seconds=args.timeout)
    try:
        verdicts = read(prometheus, instance=args.target, slo=args.slo,
                        long_seconds=max(int(args.long), 1), runbooks=args.runbooks)
    except (urllib.error.URLError, OSError, PrometheusError, KeyError, ValueError) as exc:
        print(f"governor why: cannot read the verdict from {args.prometheus}: {exc}")
        return 1
    if args.json:
        print(json.dumps({"verdicts": [asdict(x) for x in verdicts]}, indent=1))
    else:
        print(render(verdicts))
    return 0
