"""The audit trail and Grafana annotations explain each decision by themselves."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from governor.common.secrets import Secret
from governor.contracts.alerting import WOKEN_BY_ALERT
from governor.controller.audit import AuditLog, record, what_woke
from governor.controller.grafana import TAG, GrafanaAnnotator
from governor.controller.model import (
    Action,
    AdmissionChange,
    Decision,
    Limits,
    Observation,
    QueuedTokensChange,
    Reason,
    TargetState,
)

DECISION = Decision(Action.TIGHTEN, Reason.ITL_BREACH, Limits(64, 8192), Limits(64, 3328),
                    "tighten max_num_batched_tokens 8192 → 3328: spikes", TargetState(),
                    {"itl_tail_seconds": 0.21, "ttft_tail_seconds": None})


def test_an_audit_line_holds_reason_inputs_before_and_after(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit" / "decisions.jsonl")
    log.write(record("a:8000", DECISION, at=0.0, applied=True, dry_run=False,
                     woken_by=what_woke(WOKEN_BY_ALERT, ["InterTokenLatencyP99High"])))
    log.write(record("a:8000", DECISION, at=1.5, applied=False, dry_run=False, error="HTTP 503"))
    text = (tmp_path / "audit" / "decisions.jsonl").read_text()
    lines = [json.loads(x) for x in text.splitlines()]
    assert lines[0] == {
        "at": "1970-01-01T00:00:00.000Z", "target": "a:8000", "action": "tighten",
        "reason": "itl_breach", "before": {"max_num_seqs": 64, "max_num_batched_tokens": 8192},
        "after": {"max_num_seqs": 64, "max_num_batched_tokens": 3328}, "applied": True,
        "dry_run": False, "error": None, "explanation": DECISION.explanation,
        "inputs": {"itl_tail_seconds": 0.21, "ttft_tail_seconds": None},
        "desired_replicas": {"replicas": 1, "needed": 1.0, "reason": "not_overloaded"},
        "ranks": None, "admission": None, "vllm_queued_tokens": None, "refused": None,
        "woken_by": {"by": "alert", "alerts": ["InterTokenLatencyP99High"]},
    }
    assert (lines[1]["error"], lines[1]["woken_by"]) == ("HTTP 503", None)


def test_a_move_of_the_deadline_slack_is_in_the_line_with_why_and_whether_it_landed() -> None:
    moved = replace(DECISION, admission=AdmissionChange(1.0, 0.7, "slack 1 → 0.7: the cut"))
    line = record("a:8000", moved, at=0.0, applied=True, dry_run=False, admission_applied=True)
    assert line["admission"] == {"deadline_slack_before": 1.0, "deadline_slack_after": 0.7,
                                 "explanation": "slack 1 → 0.7: the cut", "applied": True,
                                 "error": None}
    failed = record("a:8000", moved, at=0.0, applied=True, dry_run=False,
                    admission_error="PUT a:8000: HTTP 404: Not Found")
    assert (failed["admission"]["applied"], failed["admission"]["error"]) == \
        (False, "PUT a:8000: HTTP 404: Not Found")


def test_a_move_of_vllms_own_bound_is_in_the_line_with_why_and_whether_it_landed() -> None:
    moved = replace(DECISION, queued_tokens=QueuedTokensChange(None, 9361, "unbounded → 9361"))
    line = record("a:8000", moved, at=0.0, applied=True, dry_run=False,
                  queued_tokens_applied=True)
    assert line["vllm_queued_tokens"] == {"max_num_queued_tokens_before": None,
                                          "max_num_queued_tokens_after": 9361,
                                          "explanation": "unbounded → 9361", "applied": True,
                                          "error": None}
    assert line["admission"] is None
    failed = record("a:8000", moved, at=0.0, applied=True, dry_run=False,
                    queued_tokens_error="PUT a:8000: HTTP 422: unsupported")
    assert (failed["vllm_queued_tokens"]["applied"], failed["vllm_queued_tokens"]["error"]) == \
        (False, "PUT a:8000: HTTP 422: unsupported")
    json.dumps(line, allow_nan=False)  # as AuditLog writes it


def test_under_data_parallelism_the_audit_line_names_the_judged_rank_and_every_ranks_tail(
) -> None:
    observed = Observation(0.18, 0.01, rank="1", rank_itl_tails={"0": 0.041, "1": 0.18})
    line = record("a:8000", DECISION, at=0.0, applied=True, dry_run=False,
                  ranks=observed.ranks())
    assert line["ranks"] == {"judged": "1", "of": 2,
                             "itl_tail_seconds": {"0": 0.041, "1": 0.18}}
    json.dumps(line, allow_nan=False)  # as AuditLog writes it


def test_an_unwritable_audit_log_does_not_stop_the_decision(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    AuditLog(blocker / "audit.jsonl").write(record("a", DECISION, at=0.0, applied=True,
                                                   dry_run=False))


ServerFactory = Callable[[web.Application], Awaitable[TestServer]]


async def test_changes_are_annotated_on_grafana_with_the_token(
    aiohttp_server: ServerFactory,
) -> None:
    received: list[tuple[str | None, Any]] = []

    async def annotations(request: web.Request) -> web.Response:
        received.append((request.headers.get("Authorization"), await request.json()))
        return web.json_response({"id": 1, "message": "Annotation added"})

    app = web.Application()
    app.router.add_post("/api/annotations", annotations)
    server = await aiohttp_server(app)
    async with aiohttp.ClientSession() as session:
        annotator = GrafanaAnnotator(session, str(server.make_url("/")), Secret("g-token"))
        assert await annotator.annotate("a:8000", DECISION, 12.5)
    ((auth, body),) = received
    assert auth == "Bearer g-token"
    assert body == {"time": 12500, "tags": [TAG, "a:8000", "tighten", "itl_breach"],
                    "text": f"a:8000: {DECISION.explanation}"}


async def test_a_failing_grafana_is_logged_not_raised(aiohttp_server: ServerFactory) -> None:
    async def refuse(request: web.Request) -> web.Response:
        return web.json_response({"message": "no"}, status=403)

    app = web.Application()
    app.router.add_post("/api/annotations", refuse)
    server = await aiohttp_server(app)
    async with aiohttp.ClientSession() as session:
        assert not await GrafanaAnnotator(session, str(server.make_url("/")),
                                          None).annotate("a", DECISION, 0.0)
        assert not await GrafanaAnnotator(session, "http://127.0.0.1:9", None,
                                          timeout_seconds=1.0).annotate("a", DECISION, 0.0)
