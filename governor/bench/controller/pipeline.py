"""The alert pipeline's timing, read from the generated stack (``governor generate``'s output).

The benchmark must see what the deployed stack would see, so it does not invent its intervals:
the scrape and evaluation intervals come from ``prometheus.yml``, the fast alert's window and
``for`` from its rule, and the controller route's ``group_wait`` from ``alertmanager.yml``.

>>> p = pipeline_from_deploy(Path("deploy"), "InterTokenLatencyP99High", resync_seconds=10.0)
>>> (p.scrape_interval_seconds, p.evaluation_interval_seconds, p.alert_for_seconds)
(15.0, 30.0, 60.0)
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from governor.bench.controller.monitoring import Pipeline
from governor.contracts.promql import parse_duration

_RANGE = re.compile(r"\[(\w+)\]")


class DeployError(ValueError):
    """The generated configuration is missing or not what ``governor generate`` writes."""


def pipeline_from_deploy(deploy: Path, alert: str, *, resync_seconds: float,
                         job: str = "inference", receiver: str = "controller") -> Pipeline:
    prometheus = _load(deploy / "prometheus" / "prometheus.yml")
    scrape = _seconds(prometheus["global"].get("scrape_interval", "1m"))
    for config in prometheus.get("scrape_configs") or ():
        if config.get("job_name") == job and "scrape_interval" in config:
            scrape = _seconds(config["scrape_interval"])
    evaluation = _seconds(prometheus["global"].get("evaluation_interval", "1m"))
    rule = _rule(deploy / "prometheus" / "rules", alert)
    window = _RANGE.search(str(rule["expr"]))
    if window is None:
        raise DeployError(f"alert {alert}: no range selector in its expression")
    wait = _group_wait(_load(deploy / "alertmanager" / "alertmanager.yml")["route"], receiver)
    return Pipeline(scrape_interval_seconds=scrape, evaluation_interval_seconds=evaluation,
                    alert_window_seconds=_seconds(window.group(1)),
                    alert_for_seconds=_seconds(str(rule.get("for", "0s"))),
                    group_wait_seconds=wait, resync_seconds=resync_seconds)


def _load(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise DeployError(f"{path}: {exc} (run `governor generate` first)") from exc


def _rule(rules: Path, alert: str) -> dict[str, Any]:
    for path in sorted(rules.glob("*.yml")):
        for group in _load(path).get("groups") or ():
            for rule in group.get("rules") or ():
                if rule.get("alert") == alert:
                    return dict(rule)
    raise DeployError(f"no alert {alert!r} in {rules}")


def _group_wait(route: dict[str, Any], receiver: str) -> float:
    for child in route.get("routes") or ():
        if child.get("receiver") == receiver:
            return _seconds(child.get("group_wait", route.get("group_wait", "30s")))
    raise DeployError(f"no route to receiver {receiver!r} in alertmanager.yml")


def _seconds(text: str) -> float:
    return float(parse_duration(str(text)))
