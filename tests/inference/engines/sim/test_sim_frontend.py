"""The frontend model: one FIFO server for prompts and step outputs; late outputs merge."""

from __future__ import annotations

import pytest

from governor.inference.engines.base import FinishReason
from governor.inference.engines.sim.frontend import Frontend
from governor.inference.engines.sim.presets import FREE_FRONTEND, FrontendCosts
from governor.inference.engines.sim.request import SimRequest

# Round numbers, in milliseconds, so that every expected time can be read off the costs.
MS = 1e-3
COSTS = FrontendCosts(
    tokenize_seconds=1 * MS,
    tokenize_per_token_seconds=0.01 * MS,  # 1000 tokens: 10 ms
    output_batch_seconds=0.5 * MS,
    per_output_seconds=0.25 * MS,
    ipc_seconds=0.2 * MS,
)


def req(name: str) -> SimRequest:
    return SimRequest(
        name,
        arrival_time=0.0,
        num_prompt_tokens=8,
        num_outputs_target=100,
        finish_reason=FinishReason.LENGTH,
    )


class Log:
    """Deliveries as (time, request ids), in the order the frontend made them."""

    def __init__(self) -> None:
        self.deliveries: list[tuple[float, list[str]]] = []

    def __call__(self, at: float, outputs: list[SimRequest]) -> None:
        self.deliveries.append((at, [r.request_id for r in outputs]))


def drain(frontend: Frontend, until: float) -> None:
    while frontend.next_start <= until:
        frontend.deliver_next()


@pytest.fixture
def log() -> Log:
    return Log()


def test_a_prompt_reaches_the_engine_after_its_processing_and_the_hop(log: Log) -> None:
    frontend = Frontend(COSTS, log)
    assert frontend.tokenize(1.0, 1000) == pytest.approx(1.0 + 11 * MS + 0.2 * MS)
    assert frontend.busy_until == pytest.approx(1.0 + 11 * MS)


def test_prompts_queue_behind_each_other(log: Log) -> None:
    frontend = Frontend(COSTS, log)
    frontend.tokenize(0.0, 1000)  # busy until 11 ms
    second = frontend.tokenize(2 * MS, 100)  # waits 9 ms, then 2 ms of its own
    assert second == pytest.approx(13 * MS + 0.2 * MS)


def test_outputs_of_an_idle_frontend_arrive_after_their_own_processing(log: Log) -> None:
    frontend = Frontend(COSTS, log)
    a, b = req("a"), req("b")
    frontend.outputs(1.0, [a, b])
    assert frontend.next_start == 1.0
    drain(frontend, 1.0)
    assert [at for at, _ in log.deliveries] == [pytest.approx(1.0 + 1.0 * MS)]
    assert [ids for _, ids in log.deliveries] == [["a", "b"]]


def test_a_long_prompt_stalls_the_outputs_that_come_during_it_and_merges_them(log: Log) -> None:
    frontend = Frontend(COSTS, log)
    a, b = req("a"), req("b")
    frontend.tokenize(0.0, 1000)  # the loop is busy until 11 ms
    frontend.outputs(4 * MS, [a, b])  # three steps end during the stall
    frontend.outputs(7 * MS, [a, b])
    frontend.outputs(10 * MS, [a, b])
    drain(frontend, 1.0)
    # One job, started when the prompt is done: 3 x (0.5 + 2 x 0.25) ms of work.
    assert [at for at, _ in log.deliveries] == [pytest.approx(11 * MS + 3 * MS)]
    assert [ids for _, ids in log.deliveries] == [["a", "b"] * 3]


def test_outputs_that_arrive_while_a_job_runs_wait_for_it_and_merge(log: Log) -> None:
    frontend = Frontend(COSTS, log)
    many = [req(str(i)) for i in range(8)]  # 0.5 + 8 x 0.25 = 2.5 ms per step
    frontend.outputs(0.0, many)
    drain(frontend, 0.0)
    frontend.outputs(1 * MS, many)  # the loop is still on the first job
    frontend.outputs(2 * MS, many)  # ...and still: joins the waiting job
    drain(frontend, 1.0)
    times = [at for at, _ in log.deliveries]
    assert times == [pytest.approx(2.5 * MS), pytest.approx(2.5 * MS + 5 * MS)]
    assert len(log.deliveries[1][1]) == 16


def test_a_prompt_between_two_steps_keeps_them_apart(log: Log) -> None:
    frontend = Frontend(COSTS, log)
    a = req("a")
    frontend.outputs(0.0, [a])
    drain(frontend, 0.0)
    frontend.outputs(0.1 * MS, [a])  # waits behind the first job (0.75 ms)
    frontend.tokenize(0.2 * MS, 0)  # then 1 ms of prompt
    frontend.outputs(0.3 * MS, [a])  # cannot join the job ahead of the prompt
    drain(frontend, 1.0)
    assert [at for at, _ in log.deliveries] == [
        pytest.approx(0.75 * MS),
        pytest.approx(1.5 * MS),
        pytest.approx(3.25 * MS),
    ]


def test_a_started_job_takes_no_more_outputs(log: Log) -> None:
    frontend = Frontend(COSTS, log)
    a = req("a")
    frontend.outputs(0.0, [a])  # starts at once: 0.75 ms
    frontend.outputs(0.5 * MS, [a])  # queued behind it
    drain(frontend, 0.8 * MS)  # both have started by now
    frontend.outputs(0.8 * MS, [a])  # too late to join the second: a third job
    drain(frontend, 1.0)
    assert [len(ids) for _, ids in log.deliveries] == [1, 1, 1]


def test_a_free_frontend_delivers_at_the_step_end(log: Log) -> None:
    frontend = Frontend(FREE_FRONTEND, log)
    a = req("a")
    assert frontend.tokenize(2.0, 5000) == 2.0
    frontend.outputs(3.0, [a])
    frontend.outputs(4.0, [a])
    drain(frontend, 5.0)
    assert log.deliveries == [(3.0, ["a"]), (4.0, ["a"])]


def test_feeding_out_of_order_is_a_bug_not_a_silent_reordering(log: Log) -> None:
    frontend = Frontend(COSTS, log)
    frontend.outputs(2.0, [req("a")])
    with pytest.raises(ValueError, match="out of order"):
        frontend.tokenize(1.0, 10)


def test_an_empty_step_queues_nothing(log: Log) -> None:
    frontend = Frontend(COSTS, log)
    frontend.outputs(1.0, [])
    assert frontend.next_start == float("inf")
