"""vLLM V1 scheduling semantics, step by step, on small hand-checked cases."""

from __future__ import annotations

from governor.inference.engines.base import BatchingLimits, FinishReason
from governor.inference.engines.sim.kv import KVCache, prompt_block_hashes
from governor.inference.engines.sim.request import SimRequest, Status
from governor.inference.engines.sim.scheduler import Scheduler, StepPlan

BLOCK = 4


def make_scheduler(
    *, seqs: int = 8, budget: int = 64, blocks: int = 64, pipelined: bool = False
) -> Scheduler:
    kv = KVCache(blocks, BLOCK, enable_prefix_caching=True)
    return Scheduler(kv, BatchingLimits(seqs, budget), async_scheduling=pipelined)


def request(
    name: str, prompt: int | list[int], outputs: int = 4, *, arrival: float = 0.0
) -> SimRequest:
    ids = prompt if isinstance(prompt, list) else None
    return SimRequest(
        name,
        arrival_time=arrival,
        num_prompt_tokens=len(ids) if ids is not None else int(prompt),  # type: ignore[arg-type]
        num_outputs_target=outputs,
        finish_reason=FinishReason.LENGTH,
        block_hashes=prompt_block_hashes(ids, BLOCK) if ids is not None else None,
    )


def step(
    scheduler: Scheduler, now: float, duration: float = 1.0
) -> tuple[StepPlan, dict[str, int]]:
    plan = scheduler.schedule(now)
    tokens = {r.request_id: n for r, n in zip(plan.requests, plan.tokens, strict=True)}
    scheduler.complete(plan, now + duration)
    return plan, tokens


def test_decodes_go_first_and_prefill_fills_the_rest_of_the_budget() -> None:
    s = make_scheduler(budget=20)
    for name in ("a", "b", "c"):
        s.add(request(name, 4, outputs=10), 0.0)
    step(s, 0.0)  # three 4-token prefills, each samples its first token
    long = request("long", 100)
    s.add(long, 1.0)
    _, tokens = step(s, 1.0)
    assert tokens == {"a": 1, "b": 1, "c": 1, "long": 17}


def test_a_chunked_prefill_continues_before_later_requests() -> None:
    s = make_scheduler(budget=16)
    s.add(request("long", 40, outputs=2), 0.0)
    s.add(request("short", 4), 0.0)
    _, first = step(s, 0.0)
    assert first == {"long": 16}  # the budget is spent; "short" waits (FCFS)
    _, second = step(s, 1.0)
    assert second == {"long": 16}
    _, third = step(s, 2.0)
    assert third == {"long": 8, "short": 4}


def test_requests_arriving_behind_a_chunked_prefill_wait_for_its_last_chunk() -> None:
    s = make_scheduler(budget=16)
    s.add(request("first", 4, outputs=10), 0.0)
    step(s, 0.0)
    s.add(request("long", 60, outputs=1), 1.0)
    step(s, 1.0)  # "first" decodes; "long" gets the 15 tokens left
    s.add(request("late", 4, outputs=10), 2.0)
    _, tokens = step(s, 2.0)  # "late" waits: the budget went to the running chunk
    assert tokens == {"first": 1, "long": 15}


def test_tokens_and_timestamps_follow_the_steps() -> None:
    s = make_scheduler()
    r = request("r", 6, outputs=3)
    s.add(r, 0.5)
    emitted = []
    for t in (1.0, 2.0, 3.0):
        plan = s.schedule(t)
        emitted.append(s.complete(plan, t + 0.5))
    assert emitted == [[r], [r], [r]]  # each step's output message
    assert r.status is Status.FINISHED
    assert (r.scheduled_time, r.first_token_time, r.finish_time) == (1.0, 1.5, 3.5)
    assert s.counters.generation_tokens == 3
    assert s.counters.prompt_tokens == 6
    assert s.counters.finished[FinishReason.LENGTH] == 1
    assert s.kv.usage == 0.0
    assert not s.has_work


def test_max_num_seqs_caps_admission() -> None:
    s = make_scheduler(seqs=2)
    for name in "abc":
        s.add(request(name, 4, outputs=3), 0.0)
    _, tokens = step(s, 0.0)
    assert set(tokens) == {"a", "b"}
    assert len(s.waiting) == 1


def test_lowering_max_num_seqs_below_running_preempts_nothing_and_admits_nothing() -> None:
    s = make_scheduler(seqs=4)
    for name, outputs in (("a", 2), ("b", 5), ("c", 5)):
        s.add(request(name, 4, outputs=outputs), 0.0)
    step(s, 0.0)
    s.limits = BatchingLimits(1, 64)
    s.add(request("d", 4), 1.0)
    _, tokens = step(s, 1.0)  # "a" finishes here; two still run, above the cap of 1
    assert set(tokens) == {"a", "b", "c"}
    assert s.counters.preemptions == 0
    _, tokens = step(s, 2.0)
    assert set(tokens) == {"b", "c"}  # "d" still waits
    for t in range(3, 6):
        step(s, float(t))
    _, tokens = step(s, 6.0)
    assert set(tokens) == {"d"}  # admitted once running fell below the cap


def test_a_budget_change_applies_at_the_next_step() -> None:
    s = make_scheduler(budget=64)
    s.add(request("long", 200, outputs=1), 0.0)
    _, tokens = step(s, 0.0)
    assert tokens == {"long": 64}
    s.limits = BatchingLimits(8, 16)
    _, tokens = step(s, 1.0)
    assert tokens == {"long": 16}


def test_a_full_kv_cache_preempts_the_newest_request_which_recomputes() -> None:
    s = make_scheduler(blocks=4, budget=64)
    old, new = request("old", 7, outputs=6), request("new", 7, outputs=6)
    s.add(old, 0.0)
    s.add(new, 0.0)
    step(s, 0.0)  # 2 blocks each: the cache is full
    _, tokens = step(s, 1.0)  # both grow to 8 tokens, still 2 blocks each
    assert tokens == {"old": 1, "new": 1}
    plan, tokens = step(s, 2.0)  # "old" needs a third block: "new" is preempted
    assert plan.num_preempted == 1
    assert tokens == {"old": 1}
    assert new.status is Status.WAITING
    assert new.num_computed == 0
    assert new.num_outputs == 2
    assert s.counters.preemptions == 1
    while s.has_work:
        step(s, 3.0)
    assert new.num_outputs == 6
    assert new.num_preemptions == 1


def test_prefix_caching_reuses_full_blocks_and_recomputes_the_last_token() -> None:
    s = make_scheduler()
    prompt = list(range(100, 112))  # 12 tokens = 3 full blocks
    first = request("first", prompt, outputs=1)
    s.add(first, 0.0)
    step(s, 0.0)
    second = request("second", prompt, outputs=1)
    s.add(second, 1.0)
    _, tokens = step(s, 1.0)
    # 11 tokens may hit (the last is recomputed), in whole blocks: 2 blocks = 8 tokens.
    assert second.num_cached_tokens == 8
    assert tokens == {"second": 4}
    assert s.counters.prefix_cache_queries == 24
    assert s.counters.prefix_cache_hits == 8


def test_prompts_that_differ_early_share_nothing() -> None:
    s = make_scheduler()
    s.add(request("a", list(range(12)), outputs=1), 0.0)
    step(s, 0.0)
    other = request("b", [99, *range(1, 12)], outputs=1)
    s.add(other, 1.0)
    step(s, 1.0)
    assert other.num_cached_tokens == 0


def test_with_async_scheduling_an_arrival_during_a_step_waits_one_more_step() -> None:
    s = make_scheduler(pipelined=True)
    s.add(request("a", 4, outputs=5), 0.0)
    step(s, 0.0)  # runs 0..1
    s.add(request("b", 4, outputs=1), 0.5)  # arrived while step 0..1 ran
    _, tokens = step(s, 1.0)
    assert "b" not in tokens
    _, tokens = step(s, 2.0)
    assert "b" in tokens


def test_with_async_scheduling_an_idle_engine_takes_an_arrival_at_once() -> None:
    s = make_scheduler(pipelined=True)
    s.add(request("a", 4, outputs=1), 0.0)
    step(s, 0.0)  # a finishes at 1.0
    s.add(request("b", 4, outputs=1), 0.5)
    _, tokens = step(s, 1.0)
    assert tokens == {"b": 4}


def test_abort_frees_blocks_at_once_and_drops_the_request() -> None:
    s = make_scheduler()
    running, waiting = request("run", 8, outputs=10), request("wait", 8)
    s.add(running, 0.0)
    step(s, 0.0)
    s.limits = BatchingLimits(1, 64)
    s.add(waiting, 1.0)
    assert s.kv.usage > 0
    assert s.abort(running, 1.0)
    assert s.abort(waiting, 1.0)
    assert s.kv.usage == 0.0
    assert not s.has_work
    assert running.finish_reason is FinishReason.ABORT
    assert not s.abort(running, 2.0)
    assert s.counters.finished[FinishReason.ABORT] == 0  # client aborts are not "success"


def test_a_step_completed_after_its_request_was_aborted_leaves_it_alone() -> None:
    s = make_scheduler()
    r = request("r", 8, outputs=10)
    s.add(r, 0.0)
    plan = s.schedule(0.0)
    s.abort(r, 0.5)
    s.complete(plan, 1.0)
    assert r.num_outputs == 0
    assert s.counters.generation_tokens == 0
