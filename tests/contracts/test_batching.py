"""The admin API's body, declared once: the service answers it, the controller parses it."""

from __future__ import annotations

from typing import Any

import pytest

from governor.contracts.batching import BatchingLimits, BatchingReport, BodyError, requested
from governor.controller import model
from governor.controller.actuator import ActuationError, parse_limits
from governor.inference.engines import base

REPORT = BatchingReport(BatchingLimits(256, 8192), BatchingLimits(1, 256),
                        BatchingLimits(256, 8192))


def test_the_service_and_the_controller_speak_the_same_shapes() -> None:
    assert base.BatchingLimits is BatchingLimits
    assert model.Limits is BatchingLimits
    assert model.TargetLimits is BatchingReport
    assert parse_limits(REPORT.as_dict()) == REPORT


def test_a_report_survives_json_both_ways() -> None:
    assert BatchingReport.from_dict(REPORT.as_dict()) == REPORT
    assert REPORT.as_dict()["floor"] == {"max_num_seqs": 1, "max_num_batched_tokens": 256}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param({"max_num_batched_tokens": 2048}, BatchingLimits(256, 2048),
                     id="one field keeps the other"),
        pytest.param({"max_num_seqs": 8, "max_num_batched_tokens": 256}, BatchingLimits(8, 256),
                     id="both fields, at the floor"),
        pytest.param({"max_num_seqs": 256}, BatchingLimits(256, 8192), id="the ceiling itself"),
    ],
)
def test_a_put_merges_with_the_limits_in_force(body: dict[str, int],
                                               expected: BatchingLimits) -> None:
    assert requested(body, REPORT) == expected


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        pytest.param({"max_num_seqs": 0}, 422, "max_num_seqs", id="below the floor"),
        pytest.param({"max_num_batched_tokens": 9000}, 422, "max_num_batched_tokens",
                     id="above the ceiling"),
        pytest.param({"max_num_seqs": 10**5000}, 422, "max_num_seqs",
                     id="an integer too long to print"),
        pytest.param({"max_num_seqs": True}, 400, "max_num_seqs", id="a boolean"),
        pytest.param({"max_num_seqs": 8.0}, 400, "max_num_seqs", id="a float"),
        pytest.param({"max_num_seqs": [8]}, 400, "max_num_seqs", id="a list"),
        pytest.param({"x" * 10_000: 1}, 400, "x" * 64, id="an unknown, huge field name"),
        pytest.param({}, 400, None, id="no field"),
        pytest.param([1, 2], 400, None, id="not an object"),
        pytest.param(None, 400, None, id="null"),
    ],
)
def test_a_put_that_cannot_apply_says_why(body: Any, status: int, param: str | None) -> None:
    with pytest.raises(BodyError) as caught:
        requested(body, REPORT)
    assert (caught.value.status, caught.value.param) == (status, param)
    assert len(caught.value.message) < 400


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(None, id="null"),
        pytest.param([], id="a list"),
        pytest.param({"max_num_seqs": 1, "max_num_batched_tokens": 1}, id="no floor"),
        pytest.param({**REPORT.as_dict(), "max_num_seqs": 0}, id="a zero limit"),
        pytest.param({**REPORT.as_dict(), "max_num_seqs": False}, id="a boolean limit"),
        pytest.param({**REPORT.as_dict(), "floor": "x"}, id="a floor that is a string"),
    ],
)
def test_a_malformed_answer_is_refused_by_the_controller(answer: Any) -> None:
    with pytest.raises(ValueError, match="must be"):
        BatchingReport.from_dict(answer)
    with pytest.raises(ActuationError, match="malformed admin answer"):
        parse_limits(answer)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        pytest.param({**REPORT.as_dict(), "max_num_batched_tokens": 10**30},
                     "integers from 1 to 2147483647", id="a limit of 10^30"),
        pytest.param({**REPORT.as_dict(), "ceiling": {"max_num_seqs": 2**31,
                                                      "max_num_batched_tokens": 8192}},
                     "integers from 1 to 2147483647", id="a ceiling past 32 bits"),
        pytest.param({**REPORT.as_dict(), "floor": {"max_num_seqs": 512,
                                                    "max_num_batched_tokens": 256}},
                     "lies above the ceiling", id="a floor above the ceiling"),
        pytest.param({**REPORT.as_dict(), "max_num_batched_tokens": 100},
                     "lie outside", id="limits in force below the floor"),
    ],
)
def test_a_report_past_the_contracts_bounds_is_refused_before_use(answer: Any,
                                                                  message: str) -> None:
    """N5: the controller neither decides on nor saves limits no server can hold."""
    with pytest.raises(ValueError, match=message):
        BatchingReport.from_dict(answer)
    with pytest.raises(ActuationError, match=message):
        parse_limits(answer)
