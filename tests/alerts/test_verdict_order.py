"""The verdict's rules read only what the same evaluation has already recorded.

Prometheus evaluates a rule group's rules in order at one timestamp, while separate groups keep
their own schedules; a rule reading a series another group records sees it up to an interval
old. At a saturated link's onset, shares computed from a fresh latency and a stale slowdown gave
the steps' growth to ``gpu_memory_bound`` for a poll or two. So: one group, and every
``verdict:`` series a rule reads is recorded by a rule before it.
"""

from __future__ import annotations

import re

import pytest

from governor.alerts import verdict_rules
from governor.alerts.rules import RecordingRule
from governor.generation.catalog import load_checked_spec
from governor.generation.params import RenderParams
from tests.alerts.cases import CASES, ROOT

SPECS = {"slo.yaml": (ROOT / "slo.yaml", RenderParams()),
         "examples/stock-vllm": (ROOT / "examples/stock-vllm/slo.yaml", RenderParams()),
         **{name: (spec, params) for name, (spec, _, params) in CASES.items()}}
VERDICT_SERIES = re.compile(r"\bverdict:[a-z0-9_]+:[a-z0-9_]+\b")


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_verdict_series_is_recorded_before_a_rule_reads_it(name: str) -> None:
    path, params = SPECS[name]
    spec = load_checked_spec(path)
    if not verdict_rules.applies(spec):
        pytest.skip("no latency SLO the verdict judges")
    rule_file = verdict_rules.verdict_rule_file(spec, params)
    assert [group.name for group in rule_file.groups] == [verdict_rules.GROUP]
    recorded: set[str] = set()
    late = []
    for rule in rule_file.groups[0].rules:
        assert isinstance(rule, RecordingRule)
        # A rule may read its own series' other label sets (shares and residuals, step by step).
        read = set(VERDICT_SERIES.findall(rule.expr)) - recorded - {rule.record}
        late += [f"{rule.record}{dict(rule.labels)} reads {sorted(read)}"] if read else []
        recorded.add(rule.record)
    assert late == []
