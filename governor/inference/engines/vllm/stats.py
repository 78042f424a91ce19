"""The latest scheduler snapshot, from vLLM's in-process stat-logger hook.

Given to ``AsyncLLM`` as a stat logger, :class:`SchedulerStatsRecorder` keeps the numbers vLLM
reports after each engine step, so the engine's ``stats()`` reads plain numbers instead of
scraping vLLM's gauges::

    recorder = SchedulerStatsRecorder()
    recorder.record(scheduler_stats, None)       # what vLLM calls
    recorder.latest                              # EngineStats(running, waiting, kv usage)
"""

from __future__ import annotations

from typing import Any

from governor.inference.engines.base import EngineStats


class SchedulerStatsRecorder:
    """Implements every method of vLLM's ``StatLoggerBase`` (mixed in with it at start-up)."""

    def __init__(self, vllm_config: object = None, engine_index: int = 0) -> None:
        self.engine_index = engine_index
        self.latest = EngineStats(0, 0, 0.0)

    def record(
        self,
        scheduler_stats: Any,
        iteration_stats: Any,
        mm_cache_stats: Any = None,
        engine_idx: int = 0,
    ) -> None:
        if scheduler_stats is None:
            return
        waiting = scheduler_stats.num_waiting_reqs + getattr(
            scheduler_stats, "num_skipped_waiting_reqs", 0
        )
        usage: Any = getattr(scheduler_stats, "kv_cache_usage", None)
        if usage is None:  # the name before vLLM 0.9
            usage = getattr(scheduler_stats, "gpu_cache_usage", 0.0)
        self.latest = EngineStats(scheduler_stats.num_running_reqs, waiting, float(usage))

    def log_engine_initialized(self) -> None:
        """Nothing to say: the service logs its own start-up."""

    def log(self) -> None:
        """Nothing to print: the numbers are read, not logged."""

    def record_sleep_state(self, is_awake: int, level: int) -> None:
        """Sleep mode is not used by the service."""
