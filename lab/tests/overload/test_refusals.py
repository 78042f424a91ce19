"""The refusal-latency run's arithmetic: per class, what was admitted and how fast refusals went."""

from __future__ import annotations

from governor.contracts.request_log import RequestRecord
from lab.overload.refusals import prompts, summarize


def record(request_class: str, status: str, ttft: float | None = None,
           stages: dict[str, float] | None = None) -> RequestRecord:
    return RequestRecord(at=0.0, route="/v1/chat/completions", request_class=request_class,
                         prompt_tokens=10, output_tokens=0 if ttft is None else 4,
                         ttft_seconds=ttft, itl_p99_seconds=None, status=status, stages=stages)


def test_refusals_are_timed_before_the_gate_and_in_it_by_class() -> None:
    refusal = {"read": 0.001, "tokenize": 0.002, "admission": 0.0001, "other": 0.0009}
    summary = summarize([record("chat", "200", 0.5), record("chat", "200", 0.7),
                         record("chat", "429", stages=refusal), record("doc", "200", 3.0)])
    chat = summary["chat"]
    assert (chat["served"], chat["refused"]) == (2, 1)
    assert chat["refusal_ms_p50_p99"] == [4.0, 4.0]
    assert chat["before_admission_ms_p50_p99"] == [3.0, 3.0]
    assert chat["admission_ms_p50_p99"] == [0.1, 0.1]
    assert summary["doc"]["refused"] == 0 and summary["doc"]["refusal_ms_p50_p99"] == [None, None]


def test_prompts_are_as_long_as_asked_and_repeatable() -> None:
    made = prompts(8, 5, 9, seed=1)
    assert len(made) == 8 and all(5 <= len(p.split()) <= 9 for p in made)
    assert made == prompts(8, 5, 9, seed=1)
