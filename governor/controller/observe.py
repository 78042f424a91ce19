"""Read observations from Prometheus's HTTP API (``/api/v1/query``) into plain dataclasses.

>>> parse_vector({"status": "success", "data": {"resultType": "vector", "result": [
...     {"metric": {"instance": "a:8000"}, "value": [1.0, "0.25"]},
...     {"metric": {"instance": "b:8000"}, "value": [1.0, "NaN"]}]}})
{'a:8000': 0.25, 'b:8000': nan}
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

import aiohttp

from governor.common.prometheus import MAX_ANSWER_BYTES, QUERY_PATH, result
from governor.common.prometheus import PrometheusError as PrometheusError  # the controller's
from governor.contracts.metrics.prometheus import LABEL_INSTANCE
from governor.controller.model import Observation
from governor.controller.queries import QuerySet

_OBSERVATION_FIELDS = frozenset(f.name for f in fields(Observation))


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


def _sample(sample: Any) -> tuple[str | None, float]:
    try:
        instance = sample["metric"].get(LABEL_INSTANCE)
        value = float(sample["value"][1])
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise PrometheusError(f"malformed sample {str(sample)[:200]}") from exc
    return (instance if isinstance(instance, str) else None), value


def assemble(values: Mapping[str, Mapping[str, float]], instances: Iterable[str]) -> dict[
        str, Observation]:
    """``{field: {instance: value}}`` → ``{instance: Observation}``; absent values are ``None``."""
    out = {}
    for instance in instances:
        kwargs: dict[str, float | None] = {}
        for name, per_instance in values.items():
            if name in _OBSERVATION_FIELDS:
                kwargs[name] = _clean(per_instance.get(instance))
        out[instance] = Observation(**kwargs)
    return out


def _clean(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


class PrometheusClient:
    """Runs the controller's queries; one HTTP request per expression, all concurrently."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, queries: QuerySet, *,
                 timeout_seconds: float = 5.0) -> None:
        self._session = session
        self._url = base_url.rstrip("/") + QUERY_PATH
        self._queries = queries
        self._timeout = aiohttp.ClientTimeout(total=timeout_seconds)

    async def query(self, expr: str) -> dict[str, float]:
        try:
            async with self._session.get(self._url, params={"query": expr},
                                         timeout=self._timeout) as response:
                raw = await response.content.read(MAX_ANSWER_BYTES + 1)
                if len(raw) > MAX_ANSWER_BYTES:
                    raise PrometheusError("answer too large")
                if response.status >= 500 or response.status == 429:
                    raise PrometheusError(f"HTTP {response.status}")
                body = _json(raw)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise PrometheusError(f"{type(exc).__name__}: {exc}") from exc
        return parse_vector(body)

    async def snapshot(self, instances: Iterable[str]) -> Snapshot:
        """Observations for ``instances`` plus every instance Prometheus scrapes for the job."""
        exprs = self._queries.expressions()
        names = list(exprs)
        results = await asyncio.gather(self.query(self._queries.targets()),
                                       *(self.query(exprs[n]) for n in names))
        scraped = frozenset(results[0])
        wanted = set(instances) | scraped
        return Snapshot(assemble(dict(zip(names, results[1:], strict=True)), wanted), scraped)


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise PrometheusError(f"answer is not JSON: {exc}") from exc
