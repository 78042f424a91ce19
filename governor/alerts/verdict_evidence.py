"""The numbers behind each cause of a verdict, and the sentence an alert carries about it.

Each cause has a few pieces of evidence: a PromQL query over the verdict's recorded inputs for
one target (``{instance}`` is replaced by its quoted ``instance``), a label and a unit.
``governor why`` prints them now and over the long window; the burn alerts carry the leading
cause and its evidence in their ``verdict`` annotation, a Go template that Prometheus runs when
the alert fires::

    >>> [e.label for e in EVIDENCE["gpu_throttled"]]
    ['SM clock, of its highest']
    >>> EVIDENCE["queue"][0].query('"a:8000"')
    'max(verdict:ttft_part:seconds{instance="a:8000", part="queue"})'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from governor.contracts import causes
from governor.contracts.causes import Latency
from governor.contracts.metrics import verdict as v
from governor.contracts.metrics.slo import LABEL_SERVICE, LABEL_SLO
from governor.slo.spec import SLO, LatencySLI, SloSpec

Unit = Literal["ratio", "seconds", "per_second", "count"]
VERDICT_ANNOTATION: Final = "verdict"


def path_of(slo: SLO) -> Latency | None:
    """The path a latency SLO's histogram lies on; ``None`` for one the verdict does not split
    (a ratio SLI, a whole request's duration)."""
    if not isinstance(slo.sli, LatencySLI):
        return None
    return causes.PATHS.get(slo.sli.metric)


@dataclass(frozen=True, slots=True)
class Evidence:
    label: str
    template: str  # PromQL with {instance} where the quoted instance goes
    unit: Unit

    def query(self, quoted_instance: str) -> str:
        return self.template.replace("{instance}", quoted_instance)


def _target(metric: str, **labels: str) -> str:
    extra = "".join(f', {k}="{value}"' for k, value in labels.items())
    return f"max({metric}{{instance={{instance}}{extra}}})"


def _node(metric: str) -> str:
    """A per-node input, at the target's node."""
    return (f"max({metric} * on ({v.LABEL_NODE}) group_left () "
            f"{v.TARGET_NODE.name}{{instance={{instance}}}})")


EVIDENCE: Final[Mapping[str, tuple[Evidence, ...]]] = {
    causes.BATCHING.name: (
        Evidence("tokens in the tallest steps (p99.9)", _target(v.STEP_TOKENS.name), "count"),
        Evidence("requests running at most", _target(v.RUNNING.name), "count"),
        Evidence("median inter-token latency now", _target(v.ENGINE_ITL_MEDIAN_NOW.name),
                 "seconds"),
    ),
    causes.KV_CACHE.name: (
        Evidence("preemptions per second", _target(v.PREEMPTIONS.name), "per_second"),
        Evidence("KV cache used at most", _target(v.KV_USAGE.name), "ratio"),
    ),
    causes.QUEUE.name: (
        Evidence("time in the queues (p99)", _target(v.TTFT_PART.name, part=v.PART_QUEUE),
                 "seconds"),
        Evidence("requests waiting", _target(v.WAITING.name), "count"),
    ),
    causes.GPU_COMPUTE_BOUND.name: (
        Evidence("SM activity", _node(v.GPU_SM_ACTIVE.name), "ratio"),
        Evidence("tensor-pipe activity", _node(v.GPU_TENSOR_ACTIVE.name), "ratio"),
    ),
    causes.GPU_MEMORY_BOUND.name: (
        Evidence("DRAM bandwidth used", _node(v.GPU_DRAM_ACTIVE.name), "ratio"),
    ),
    causes.GPU_THROTTLED.name: (
        Evidence("SM clock, of its highest",
                 f"1 - {_node(v.GPU_CLOCK_DEFICIT.name)}", "ratio"),
    ),
    causes.GPU_SHARED.name: (
        Evidence("median step against the usual one",
                 f"{_target(v.ENGINE_ITL_MEDIAN.name)} / "
                 f"{_target(v.ENGINE_ITL_MEDIAN_BASELINE.name)}", "count"),
        Evidence("another process's SM share (where read)", _node(v.GPU_COTENANT.name),
                 "ratio"),
    ),
    causes.GPU_FAULT.name: (
        Evidence("XIDs, uncorrected ECC errors and lost GPUs", _node(v.GPU_FAULT.name),
                 "count"),
    ),
    causes.INTERCONNECT.name: (
        Evidence("busiest link, of its capacity", _node(v.GPU_LINK.name), "ratio"),
        Evidence("slowest rank's median step over the fastest's", _target(v.RANK_SPREAD.name),
                 "count"),
    ),
    causes.TOKENIZER.name: (
        Evidence("parsing, template and tokenizer (p99)",
                 _target(v.TTFT_PART.name, part=v.PART_TEXT), "seconds"),
    ),
    causes.CLIENT_STREAM.name: (
        Evidence("writing to clients, of the time between tokens",
                 _target(v.STREAM_WRITE_SHARE.name), "ratio"),
    ),
    causes.REQUEST_READ.name: (
        Evidence("reading the request (p99)", _target(v.TTFT_PART.name, part=v.PART_READ),
                 "seconds"),
    ),
    causes.UNKNOWN.name: (),
}

_HUMANIZE: Final[Mapping[Unit, str]] = {
    "ratio": "humanizePercentage", "seconds": "humanizeDuration", "per_second": "humanize",
    "count": "humanize",
}


def _go_raw(text: str) -> str:
    """A Go raw string literal (no backquote can occur in a generated query)."""
    assert "`" not in text
    return f"`{text}`"


def _evidence_template(cause: causes.Cause) -> str:
    """``: label value, label value`` for the leading cause (``$i`` is its instance)."""
    parts = []
    for item in EVIDENCE[cause.name]:
        query = item.query("%q")
        args = " $i" * query.count("%q")
        parts.append(f"{{{{ with query (printf {_go_raw(query)}{args}) }}}}"
                     f"{item.label} {{{{ . | first | value | {_HUMANIZE[item.unit]} }}}}"
                     "{{ end }}")
    if cause is causes.GPU_THROTTLED:  # which reasons hold the clock down
        reasons = (f"{v.GPU_CLOCK_DEFICIT.name} * on ({v.LABEL_NODE}) group_left () "
                   f"{v.TARGET_NODE.name}{{instance=%q}}")
        parts.append(f"held by{{{{ range query (printf {_go_raw(reasons)} $i) }}}} "
                     f"{{{{ .Labels.{v.LABEL_REASON} }}}}{{{{ end }}}}")
    return "; ".join(parts)


def annotation(spec: SloSpec, slo: SLO, *, instance: bool = False
               ) -> dict[str, tuple[str, str]]:
    """The ``verdict`` annotation of an alert on ``slo`` where the verdict splits its latency,
    as ``{name: (template, text without a verdict)}``: the leading cause on any target
    (``instance``: on the alert's own) and its evidence; the second text is what a promtool
    test without verdict series sees."""
    if path_of(slo) is None:
        return {}
    on = f'{LABEL_SLO}="{slo.name}", {LABEL_SERVICE}="{spec.service}"'
    if instance:
        leading = (f"query (printf `topk(1, {v.CAUSE_SHARE.name}{{{on}, instance=%q}})` "
                   "$labels.instance)")
    else:
        leading = f"query `topk(1, {v.CAUSE_SHARE.name}{{{on}}})`"
    empty = ("no verdict: the SLO does not burn on any target in the verdict's window, or the "
             "verdict rules are not loaded")
    branches = "".join(
        f'{{{{ if eq $c "{cause.name}" }}}}: {_evidence_template(cause)}'
        f" (runbook {spec.alerting.runbook(cause.runbook_anchor)}){{{{ end }}}}"
        for cause in causes.CAUSES if EVIDENCE[cause.name])
    template = (f"{{{{ with {leading} }}}}"
                "{{ with index . 0 }}{{ $i := .Labels.instance }}{{ $c := .Labels.cause }}"
                "{{ $c }} explains {{ .Value | humanizePercentage }} of the breach on {{ $i }}"
                f"{branches}{{{{ end }}}}{{{{ else }}}}{empty}{{{{ end }}}}")
    return {VERDICT_ANNOTATION: (template, empty)}
