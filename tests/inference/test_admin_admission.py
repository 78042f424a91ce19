"""The admin admission API: the deadline slack and the bound on tokens ahead, moved live behind
the admin token, and what the deadline gate measures."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from governor.common.secrets import Secret
from governor.contracts.admission import AdmissionBound, requested
from governor.contracts.batching import BodyError
from governor.controller.actuator import ActuationError, BatchingClient, ErrorKind
from governor.controller.model import Target
from governor.inference.config import AdmissionSettings
from tests.inference.conftest import ADMIN_TOKEN, Service, ServiceFactory

AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


async def call(service: Service, method: str, body: Any = None,
               headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as session, session.request(
        method, f"{service.url}/admin/admission", json=body, headers=headers
    ) as response:
        return response.status, await response.json()


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}],
                         ids=["no token", "a wrong token"])
async def test_without_the_right_token_it_is_401(service: Service,
                                                 headers: dict[str, str]) -> None:
    for method in ("GET", "PUT"):
        status, body = await call(service, method, {"deadline_slack": 2}, headers)
        assert status == 401 and body["error"]["type"] == "authentication_error"


async def test_the_slack_and_the_bound_move_live_and_show(make_service: ServiceFactory) -> None:
    service = await make_service(admission=AdmissionSettings(
        first_token_targets=(("default", 1.0),)))
    status, report = await call(service, "GET", headers=AUTH)
    assert status == 200
    assert report == {"deadline_slack": 1.0, "max_tokens_ahead": None,
                      "deadlines": {"default": 1.0}, "prefill_tokens_per_second": None,
                      "backlog_prompt_tokens": 0}
    status, report = await call(service, "PUT", {"deadline_slack": 2.5}, AUTH)
    assert status == 200 and report["deadlines"] == {"default": 2.5}
    status, report = await call(service, "PUT", {"max_tokens_ahead": 40000}, AUTH)
    assert (report["deadline_slack"], report["max_tokens_ahead"]) == (2.5, 40000)
    assert service.sample("governor_admission_deadline_slack") == 2.5
    status, report = await call(service, "PUT", {"max_tokens_ahead": None}, AUTH)
    assert status == 200 and report["max_tokens_ahead"] is None


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        pytest.param([], 400, None, id="not an object"),
        pytest.param({}, 400, None, id="no field"),
        pytest.param({"slack": 2}, 400, "slack", id="an unknown field"),
        pytest.param({"deadline_slack": "2"}, 400, "deadline_slack", id="a string"),
        pytest.param({"deadline_slack": True}, 400, "deadline_slack", id="a boolean"),
        pytest.param({"deadline_slack": 0}, 422, "deadline_slack", id="zero"),
        pytest.param({"deadline_slack": 1e-300}, 422, "deadline_slack", id="next to zero"),
        pytest.param({"deadline_slack": 0.009}, 422, "deadline_slack", id="under a hundredth"),
        pytest.param({"deadline_slack": 1e300}, 422, "deadline_slack", id="huge"),
        pytest.param({"deadline_slack": 10**400}, 422, "deadline_slack", id="a 400-digit int"),
        pytest.param({"max_tokens_ahead": 1.5}, 400, "max_tokens_ahead", id="a fraction"),
        pytest.param({"max_tokens_ahead": -1}, 422, "max_tokens_ahead", id="negative"),
    ],
)
def test_a_bad_body_is_refused_with_its_field(body: object, status: int,
                                              param: str | None) -> None:
    with pytest.raises(BodyError) as refused:
        requested(body, AdmissionBound(1.0, None))
    assert (refused.value.status, refused.value.param) == (status, param)


async def test_a_bad_body_changes_nothing(service: Service) -> None:
    status, body = await call(service, "PUT", {"deadline_slack": -1, "max_tokens_ahead": 5},
                              AUTH)
    assert status == 422 and body["error"]["param"] == "deadline_slack"
    _, report = await call(service, "GET", headers=AUTH)
    assert (report["deadline_slack"], report["max_tokens_ahead"]) == (1.0, None)


def test_the_bound_s_body_round_trips() -> None:
    assert AdmissionBound(1.5, 8).as_dict() == {"deadline_slack": 1.5, "max_tokens_ahead": 8}
    assert requested({"deadline_slack": 3}, AdmissionBound(1.0, 8)) == AdmissionBound(3.0, 8)


async def test_the_controller_s_actuator_moves_the_slack_of_governor_serve(
        make_service: ServiceFactory) -> None:
    """The admission knob end to end on the service: the controller's admin-api actuator puts
    the slack, the service's gate and /metrics have it; a wrong token is permanent."""
    service = await make_service(admission=AdmissionSettings(
        first_token_targets=(("default", 1.0),)))
    target = Target("svc", service.url)
    async with aiohttp.ClientSession() as session:
        assert await BatchingClient(session, Secret(ADMIN_TOKEN)).set_slack(target, 0.7) == 0.7
        with pytest.raises(ActuationError) as refused:
            await BatchingClient(session, Secret("wrong")).set_slack(target, 0.2)
    assert refused.value.kind is ErrorKind.PERMANENT and "wrong" not in refused.value.message
    assert service.sample("governor_admission_deadline_slack") == 0.7
    status, report = await call(service, "GET", headers=AUTH)
    assert (status, report["deadline_slack"], report["deadlines"]) == (200, 0.7, {"default": 0.7})
