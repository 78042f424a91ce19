"""Calling Governor's engine-core methods from vLLM's frontend, on every engine it reaches.

:mod:`governor.vllm.plugin` adds the methods to vLLM's ``EngineCore``; the frontend reaches them
through the engine client's ``engine_core`` (the V1 ``AsyncLLM``'s client to its engine
processes). ``engine_core`` is not part of vLLM's public ``EngineClient`` interface, so it is
detected, never assumed::

    answers = await call_every_engine(engine_client, UTILITY_REPORT)   # one per engine

Under data parallelism a server reaches several engines (internal load balancing) or only its
own rank (an external load balancer). Where vLLM has ``call_utility_all_async`` every engine the
server reaches answers, one answer each; older releases (0.25, 0.26) have only
``call_utility_async``, which with internal load balancing runs the method on every engine and
returns the first answer: every rank is retuned, one rank's answer is known.
"""

from __future__ import annotations

import asyncio
import enum
from typing import Any, Final

from governor.vllm.plugin import UTILITY_REPORT

# How long a call waits for the engine core to answer between two steps.
UTILITY_TIMEOUT_SECONDS: Final = 30.0

MISSING_METHODS: Final = (
    f"vLLM's engine core has no {UTILITY_REPORT} method: Governor's engine plugin "
    "(governor_batching, entry-point group vllm.general_plugins) did not load in the engine "
    "process. VLLM_PLUGINS filters every plugin group, so when it is set it must name "
    "governor_batching too (VLLM_PLUGINS=governor_batching,governor_admin); otherwise install "
    "Governor (governor-slo) into the interpreter that runs vLLM"
)


class Failure(enum.StrEnum):
    NO_ENGINE = "no_engine"  # no engine client, or one without engine_core
    MISSING = "missing"  # the engine answers, but Governor's methods are not there
    TIMEOUT = "timeout"  # the engine core did not answer in time (the change may still apply)
    DEAD = "dead"  # the engine has died
    FAILED = "failed"  # the method ran and raised


class UtilityError(Exception):
    def __init__(self, failure: Failure, message: str) -> None:
        super().__init__(message)
        self.failure, self.message = failure, message


def engine_core(engine_client: Any) -> Any:
    """The engine client's ``engine_core``; :class:`UtilityError` when this vLLM has none."""
    core = getattr(engine_client, "engine_core", None)
    if core is None or not hasattr(core, "call_utility_async"):
        raise UtilityError(Failure.NO_ENGINE,
                           "this vLLM's engine client has no engine_core.call_utility_async, "
                           "through which Governor reaches its engine-core methods")
    return core


async def call_every_engine(engine_client: Any, name: str, *args: Any) -> list[Any]:
    """``EngineCore.<name>(*args)`` on every engine the client reaches; their answers."""
    core = engine_core(engine_client)
    try:
        if hasattr(core, "call_utility_all_async"):
            answers = await asyncio.wait_for(core.call_utility_all_async(name, *args),
                                             UTILITY_TIMEOUT_SECONDS)
            return list(answers)
        answer = await asyncio.wait_for(core.call_utility_async(name, *args),
                                        UTILITY_TIMEOUT_SECONDS)
        return [answer]
    except TimeoutError as exc:
        raise UtilityError(Failure.TIMEOUT,
                           f"the vLLM engine core did not answer {name} within "
                           f"{UTILITY_TIMEOUT_SECONDS:.0f} s; the change may still apply") from exc
    except Exception as exc:
        raise _classify(engine_client, name, exc) from exc


def _classify(engine_client: Any, name: str, exc: Exception) -> UtilityError:
    if getattr(engine_client, "errored", False):
        return UtilityError(Failure.DEAD, "the vLLM engine has died")
    text = str(exc)
    if "has no attribute" in text and name in text:
        return UtilityError(Failure.MISSING, MISSING_METHODS)
    return UtilityError(Failure.FAILED, text[:500])
