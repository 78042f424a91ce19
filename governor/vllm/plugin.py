"""The ``vllm.general_plugins`` entry point: live batching limits as engine-core utility methods.

vLLM calls :func:`register` (no arguments) in each of its processes, possibly more than once;
it adds two methods to ``EngineCore`` that the frontend reaches with
``await llm.engine_core.call_utility_async(NAME, *args)``. They run in the engine-core process
between two scheduler steps, so they can touch the scheduler without locks. Both answer an
:class:`~governor.contracts.engine_core.EngineCoreReport` as plain data::

    answer = await llm.engine_core.call_utility_async(UTILITY_SET, 2, 512)   # seqs, tokens
    report = EngineCoreReport.from_dict(answer)

The entry point is declared in pyproject.toml, so the project must be *installed* in the
interpreter that runs vLLM (every spawned process rediscovers entry points).
"""

from __future__ import annotations

import os
from typing import Any

from governor.contracts.engine_core import EngineCoreReport
from governor.vllm import knobs

UTILITY_REPORT = "governor_batching"
UTILITY_SET = "governor_set_batching"


def _identity(self: Any) -> tuple[int, int]:
    # The engine-core process id shows a change applied to the engine that was running; the
    # data-parallel rank says which engine of several answered. A non-MoE rank runs as a plain
    # engine core whose engine_index is its rank; MoE ranks have dp_rank.
    parallel = getattr(getattr(self, "vllm_config", None), "parallel_config", None)
    candidates = (getattr(self, "dp_rank", None), getattr(self, "engine_index", None),
                  getattr(parallel, "data_parallel_index", None))
    rank = next((r for r in candidates if isinstance(r, int) and not isinstance(r, bool)), 0)
    return os.getpid(), rank


def _report(self: Any) -> dict[str, Any]:
    pid, rank = _identity(self)
    try:
        retuning = knobs.report(self.scheduler)
    except knobs.RetuningUnsupported as error:
        return EngineCoreReport(pid, rank, retuning=None, reason=str(error)).to_dict()
    return EngineCoreReport(pid, rank, retuning).to_dict()


def _set(self: Any, max_num_seqs: int | None, max_num_batched_tokens: int | None) -> dict[str, Any]:
    # Errors raised here travel back to the caller as a failed utility call; the engine lives on.
    # A limit left None keeps its value: the merge of a partial change happens here, between
    # two steps of the one engine-core thread, so concurrent partial changes never undo each
    # other whichever API server sent them.
    retuning = knobs.set_limits(
        self.scheduler, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens
    )
    return EngineCoreReport(*_identity(self), retuning).to_dict()


def register() -> None:
    """Add the utility methods to ``EngineCore`` once per process."""
    # Imported here, not at module level: this module is imported by the service too, and the
    # import must not pull vLLM in there. Under fork, a child inherits the patched class.
    from vllm.v1.engine.core import EngineCore

    if getattr(EngineCore, UTILITY_REPORT, None) is _report:
        return
    setattr(EngineCore, UTILITY_REPORT, _report)
    setattr(EngineCore, UTILITY_SET, _set)
