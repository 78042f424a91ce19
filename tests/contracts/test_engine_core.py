"""The engine-core report on the wire: the fields and their order the plugin has always sent,
read back the same, and anything else refused."""

from __future__ import annotations

from typing import Any

import pytest

from governor.contracts.batching import BatchingLimits
from governor.contracts.engine_core import EngineCoreReport, RetuningReport, rank_report

RETUNING = RetuningReport("running", BatchingLimits(2, 512), BatchingLimits(8, 2048),
                          admission_cap=6, num_running=6, steps_since_change=3,
                          largest_step_tokens_since_change=512)


def test_a_retunable_engines_answer_has_the_fields_in_the_order_the_plugin_sends() -> None:
    assert list(EngineCoreReport(4242, 1, RETUNING).to_dict().items()) == [
        ("supported", True), ("pid", 4242), ("dp_rank", 1), ("strategy", "running"),
        ("max_num_seqs", 2), ("max_num_batched_tokens", 512), ("ceiling_max_num_seqs", 8),
        ("ceiling_max_num_batched_tokens", 2048), ("admission_cap", 6), ("num_running", 6),
        ("steps_since_change", 3), ("largest_step_tokens_since_change", 512)]


def test_an_engine_that_cannot_be_retuned_says_why() -> None:
    report = EngineCoreReport(4242, 0, None, "no max_num_running_reqs")
    assert report.to_dict() == {"supported": False, "pid": 4242, "dp_rank": 0,
                                "reason": "no max_num_running_reqs"}
    assert EngineCoreReport.from_dict(report.to_dict()) == report
    assert rank_report(report.to_dict()) == {"dp_rank": 0, "pid": 4242}


def test_an_answer_reads_back_as_the_report_it_was() -> None:
    report = EngineCoreReport(4242, 1, RETUNING)
    assert EngineCoreReport.from_dict(report.to_dict()) == report


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(None, id="no answer"),
        pytest.param({"supported": True, "pid": 1, "dp_rank": 0}, id="no retuning fields"),
        pytest.param({**EngineCoreReport(1, 0, RETUNING).to_dict(), "num_running": "6"},
                     id="a count as a string"),
        pytest.param({**EngineCoreReport(1, 0, RETUNING).to_dict(), "ceiling_max_num_seqs": 0},
                     id="a ceiling of zero"),
        pytest.param({"supported": False, "pid": 1, "dp_rank": 0}, id="refused without a reason"),
        pytest.param({"pid": 1, "dp_rank": 0, "reason": "?"}, id="neither supported nor not"),
    ],
)
def test_what_is_not_a_report_is_refused_and_ranks_show_no_report(answer: Any) -> None:
    with pytest.raises(ValueError, match=r"must|needs"):
        EngineCoreReport.from_dict(answer)
    assert rank_report(answer) == {"error": "no report"}
