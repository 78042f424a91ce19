"""The audit trail: one JSON line per decision that changed something (or changed its reason).

Each line explains itself: what was decided and why, the inputs it saw, the limits before and
after, whether the change reached the engine, what started the pass that decided it (the alerts
Alertmanager's webhook woke it for, by name; the periodic check; or the first pass at start), on
a server with several data-parallel ranks which rank the law judged, and any reading refused as
outside the admin API's contract (a line is written when those change too)::

    {"at": "2026-11-29T10:00:15.000Z", "target": "a:8000", "action": "tighten",
     "reason": "itl_breach", "before": {...}, "after": {...}, "applied": true, ...,
     "woken_by": {"by": "alert", "alerts": ["InterTokenLatencyP99High"]},
     "ranks": {"judged": "1", "of": 2, "itl_tail_seconds": {"0": 0.041, "1": 0.18}}}
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from governor.contracts.alerting import WOKEN_BY_ALERT
from governor.controller.model import Decision

log = logging.getLogger(__name__)


def what_woke(trigger: str, alerts: Sequence[str] = ()) -> dict[str, Any]:
    """What started a pass, as its audit lines and ``/status`` show it: ``{"by": "alert",
    "alerts": [...]}`` (the alerts whose notification woke it, by name), ``{"by": "periodic"}``
    or ``{"by": "start"}``."""
    if trigger == WOKEN_BY_ALERT:
        return {"by": trigger, "alerts": list(alerts)}
    return {"by": trigger}


def record(target: str, decision: Decision, *, at: float, applied: bool, dry_run: bool,
           error: str | None = None, ranks: Mapping[str, object] | None = None,
           woken_by: Mapping[str, object] | None = None,
           admission_applied: bool = False, admission_error: str | None = None,
           queued_tokens_applied: bool = False, queued_tokens_error: str | None = None,
           refused: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The audit line of one decision (pure); ``ranks``: under data parallelism, the rank the
    law judged and every rank's tail (:meth:`Observation.ranks`), else ``None``; ``woken_by``:
    what started the pass (:func:`what_woke`). A move of the
    admission knob has its own entry (``admission``: the slack before and after, why, whether
    it reached the target); ``None`` when the law left it. So has a move of vLLM's own bound
    (``vllm_queued_tokens``: ``max_num_queued_tokens`` before and after, ``None`` unbounded).
    ``refused``: the target's readings refused where they entered, outside the admin API's
    contract (:attr:`Observation.refused`: field → why), ``None`` when there are none."""
    moved, queued = decision.admission, decision.queued_tokens
    return {
        "at": iso(at),
        "target": target,
        "action": decision.action.value,
        "reason": decision.reason.value,
        "before": decision.before.as_dict(),
        "after": decision.after.as_dict(),
        "applied": applied,
        "dry_run": dry_run,
        "error": error,
        "explanation": decision.explanation,
        "inputs": dict(decision.inputs),
        "desired_replicas": {"replicas": decision.scale.replicas,
                             "needed": round(decision.scale.replicas_needed, 3),
                             "reason": decision.scale.reason},
        "ranks": None if ranks is None else dict(ranks),
        "woken_by": None if woken_by is None else dict(woken_by),
        "admission": None if moved is None else {
            "deadline_slack_before": moved.before, "deadline_slack_after": moved.after,
            "explanation": moved.explanation, "applied": admission_applied,
            "error": admission_error},
        "vllm_queued_tokens": None if queued is None else {
            "max_num_queued_tokens_before": queued.before,
            "max_num_queued_tokens_after": queued.after, "explanation": queued.explanation,
            "applied": queued_tokens_applied, "error": queued_tokens_error},
        "refused": dict(refused) if refused else None,
    }


def iso(unix_seconds: float) -> str:
    stamp = dt.datetime.fromtimestamp(unix_seconds, tz=dt.UTC)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class AuditLog:
    """Appends audit lines to a file (``None``: to the log only)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def write(self, line: dict[str, Any]) -> None:
        text = json.dumps(line, sort_keys=True, allow_nan=False, default=str)
        log.info("decision %s", text)
        if self.path is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(text + "\n")
        except OSError as exc:
            # The decision stands; losing its audit line must not stop the controller.
            log.error("cannot append to audit log %s: %s", self.path, exc)
