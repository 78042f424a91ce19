"""Virtual-clock mode: deterministic runs, records, step log, windows, live limits, closed loops."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest

from governor.inference.engines.base import BatchingLimits, FinishReason
from governor.inference.engines.sim.presets import TINY, FrontendCosts, get_preset
from governor.inference.engines.sim.virtual import RequestRecord, VirtualSim

H200 = get_preset("llama-3-8b@h200")


def busy(sim: VirtualSim, *, n: int = 8, prompt: int = 64, outputs: int = 50) -> list[str]:
    return [sim.submit(arrival=0.01 * i, prompt=prompt, output_tokens=outputs) for i in range(n)]


def test_a_request_is_recorded_from_arrival_to_finish() -> None:
    sim = VirtualSim(TINY)
    rid = sim.submit(arrival=1.0, prompt=100, output_tokens=5)
    sim.run_until_idle()
    record = sim.record(rid)
    assert record.arrival_time == 1.0
    assert record.queued_time == 1.0  # the tiny preset has no frontend latency
    assert record.scheduled_time == 1.0
    assert record.first_token_time > record.scheduled_time
    assert record.finish_time == record.token_times[-1]
    assert len(record.token_times) == record.num_output_tokens == 5
    assert len(record.inter_token_latencies) == 4
    assert all(itl > 0 for itl in record.inter_token_latencies)
    assert record.finish_reason is FinishReason.LENGTH
    assert record.time_to_first_token == pytest.approx(record.first_token_time - 1.0)


# The H200 preset without host jitter and with round frontend costs: times can be predicted.
FRONTEND = FrontendCosts(
    tokenize_seconds=0.2e-3,
    tokenize_per_token_seconds=2e-6,  # a 7000-token prompt stalls the loop for 14.2 ms
    output_batch_seconds=0.1e-3,
    per_output_seconds=10e-6,
    ipc_seconds=0.3e-3,
)
STEADY = replace(
    H200, efficiency=replace(H200.efficiency, jitter_mean_seconds=0.0), frontend=FRONTEND
)


def test_a_prompt_reaches_the_scheduler_after_the_frontend_processed_it() -> None:
    sim = VirtualSim(STEADY)
    rid = sim.submit(arrival=0.0, prompt=1000, output_tokens=1)
    sim.run_until_idle()
    record = sim.record(rid)
    assert record.queued_time == pytest.approx(0.2e-3 + 2e-3 + 0.3e-3)
    assert record.scheduled_time == record.queued_time  # an idle engine starts at once
    step = sim.steps[0]
    delivered = step.start + step.duration + 0.1e-3 + 10e-6
    assert record.first_token_time == pytest.approx(delivered)
    assert record.time_to_first_token == pytest.approx(delivered)


def test_a_step_that_starts_an_idle_engine_pays_the_idle_start() -> None:
    sim = VirtualSim(STEADY)
    sim.submit(arrival=0.0, prompt=128, output_tokens=3)
    sim.submit(arrival=5.0, prompt=128, output_tokens=3)
    sim.run_until_idle()
    roofline = sim.core.roofline
    idle = STEADY.efficiency.idle_start_seconds
    assert idle > 0
    starts = [s for s in sim.steps if s.prefill_tokens]
    assert [s.duration for s in starts] == [
        pytest.approx(roofline.prefill_step_seconds(128) + idle)
    ] * 2
    decodes = [s for s in sim.steps if not s.prefill_tokens]
    assert all(s.duration < roofline.prefill_step_seconds(128) for s in decodes)


def decoders(sim: VirtualSim, n: int = 32, outputs: int = 400) -> list[str]:
    """``n`` decoders arriving 10 ms apart (the loop tokenizes each before the next)."""
    return [sim.submit(arrival=0.01 * i, prompt=128, output_tokens=outputs) for i in range(n)]


def test_the_frontend_runs_behind_the_engine_by_its_processing() -> None:
    sim = VirtualSim(STEADY, limits=BatchingLimits(256, 8192))
    ids = decoders(sim, outputs=200)
    sim.run_until_idle()
    for rid in ids:
        record = sim.record(rid)
        assert len(record.token_times) == record.num_output_tokens == 200  # no merging
    # Once all are decoding, each step's 32 outputs reach their callers one job after its end.
    step = next(s for s in sim.steps if s.start > 0.5)
    end = step.start + step.duration
    delivered = [t for t in sim.record(ids[0]).token_times if end <= t < end + 1e-3]
    assert delivered == [pytest.approx(end + 0.1e-3 + 32 * 10e-6)]


def test_a_long_prompt_stalls_every_decoder_once_and_merges_their_tokens() -> None:
    sim = VirtualSim(STEADY, limits=BatchingLimits(256, 8192))
    ids = decoders(sim)
    sim.submit(arrival=0.5, prompt=7000, output_tokens=1)
    sim.run_until(1.0)
    stall = 0.2e-3 + 7000 * 2e-6
    for rid in ids:
        record = sim.record(rid)
        spans = [(a, b) for a, b in itertools.pairwise(record.token_times) if a <= 0.5 < b]
        # One event spans the stall: the decoder saw nothing while the loop tokenized.
        assert len(spans) == 1
        assert spans[0][1] - spans[0][0] >= stall
        # The steps that ended meanwhile reached it together: fewer events than tokens.
        assert len(record.token_times) < record.num_output_tokens


def test_windows_count_tokens_not_events() -> None:
    sim = VirtualSim(STEADY, limits=BatchingLimits(256, 8192))
    decoders(sim, outputs=300)
    sim.submit(arrival=0.5, prompt=7000, output_tokens=1)
    sim.run_until_idle()
    window = sim.window(0.0, sim.now + 1.0)
    tokens = round(window.generation_tokens_per_second * (sim.now + 1.0))
    assert tokens == sim.counters.generation_tokens == 32 * 300 + 1
    assert tokens > window.itl_count + window.ttft_count  # merged events carry several tokens


def test_same_seed_same_run_and_another_seed_another_jitter() -> None:
    def run(seed: int) -> list[RequestRecord]:
        sim = VirtualSim(H200, seed=seed)
        busy(sim)
        sim.run_until_idle()
        return sim.records()

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_without_jitter_the_seed_does_not_matter() -> None:
    assert TINY.efficiency.jitter_mean_seconds == 0

    def times(seed: int) -> tuple[float, ...]:
        sim = VirtualSim(TINY, seed=seed)
        busy(sim)
        sim.run_until_idle()
        return sim.record("r0").token_times

    assert times(1) == times(2)


def test_run_until_stops_at_the_first_step_boundary_past_the_target() -> None:
    sim = VirtualSim(TINY)
    busy(sim)
    sim.run_until(0.02)
    assert sim.now >= 0.02
    assert sim.now - sim.steps[-1].duration < 0.02
    sim.run_until(0.02)  # nothing more to do before 0.02
    assert len(sim.steps) == len(sim.steps)


def test_an_idle_simulation_jumps_to_the_next_arrival() -> None:
    sim = VirtualSim(TINY)
    sim.submit(arrival=5.0, prompt=10, output_tokens=1)
    sim.run_until(3.0)
    assert sim.now == 3.0
    assert sim.steps == []
    sim.run_until(10.0)
    assert sim.steps[0].start == 5.0
    assert sim.now == 10.0


def test_the_step_log_describes_each_step() -> None:
    sim = VirtualSim(TINY)
    sim.submit(arrival=0.0, prompt=600, output_tokens=3)
    sim.run_until_idle()
    first, second = sim.steps[0], sim.steps[1]
    assert (first.prefill_tokens, first.decode_tokens) == (512, 0)  # the tiny budget
    assert (second.prefill_tokens, second.decode_tokens) == (88, 0)
    assert sim.steps[-1].decode_tokens == 1
    assert sim.steps[-1].num_running == 0
    assert sim.steps[0].kv_usage > 0
    assert sim.steps[-1].kv_usage == 0
    assert all(s.duration > 0 for s in sim.steps)


def test_counters_add_up() -> None:
    sim = VirtualSim(TINY)
    busy(sim, n=4, prompt=30, outputs=7)
    sim.run_until_idle()
    counters = sim.counters
    assert counters.prompt_tokens == 120
    assert counters.generation_tokens == 28
    assert counters.finished[FinishReason.LENGTH] == 4
    assert counters.steps == len(sim.steps)


def test_limits_change_at_the_requested_time() -> None:
    sim = VirtualSim(TINY)
    sim.set_limits(BatchingLimits(16, 64), at=0.5)
    sim.submit(arrival=0.0, prompt=2000, output_tokens=1)
    sim.submit(arrival=0.6, prompt=2000, output_tokens=1)
    sim.run_until_idle()
    before = [s.prefill_tokens for s in sim.steps if s.start < 0.5]
    after = [s.prefill_tokens for s in sim.steps if s.start >= 0.6]
    assert max(before) == 512
    assert max(after) == 64
    assert sim.limits == BatchingLimits(16, 64)


def test_a_smaller_budget_lowers_the_worst_step_and_raises_ttft() -> None:
    def run(budget: int) -> tuple[float, float]:
        sim = VirtualSim(H200, limits=BatchingLimits(256, budget))
        for _ in range(32):
            sim.submit(arrival=0.0, prompt=128, output_tokens=400)
        long = sim.submit(arrival=0.5, prompt=6000, output_tokens=1)
        sim.run_until_idle()
        return max(s.duration for s in sim.steps), sim.record(long).time_to_first_token

    big_step, fast_ttft = run(8192)
    small_step, slow_ttft = run(512)
    assert small_step < big_step / 4
    assert slow_ttft > fast_ttft


def test_a_full_kv_cache_preempts_and_every_request_still_finishes() -> None:
    small = replace(TINY, num_kv_blocks=64)  # 1024 tokens of KV
    sim = VirtualSim(small, limits=BatchingLimits(16, 512))
    ids = busy(sim, n=12, prompt=100, outputs=200)
    sim.run_until_idle()
    assert sim.counters.preemptions > 0
    assert any(s.preemptions for s in sim.steps)
    assert max(s.kv_usage for s in sim.steps) > 0.9
    assert all(sim.record(i).num_output_tokens == 200 for i in ids)
    assert sum(sim.record(i).num_preemptions for i in ids) == sim.counters.preemptions


def test_shared_prompt_prefixes_hit_the_cache() -> None:
    sim = VirtualSim(TINY)
    system = list(range(1000, 1320))  # a 320-token shared system prompt
    first = sim.submit(arrival=0.0, prompt=[*system, 1, 2, 3], output_tokens=2)
    second = sim.submit(arrival=1.0, prompt=[*system, 4, 5, 6], output_tokens=2)
    sim.run_until_idle()
    assert sim.record(first).num_cached_tokens == 0
    assert sim.record(second).num_cached_tokens == 320
    assert sim.counters.prefix_cache_hits == 320
    assert sim.counters.prefix_cache_queries == 2 * 323


def test_window_statistics_cover_the_samples_of_the_window() -> None:
    sim = VirtualSim(TINY)
    busy(sim, n=4, outputs=200)
    sim.run_until(10.0)
    whole = sim.window(0.0, 10.0)
    assert whole.itl_count == 4 * 199
    assert whole.ttft_count == 4
    assert whole.itl_p50 <= whole.itl_p90 <= whole.itl_p99 <= whole.itl_max
    half = sim.window(0.0, sim.now / 2)
    rest = sim.window(sim.now / 2, 10.0)
    assert half.itl_count + rest.itl_count == whole.itl_count
    empty = sim.window(20.0, 30.0)
    assert empty.itl_count == 0
    assert math.isnan(empty.itl_p99)


def test_a_closed_loop_replaces_finished_requests() -> None:
    finished: list[str] = []

    def again(sim: VirtualSim, record: RequestRecord) -> None:
        finished.append(record.request_id)
        if len(finished) < 10:
            sim.submit(arrival=sim.now, prompt=50, output_tokens=20)

    sim = VirtualSim(TINY, on_finish=again)
    sim.submit(arrival=0.0, prompt=50, output_tokens=20)
    sim.run_until_idle()
    assert len(finished) == 10
    records = [sim.record(r) for r in finished]
    assert all(b.arrival_time == a.finish_time for a, b in itertools.pairwise(records))


def test_a_closed_loop_submits_when_the_caller_has_the_last_token() -> None:
    finished: list[RequestRecord] = []

    def again(sim: VirtualSim, record: RequestRecord) -> None:
        finished.append(record)
        assert record.finish_reason is FinishReason.LENGTH
        assert record.finish_time >= sim.now  # the clock has not passed the delivery
        if len(finished) <= 16:  # four to start with, sixteen more
            sim.submit(arrival=record.finish_time, prompt=500, output_tokens=30)

    sim = VirtualSim(STEADY, on_finish=again)
    for i in range(4):
        sim.submit(arrival=0.001 * i, prompt=500, output_tokens=30)
    sim.run_until_idle()
    assert len(finished) == 20
    assert all(r.num_output_tokens == 30 for r in finished)


def test_a_callback_cannot_submit_into_the_frontend_s_past() -> None:
    def late(sim: VirtualSim, record: RequestRecord) -> None:
        sim.submit(arrival=record.finish_time - 0.01, prompt=10, output_tokens=1)

    sim = VirtualSim(STEADY, on_finish=late)
    sim.submit(arrival=0.0, prompt=10, output_tokens=2)
    with pytest.raises(ValueError, match="before the simulation's now"):
        sim.run_until_idle()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"arrival": -1.0, "prompt": 10, "output_tokens": 1}, "before"),
        ({"arrival": 0.0, "prompt": 0, "output_tokens": 1}, "empty"),
        ({"arrival": 0.0, "prompt": 10, "output_tokens": 0}, "at least 1"),
        ({"arrival": 0.0, "prompt": 2000, "output_tokens": 100}, "context length"),
        ({"arrival": 0.0, "prompt": [], "output_tokens": 1}, "empty"),
    ],
)
def test_bad_submissions_are_refused_with_a_reason(kwargs: dict[str, object], message: str) -> None:
    sim = VirtualSim(TINY)
    with pytest.raises(ValueError, match=message):
        sim.submit(**kwargs)  # type: ignore[arg-type]


def test_duplicate_ids_are_refused() -> None:
    sim = VirtualSim(TINY)
    sim.submit(arrival=0.0, prompt=10, output_tokens=1, request_id="x")
    with pytest.raises(ValueError, match="duplicate"):
        sim.submit(arrival=0.0, prompt=10, output_tokens=1, request_id="x")


def test_a_request_larger_than_the_kv_cache_is_refused() -> None:
    sim = VirtualSim(replace(TINY, num_kv_blocks=4))
    with pytest.raises(ValueError, match="KV cache"):
        sim.submit(arrival=0.0, prompt=100, output_tokens=1)


def test_raw_samples_are_available_for_a_window() -> None:
    sim = VirtualSim(TINY)
    busy(sim, n=2, outputs=30)
    sim.run_until_idle()
    itls = sim.itl_samples(0.0, sim.now + 1)
    assert len(itls) == 2 * 29
    assert sorted(itls) == sorted(x for r in sim.records() for x in r.inter_token_latencies)
    assert len(sim.ttft_samples(0.0, sim.now + 1)) == 2


def test_a_bounded_history_forgets_old_steps_samples_and_requests() -> None:
    sim = VirtualSim(TINY, history_seconds=1.0, record_token_times=False)
    for i in range(40):
        sim.submit(arrival=0.25 * i, prompt=20, output_tokens=5)
    sim.run_until(10.5)
    assert sim.steps[0].start >= 10.5 - 2.5  # history, plus up to a quarter of it, plus a gap
    assert sim.itl_samples(0.0, 7.5) == []
    assert len(sim.itl_samples(9.6, 10.5)) > 0
    assert len(sim.records()) < 10
    with pytest.raises(KeyError):
        sim.record("r0")
    recent = sim.window(sim.now - 1.0, sim.now)
    assert recent.itl_count > 0


def test_history_must_be_positive() -> None:
    with pytest.raises(ValueError, match="history_seconds"):
        VirtualSim(TINY, history_seconds=0)


def test_running_until_idle_stops_at_the_last_step() -> None:
    sim = VirtualSim(TINY)
    sim.submit(arrival=0.0, prompt=10, output_tokens=3)
    sim.submit(arrival=4.0, prompt=10, output_tokens=3)
    sim.run_until_idle()
    last = sim.steps[-1]
    assert sim.now == last.start + last.duration
    assert 4.0 < sim.now < 4.1
