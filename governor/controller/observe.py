"""Read observations from Prometheus's HTTP API (``/api/v1/query``) into plain dataclasses.

>>> parse_vector({"status": "success", "data": {"resultType": "vector", "result": [
...     {"metric": {"instance": "a:8000"}, "value": [1.0, "0.25"]},
...     {"metric": {"instance": "b:8000"}, "value": [1.0, "NaN"]}]}})
{'a:8000': 0.25, 'b:8000': nan}
>>> parse_vector_by({"status": "success", "data": {"resultType": "vector", "result": [
...     {"metric": {"instance": "a:8000", "stage": "decode"}, "value": [1.0, "0.5"]}]}}, "stage")
{'a:8000': {'decode': 0.5}}
>>> parse_vector_by_rank({"status": "success", "data": {"resultType": "vector", "result": [
...     {"metric": {"instance": "a:8000", "engine": "1"}, "value": [1.0, "0.18"]},
...     {"metric": {"instance": "b:8000"}, "value": [1.0, "0.05"]}]}})
{'a:8000': {'1': 0.18}, 'b:8000': {'': 0.05}}

The readings the law keeps in its memory and may put back to the target, its gate's slack and
vLLM's bound on queued tokens, are checked against the admin API's contract where they enter
(:data:`BOUNDED`), and every other reading against :data:`MAX_READING`; one outside is refused
by name, never used, put or saved:

>>> seen = assemble({"vllm_max_num_queued_tokens": {"a:8000": {"": 1e30}}}, ["a:8000"])["a:8000"]
>>> seen.vllm_max_num_queued_tokens, seen.refused["vllm_max_num_queued_tokens"]
(None, '1e+30 is not a whole number from 1 to 1000000000000, or +Inf (unbounded)')
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Final

import aiohttp

from governor.common import answers
from governor.common.prometheus_api import MAX_ANSWER_BYTES, QUERY_PATH, result
from governor.common.prometheus_api import PrometheusError as PrometheusError  # the controller's
from governor.contracts import causes
from governor.contracts.admission import (
    MAX_QUEUED_TOKENS,
    queued_tokens_within,
    slack_range,
    slack_within,
)
from governor.contracts.metrics.scrape import LABEL_INSTANCE
from governor.contracts.metrics.service import LABEL_STAGE
from governor.contracts.metrics.verdict import LABEL_CAUSE
from governor.contracts.metrics.vllm import LABEL_ENGINE
from governor.contracts.stages import Stage
from governor.controller import ranks
from governor.controller.model import MAPPED_FIELDS, QUEUED_TOKENS_FIELD, SLACK_FIELD, Observation
from governor.controller.queries import QuerySet

# What one instance's observation keeps of a label a target's series carry (a stage, a cause):
# the contract names a dozen values of each; ranks have their own bound (controller.ranks).
MAX_LABEL_VALUES: Final = 32
MAX_LABEL_LENGTH: Final = 64
_STAGES: Final = frozenset(stage.value for stage in Stage)
_CAUSES: Final = frozenset(causes.NAMES)
_OBSERVATION_FIELDS = frozenset(f.name for f in fields(Observation)) - MAPPED_FIELDS
_NOTHING = Observation(itl_tail_seconds=None, itl_median_seconds=None)
# Per field, per instance: the values of one label (a stage, a rank) and their samples.
ByLabel = Mapping[str, Mapping[str, Mapping[str, float]]]


def _bound_or_unbounded(value: float) -> bool:
    return value == math.inf or queued_tokens_within(value)


# No quantity the controller reads comes near this (10^15 tokens a second, a latency of thirty
# million years): a reading past it is no measurement, and the law's sums and products of
# readings under it stay finite. NaN and ±Inf are no data, not refused (a quantile past the
# last bucket is +Inf).
MAX_READING: Final = 1e15


def _measurable(value: float) -> bool:
    return not math.isfinite(value) or abs(value) <= MAX_READING


# The readings that become the law's memory (the value it hands back) and go back to the target
# in a PUT: each what the admin API's contract accepts (governor.contracts.admission), or
# refused for that target, NaN included (no gate writes it). Field → (check, what it must be).
BOUNDED: Final[Mapping[str, tuple[Callable[[float], bool], str]]] = {
    SLACK_FIELD: (slack_within, f"a deadline slack within {slack_range()}"),
    QUEUED_TOKENS_FIELD: (_bound_or_unbounded, f"a whole number from 1 to "
                                               f"{MAX_QUEUED_TOKENS}, or +Inf (unbounded)"),
}


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One observation per instance, and the instances Prometheus scrapes."""

    observations: Mapping[str, Observation]
    scraped_instances: frozenset[str]


def parse_vector(body: Any) -> dict[str, float]:
    """An instant-vector answer → ``{instance: value}`` (NaN kept: the law treats it as missing)."""
    out: dict[str, float] = {}
    for sample in result(body, "vector"):
        instance, value = _sample(sample)
        if instance is not None:
            out[instance] = value
    return out


def parse_vector_by(body: Any, label: str, known: frozenset[str] = frozenset()
                    ) -> dict[str, dict[str, float]]:
    """An instant-vector answer → ``{instance: {value of label: value}}``; measured values only:
    finite (a stage without requests in the window has no value) and within :data:`MAX_READING`
    (the guards add a stage's readings up, and a sum of two readings near the float's largest is
    +Inf).

    The label's values come from the targets, so they are bounded: at most
    :data:`MAX_LABEL_VALUES` per instance, the ``known`` ones (the contract's) first, then the
    others in order; a value longer than :data:`MAX_LABEL_LENGTH` is left out.
    """
    out: dict[str, dict[str, float]] = {}
    for sample in result(body, "vector"):
        instance, value = _sample(sample)
        key = sample["metric"].get(label)
        if instance is not None and isinstance(key, str) and len(key) <= MAX_LABEL_LENGTH \
                and math.isfinite(value) and abs(value) <= MAX_READING:
            out.setdefault(instance, {})[key] = value
    return {instance: _bounded(values, known) for instance, values in out.items()}


def _bounded(values: dict[str, float], known: frozenset[str]) -> dict[str, float]:
    if len(values) <= MAX_LABEL_VALUES:
        return values
    kept = sorted(values, key=lambda key: (key not in known, key))[:MAX_LABEL_VALUES]
    return {key: values[key] for key in kept}


def parse_vector_by_rank(body: Any) -> dict[str, dict[str, float]]:
    """An instant-vector answer → ``{instance: {rank: value}}``, the rank from vLLM's
    ``engine`` label (``""`` for a series without one); NaN kept, as :func:`parse_vector`."""
    out: dict[str, dict[str, float]] = {}
    for sample in result(body, "vector"):
        instance, value = _sample(sample)
        rank = sample["metric"].get(LABEL_ENGINE, ranks.NO_RANK)
        if instance is not None and isinstance(rank, str):
            out.setdefault(instance, {})[rank] = value
    return out


def _sample(sample: Any) -> tuple[str | None, float]:
    try:
        instance = sample["metric"].get(LABEL_INSTANCE)
        value = float(sample["value"][1])
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise PrometheusError(f"malformed sample {str(sample)[:200]}") from exc
    return (instance if isinstance(instance, str) else None), value


def assemble(values: ByLabel, instances: Iterable[str],
             by_stage: ByLabel | None = None, by_cause: ByLabel | None = None
             ) -> dict[str, Observation]:
    """``{field: {instance: {rank: value}}}`` (and ``{field: {instance: {stage: value}}}``, and
    ``{field: {instance: {cause: share}}}``) → ``{instance: Observation}``, the worst rank's where
    a server has several (:mod:`governor.controller.ranks`); absent values are ``None`` (an
    absent stage or cause: no entry), and so are refused ones (:data:`BOUNDED`), each named in
    ``refused``."""
    out = {}
    stages, verdicts = by_stage or {}, by_cause or {}
    for instance in instances:
        by_rank = {name: per_instance.get(instance, {}) for name, per_instance in values.items()
                   if name in _OBSERVATION_FIELDS}
        refused = _refused(by_rank)
        judged = ranks.judge({name: samples for name, samples in by_rank.items()
                              if name not in refused})
        out[instance] = replace(
            _NOTHING, **judged.values, rank=judged.rank, rank_itl_tails=judged.tails,
            refused=refused,
            stage_seconds=dict(stages.get("stage_seconds", {}).get(instance, {})),
            stage_seconds_long=dict(stages.get("stage_seconds_long", {}).get(instance, {})),
            stage_tail_seconds=dict(stages.get("stage_tail_seconds", {}).get(instance, {})),
            itl_causes=dict(verdicts.get("itl_causes", {}).get(instance, {})),
            ttft_causes=dict(verdicts.get("ttft_causes", {}).get(instance, {})),
            gpu_conditions=dict(verdicts.get("gpu_conditions", {}).get(instance, {})))
    return out


def _refused(by_rank: Mapping[str, Mapping[str, float]]) -> dict[str, str]:
    """The readings of one instance refused, and why: a :data:`BOUNDED` one outside the
    contract, any other past :data:`MAX_READING`; a field with any such sample, whichever rank
    it came from."""
    refused = {}
    for name, samples in by_rank.items():
        within, expected = BOUNDED.get(name, (_measurable, f"a number within ±{MAX_READING:g}"))
        bad = [value for value in samples.values() if not within(value)]
        if bad:
            refused[name] = f"{bad[0]!r} is not {expected}"
    return refused


class PrometheusClient:
    """Runs the controller's queries; one HTTP request per expression, all concurrently."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, queries: QuerySet, *,
                 timeout_seconds: float = 5.0) -> None:
        self._session = session
        self._url = base_url.rstrip("/") + QUERY_PATH
        self._queries = queries
        self._timeout = aiohttp.ClientTimeout(total=timeout_seconds)

    async def query(self, expr: str) -> dict[str, float]:
        return parse_vector(await self._answer(expr))

    async def query_by(self, expr: str, label: str, known: frozenset[str]
                       ) -> dict[str, dict[str, float]]:
        return parse_vector_by(await self._answer(expr), label, known)

    async def query_by_rank(self, expr: str) -> dict[str, dict[str, float]]:
        return parse_vector_by_rank(await self._answer(expr))

    async def _answer(self, expr: str) -> Any:
        try:
            async with self._session.get(self._url, params={"query": expr},
                                         timeout=self._timeout) as response:
                if response.status >= 500 or response.status == 429:
                    raise PrometheusError(f"HTTP {response.status}")
                return answers.loads(await answers.read_whole(response, MAX_ANSWER_BYTES))
        except answers.AnswerError as exc:
            raise PrometheusError(str(exc)) from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise PrometheusError(f"{type(exc).__name__}: {exc}") from exc

    async def snapshot(self, instances: Iterable[str]) -> Snapshot:
        """Observations for ``instances`` plus every instance Prometheus scrapes for the job."""
        queries = self._queries
        exprs, staged = queries.expressions(), queries.stage_expressions()
        verdicts = queries.verdict_expressions()
        names, stage_names, verdict_names = list(exprs), list(staged), list(verdicts)
        scraped, by_rank, by_stage, by_cause = await asyncio.gather(
            self.query(queries.targets()),
            asyncio.gather(*(self.query_by_rank(exprs[n]) for n in names)),
            asyncio.gather(*(self.query_by(staged[n], LABEL_STAGE, _STAGES)
                             for n in stage_names)),
            asyncio.gather(*(self.query_by(verdicts[n], LABEL_CAUSE, _CAUSES)
                             for n in verdict_names)))
        wanted = set(instances) | set(scraped)
        return Snapshot(assemble(dict(zip(names, by_rank, strict=True)), wanted,
                                 dict(zip(stage_names, by_stage, strict=True)),
                                 dict(zip(verdict_names, by_cause, strict=True))),
                        frozenset(scraped))
