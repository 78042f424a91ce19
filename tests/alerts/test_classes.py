"""Request classes in the generated rules: each class at its own threshold, per-class series and
alerts, and nothing of it where the spec declares no classes (promtool runs the generated tests
under the integration marker, ``test_tools.py``)."""

from __future__ import annotations

from typing import Any

import yaml

from governor.alerts.class_rules import class_burn_alerts, class_rule_groups
from governor.alerts.render import render_all
from governor.alerts.slo_rules import error_events_rate
from governor.contracts.metrics import slo as n
from governor.generation.catalog import load_checked_spec, parse_checked_spec
from governor.slo import class_thresholds
from tests.alerts.cases import ROOT, TESTDATA


def spec_data() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "slo.yaml").read_text(encoding="utf-8"))
    return data


def test_without_classes_no_rule_mentions_a_class() -> None:
    data = spec_data()
    del data["classes"]
    files = render_all(parse_checked_spec(data))
    assert not any("classes-" in path for path in files)
    rules = "\n".join(text for path, text in files.items() if path.startswith("prometheus/"))
    assert "class" not in rules and "slo_class:" not in rules


def test_classes_sharing_the_slos_threshold_keep_its_plain_expression() -> None:
    data = spec_data()
    data["classes"][0]["targets"] = {"time-to-first-token": "1s"}
    spec = parse_checked_spec(data)
    slo = spec.slo("time-to-first-token")
    assert len(class_thresholds.groups(spec, slo)) == 1
    assert error_events_rate(spec, slo, "5m") == (
        'sum(rate(governor_time_to_first_token_seconds_count{job="inference"}[5m]))\n-\n'
        'sum(rate(governor_time_to_first_token_seconds_bucket{job="inference", le=~"1|1\\\\.0"}'
        '[5m]))')
    # Per class, one group reads every class at that threshold.
    sli = class_rule_groups(spec, slo)[0].rules[1]
    assert 'sum by (class) (rate(governor_time_to_first_token_seconds_bucket{job="inference", ' \
        'le=~"1|1\\\\.0"}' \
        in sli.expr and "class=" not in sli.expr and "class!" not in sli.expr


def test_the_default_class_takes_every_class_no_other_threshold_names() -> None:
    spec = load_checked_spec(TESTDATA / "classes.yaml")
    groups = class_thresholds.groups(spec, spec.slo("first-token"))
    assert [(g.threshold, g.classes, [m.render() for m in g.matchers]) for g in groups] == [
        (10.0, ("doc", "batch"), ['class=~"doc|batch"']),
        (0.5, ("vip", "chat"), ['class!~"doc|batch"'])]


def test_an_slo_that_picks_its_class_has_no_per_class_rules() -> None:
    spec = load_checked_spec(TESTDATA / "classes.yaml")
    files = render_all(spec)
    assert "prometheus/rules/classes-batch-first-token.yml" not in files
    assert "prometheus/rules/classes-errors.yml" not in files  # a ratio SLO
    assert "prometheus/rules/classes-first-token.yml" in files


def test_class_alerts_name_the_class_and_its_threshold() -> None:
    spec = load_checked_spec(ROOT / "slo.yaml")
    page, ticket = class_burn_alerts(spec, spec.slo("time-to-first-token"))
    assert page.alert == "TimeToFirstTokenClassErrorBudgetBurn"
    assert (page.labels[n.LABEL_SEVERITY], ticket.labels[n.LABEL_SEVERITY]) == ("page", "ticket")
    fired = page.expected_annotations({"class": "doc"})
    assert fired["summary"].endswith("fast for request class doc")
    assert "(doc ≤ 20s, chat ≤ 1s)" in fired["description"]
    assert n.CLASS_SLI_ERROR_RATIO.at(300).name in page.expr


def test_a_class_recording_rule_names_its_class_series() -> None:
    spec = load_checked_spec(ROOT / "slo.yaml")
    groups = class_rule_groups(spec, spec.slo("inter-token-latency"))
    records = [rule.record for group in groups[:2] for rule in group.rules
               if hasattr(rule, "record")]
    assert n.CLASS_SLI_ERROR_RATIO.at(3 * 86400).name in records
    assert records[-2:] == [n.CLASS_SLI_ERROR_RATIO_PERIOD.name,
                            n.CLASS_ERROR_BUDGET_REMAINING.name]
