"""The scheduler snapshot kept from vLLM's stat-logger hook."""

from __future__ import annotations

from types import SimpleNamespace

from governor.inference.engines.base import EngineStats
from governor.inference.engines.vllm.stats import SchedulerStatsRecorder


def test_the_latest_snapshot_counts_deferred_requests_as_waiting() -> None:
    recorder = SchedulerStatsRecorder()
    assert recorder.latest == EngineStats(0, 0, 0.0)
    recorder.record(SimpleNamespace(num_running_reqs=5, num_waiting_reqs=2,
                                    num_skipped_waiting_reqs=1, kv_cache_usage=0.25), None)
    assert recorder.latest == EngineStats(5, 3, 0.25)
    recorder.record(None, None)  # an iteration without scheduler stats changes nothing
    assert recorder.latest == EngineStats(5, 3, 0.25)


def test_older_releases_field_names_are_read_too() -> None:
    recorder = SchedulerStatsRecorder()
    recorder.record(SimpleNamespace(num_running_reqs=1, num_waiting_reqs=0,
                                    gpu_cache_usage=0.5), None)
    assert recorder.latest == EngineStats(1, 0, 0.5)
