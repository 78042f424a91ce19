"""The admission bound across API processes (``--api-server-count N``) and vLLM's own
``max_num_queued_tokens``, through ``/admin/admission``: two gates of one server sharing the
bound's file, as two API processes do, on fake vLLM apps; hostile files and bodies."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from governor.common.secrets import Secret
from governor.contracts.admission import AdmissionBound, requested
from governor.contracts.batching import BodyError
from governor.contracts.endpoints import CHAT_COMPLETIONS_PATH
from governor.vllm import AdminMiddleware
from governor.vllm.admin import AdminSettings
from governor.vllm.admission import AdmissionMiddleware
from governor.vllm.endpoint import AdminEndpoints
from governor.vllm.shared_bound import FILE_NAME, FOLDER_ENV, MAX_FILE_BYTES, SharedBound
from tests.vllm.test_gate import Clock, FakeVllm, RecordingApp, post, warm
from tests.vllm.test_gate_admin import TOKEN, admin, settings

SERVER = "4242:977"


class Process:
    """One API process: its vLLM app (with the scheduler config vLLM reads per request, where
    ``queued_tokens`` says this vLLM has the bound) and its gate."""

    def __init__(self, folder: Path | None, *, queued_tokens: bool = True) -> None:
        self.app, self.clock = FakeVllm(), Clock()
        if queued_tokens:
            self.app.engine_client.scheduler_config = SimpleNamespace(max_num_queued_tokens=None)
        shared = None if folder is None else SharedBound(folder / FILE_NAME, SERVER)
        self.gate = AdmissionMiddleware(self.app, settings(), registry=CollectorRegistry(),
                                        clock=self.clock, admin=AdminSettings(Secret(TOKEN)),
                                        shared=shared)

    @property
    def vllm_bound(self) -> Any:
        return self.app.engine_client.scheduler_config.max_num_queued_tokens

    async def admin(self, method: str, body: bytes = b"") -> tuple[int, Any]:
        return await admin(self.gate, method, body, app=self.app)


async def test_a_put_on_one_process_moves_the_gate_of_the_other_at_its_next_sync(
        tmp_path: Path) -> None:
    one, two = Process(tmp_path), Process(tmp_path)
    two.clock.now = warm(two.gate.gate, 1000.0)
    # 500 prompt tokens ahead in the second process: within a chat's 1 s deadline at slack 1.
    two.gate.gate.admit("other", "chat", 500,
                        two.gate.gate.judge("chat", 1, two.clock.now, waited=0.0), two.clock.now)
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    assert (await post(two.gate, two.app, CHAT_COMPLETIONS_PATH, chat))[0]["status"] == 200
    status, answer = await one.admin("PUT", b'{"deadline_slack": 0.3, '
                                            b'"max_num_queued_tokens": 4096}')
    assert (status, answer["deadline_slack"], answer["max_num_queued_tokens"]) == (200, 0.3, 4096)
    assert one.vllm_bound == 4096
    # The next arrival in the second process syncs first: late at 0.3 s, and vLLM's bound moved.
    two.clock.now += 0.2
    assert (await post(two.gate, two.app, CHAT_COMPLETIONS_PATH, chat))[0]["status"] == 429
    assert two.vllm_bound == 4096
    status, got = await two.admin("GET")
    assert (got["deadline_slack"], got["max_num_queued_tokens"]) == (0.3, 4096)
    # The way back, from the second process.
    await two.admin("PUT", b'{"deadline_slack": 1.0, "max_num_queued_tokens": null}')
    _, got = await one.admin("GET")
    assert (got["deadline_slack"], got["max_num_queued_tokens"], one.vllm_bound) == (1.0, None,
                                                                                     None)


async def test_without_a_shared_folder_each_process_keeps_its_own_bound() -> None:
    one, two = Process(None), Process(None)
    await one.admin("PUT", b'{"deadline_slack": 0.3}')
    assert (await two.admin("GET"))[1]["deadline_slack"] == 1.0


async def test_a_process_that_has_taken_no_request_applies_vllms_bound_at_its_next_sync(
        tmp_path: Path) -> None:
    one, two = Process(tmp_path), Process(tmp_path)
    await one.admin("PUT", b'{"max_num_queued_tokens": 2048}')
    two.gate.sync(0.0)  # the follower's sync with no request yet: its vLLM is not known
    assert two.vllm_bound is None
    two.clock.now = 0.2  # the next sync is due: the arrival makes it, before vLLM sees it
    await post(two.gate, two.app, CHAT_COMPLETIONS_PATH,
               {"messages": [{"role": "user", "content": "hi"}]})
    assert two.vllm_bound == 2048


def test_the_folder_is_vllms_metrics_folder_and_absent_with_one_api_process(
        tmp_path: Path) -> None:
    shared = SharedBound.from_env({FOLDER_ENV: str(tmp_path)})
    assert shared is not None and shared.path == tmp_path / FILE_NAME
    assert SharedBound.from_env({}) is None


HOSTILE_FILES = [
    ("not json", b"{not json"),
    ("a list", b"[1, 2]"),
    ("a slack out of range", json.dumps({"server": SERVER,
                                         "bound": {"deadline_slack": -1}}).encode()),
    ("an unknown field", json.dumps({"server": SERVER,
                                     "bound": {"deadline_slack": 0.5, "evil": 1}}).encode()),
    ("a bound of zero tokens", json.dumps({"server": SERVER,
                                           "bound": {"max_num_queued_tokens": 0}}).encode()),
    ("no bound", json.dumps({"server": SERVER}).encode()),
    ("oversized", json.dumps({"server": SERVER, "bound": {"deadline_slack": 0.5},
                              "pad": "x" * MAX_FILE_BYTES}).encode()),
    ("deeply nested", b"[" * 3000),
    ("another server's", json.dumps({"server": "1:1",
                                     "bound": {"deadline_slack": 0.5}}).encode()),
]


@pytest.mark.parametrize("content", [c for _, c in HOSTILE_FILES],
                         ids=[name for name, _ in HOSTILE_FILES])
async def test_a_file_that_is_not_a_bound_is_ignored_and_the_last_good_one_stays(
        tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture) -> None:
    one, two = Process(tmp_path), Process(tmp_path)
    await one.admin("PUT", b'{"deadline_slack": 0.4, "max_num_queued_tokens": 512}')
    two.gate.sync(0.0)
    (tmp_path / FILE_NAME).write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="governor.vllm.admission"):
        two.gate.sync(1.0)
        two.gate.sync(2.0)  # read once, logged once
        status, got = await two.admin("GET")
    assert (status, got["deadline_slack"], got["max_num_queued_tokens"]) == (200, 0.4, 512)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "the bound in force stays" in warnings[0], warnings


async def test_a_bound_that_cannot_be_shared_is_not_applied(tmp_path: Path) -> None:
    one = Process(tmp_path / "gone")  # vLLM's folder removed under the server
    status, answer = await one.admin("PUT", b'{"deadline_slack": 0.3}')
    assert status == 503 and answer["error"]["code"] == "not_shared"
    assert (await one.admin("GET"))[1]["deadline_slack"] == 1.0


def test_the_file_is_replaced_whole_and_leaves_nothing_beside_it(tmp_path: Path) -> None:
    shared = SharedBound(tmp_path / FILE_NAME, SERVER)
    for slack in (0.5, 0.6):
        shared.publish(AdmissionBound(slack, None))
    assert [p.name for p in tmp_path.iterdir()] == [FILE_NAME]
    reader = SharedBound(tmp_path / FILE_NAME, SERVER)
    assert reader.read(AdmissionBound(1.0, None)) == AdmissionBound(0.6, None,
                                                                     vllm_queued_tokens=True)
    assert reader.read(AdmissionBound(1.0, None)) is None  # unchanged: not read again


QUEUED_BODIES = [
    (b'{"max_num_queued_tokens": 0}', 422),
    (b'{"max_num_queued_tokens": -1}', 422),
    (b'{"max_num_queued_tokens": 1000000000001}', 422),
    (b'{"max_num_queued_tokens": 1.5}', 400),
    (b'{"max_num_queued_tokens": "4096"}', 400),
    (b'{"max_num_queued_tokens": true}', 400),
    (b'{"deadline_slack": 0.5, "max_num_queued_tokens": [1]}', 400),
]


@pytest.mark.parametrize(("body", "status"), QUEUED_BODIES,
                         ids=[b.decode()[:48] for b, _ in QUEUED_BODIES])
async def test_a_hostile_vllm_bound_is_refused_and_changes_nothing(
        tmp_path: Path, body: bytes, status: int) -> None:
    one = Process(tmp_path)
    got, answer = await one.admin("PUT", body)
    assert got == status and answer["error"]["param"] == "max_num_queued_tokens"
    assert one.vllm_bound is None and not (tmp_path / FILE_NAME).exists()
    assert one.gate.gate.deadline.settings.slack == 1.0


async def test_a_vllm_without_the_bound_reports_none_and_refuses_a_put_of_it(
        tmp_path: Path) -> None:
    old = Process(tmp_path, queued_tokens=False)  # vLLM 0.25's scheduler config: no such bound
    _, got = await old.admin("GET")
    assert "max_num_queued_tokens" not in got
    status, answer = await old.admin("PUT", b'{"max_num_queued_tokens": 4096}')
    assert (status, answer["error"]["code"]) == (422, "unsupported")


def test_a_server_without_vllms_bound_refuses_a_put_of_it_by_the_contract() -> None:
    # governor serve's route builds its bound so: vLLM's own is not there to move.
    with pytest.raises(BodyError) as refused:
        requested({"deadline_slack": 0.5, "max_num_queued_tokens": 4096}, AdmissionBound(1.0, None))
    assert (refused.value.status, refused.value.code) == (422, "unsupported")
    assert "max_num_queued_tokens" not in AdmissionBound(1.0, None).as_dict()


class OptionsApp(RecordingApp):
    """vLLM's app as the endpoint plugin sees it, keeping what each middleware is built with."""

    def __init__(self) -> None:
        super().__init__([])
        self.options: list[dict[str, Any]] = []

    def add_middleware(self, cls: Any, **options: Any) -> None:
        super().add_middleware(cls, **options)
        self.options.append(options)


def test_both_ways_in_share_the_bound_in_vllms_metrics_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FOLDER_ENV, str(tmp_path))
    wrapped = AdminMiddleware(FakeVllm(), AdminSettings(Secret(TOKEN)), gate=settings(),
                              registry=CollectorRegistry())
    assert isinstance(wrapped.app, AdmissionMiddleware)
    assert wrapped.app.knobs.shared is not None
    assert wrapped.app.knobs.shared.path == tmp_path / FILE_NAME
    app = OptionsApp()
    AdminEndpoints(AdminSettings(Secret(TOKEN)), gate=settings()).attach_router(app)
    (options,) = app.options
    assert options["shared"].path == tmp_path / FILE_NAME
