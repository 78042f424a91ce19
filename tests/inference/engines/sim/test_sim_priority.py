"""vLLM V1's priority policy in the simulator, on hand-checked cases (see the scheduler's docstring
for where each rule sits in ``vllm/v1/core/sched/scheduler.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from governor.inference.engines.base import BatchingLimits, FinishReason
from governor.inference.engines.sim.kv import KVCache
from governor.inference.engines.sim.presets import get_preset
from governor.inference.engines.sim.queues import FcfsQueue, PriorityQueue, waiting_queue
from governor.inference.engines.sim.request import SimRequest, Status
from governor.inference.engines.sim.scheduler import Scheduler
from governor.inference.engines.sim.virtual import VirtualSim
from tests.inference.engines.sim.test_sim_scheduler import BLOCK, step


def scheduler(*, seqs: int = 8, budget: int = 64, blocks: int = 64,
              pipelined: bool = False) -> Scheduler:
    return Scheduler(KVCache(blocks, BLOCK, enable_prefix_caching=True),
                     BatchingLimits(seqs, budget), async_scheduling=pipelined,
                     policy="priority")


def request(name: str, prompt: int, outputs: int = 4, *, priority: int = 0,
            arrival: float = 0.0) -> SimRequest:
    return SimRequest(name, arrival_time=arrival, num_prompt_tokens=prompt,
                      num_outputs_target=outputs, finish_reason=FinishReason.LENGTH,
                      priority=priority)


def test_waiting_requests_go_by_priority_then_arrival() -> None:
    s = scheduler(seqs=1)
    s.add(request("running", 4, outputs=2), 0.0)
    step(s, 0.0)
    queued = [request("low", 4, priority=5, arrival=1.0), request("late", 4, arrival=3.0),
              request("high", 4, arrival=2.0)]
    for r in queued:
        s.add(r, r.arrival_time)
    now = 1.0
    while s.has_work:
        step(s, now)
        now += 1.0
    assert [r.request_id for r in sorted(queued, key=lambda r: r.scheduled_time)] == [
        "high", "late", "low"]


def test_the_victim_of_a_full_cache_is_the_lowest_rank_not_the_newest() -> None:
    s = scheduler(blocks=4)
    low = request("low", 7, outputs=6, priority=5)
    high = request("high", 7, outputs=6, priority=0, arrival=1.0)
    s.add(low, 0.0)
    s.add(high, 1.0)
    step(s, 1.0)  # 2 blocks each: the cache is full
    step(s, 2.0)  # both grow to 8 tokens
    plan, tokens = step(s, 3.0)
    # "low" decoded first in this step, then "high" needed a block: "low", already scheduled,
    # leaves the step and its token goes back to the budget (FCFS would evict "high").
    assert plan.num_preempted == 1 and tokens == {"high": 1}
    assert low.status is Status.WAITING and low.num_computed == 0
    assert plan.shape.decode_tokens == 1 and plan.shape.num_seqs == 1


def test_a_preempted_request_goes_back_by_its_rank_not_to_the_front() -> None:
    s = scheduler(blocks=4, seqs=2)
    low = request("low", 7, outputs=6, priority=5)
    high = request("high", 7, outputs=20, priority=0, arrival=1.0)
    s.add(low, 0.0)
    s.add(high, 1.0)
    for now in (1.0, 2.0, 3.0):
        step(s, now)  # "low" is preempted at 3.0
    urgent = request("urgent", 2, outputs=1, priority=1, arrival=4.0)
    s.add(urgent, 4.0)
    assert [r.request_id for r in s.waiting] == ["urgent", "low"]


def test_a_waiting_request_preempts_nobody_however_high_its_priority() -> None:
    s = scheduler(blocks=3)
    low = request("low", 8, outputs=8, priority=9)
    s.add(low, 0.0)
    step(s, 0.0)  # 2 blocks held, 1 free
    vip = request("vip", 8, outputs=2, priority=-5, arrival=1.0)
    s.add(vip, 1.0)
    plan, tokens = step(s, 1.0)
    assert plan.num_preempted == 0 and tokens == {"low": 1} and vip.status is Status.WAITING


def test_an_arrival_not_yet_in_the_queue_does_not_hold_back_older_ones() -> None:
    s = scheduler(pipelined=True, seqs=2)
    s.add(request("a", 4, outputs=5), 0.0)
    step(s, 0.0)  # runs 0..1
    s.add(request("old", 4, outputs=1, priority=5), 0.0)
    s.add(request("new", 4, outputs=1, priority=0, arrival=0.5), 0.5)  # arrived during 0..1
    _, tokens = step(s, 1.0)
    # "old" reached the queue at 0.0, when step 0..1 began: vLLM has it; "new" it has not yet.
    assert "old" in tokens and "new" not in tokens


def test_an_aborted_request_leaves_the_priority_queue() -> None:
    s = scheduler(seqs=1)
    s.add(request("a", 4), 0.0)
    b, c = request("b", 4, priority=2), request("c", 4, priority=1)
    s.add(b, 0.0)
    s.add(c, 0.0)
    assert s.abort(c, 0.5)
    assert [r.request_id for r in s.waiting] == ["a", "b"]
    with pytest.raises(ValueError, match="not waiting"):
        PriorityQueue().remove(b)


def test_the_policies_build_their_queues() -> None:
    assert isinstance(waiting_queue("fcfs"), FcfsQueue)
    assert isinstance(waiting_queue("priority"), PriorityQueue)
    with pytest.raises(ValueError, match="unknown scheduling policy"):
        waiting_queue("lifo")  # type: ignore[arg-type]


def _chat_ttft_p99(policy: str) -> float:
    """Chats among documents arriving faster than prefill absorbs them, on the H200 preset."""
    sim = VirtualSim(get_preset("llama-3-8b@h200"), seed=3, policy=policy,  # type: ignore[arg-type]
                     limits=BatchingLimits(1024, 2048))
    rng = np.random.default_rng(3)
    chats = []
    for k in range(400):
        at = k * 0.05
        if k % 2 == 0:
            sim.submit(arrival=at, prompt=7000, output_tokens=50, priority=10)
        else:
            chats.append(sim.submit(arrival=at, prompt=int(rng.integers(200, 800)),
                                    output_tokens=50, priority=0))
    sim.run_until_idle()
    return float(np.percentile([sim.record(c).time_to_first_token for c in chats], 99))


def test_under_document_overload_priority_keeps_chats_first() -> None:
    fcfs, priority = _chat_ttft_p99("fcfs"), _chat_ttft_p99("priority")
    assert priority < 0.5 < 5 < fcfs, (fcfs, priority)
