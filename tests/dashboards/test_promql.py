"""Every panel and annotation query is valid PromQL, as Prometheus 2.42's own parser says.

Grafana's variables are expanded first (as Grafana does before sending a query); each expression
then becomes a recording rule that ``promtool check rules`` parses.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from governor.dashboards.readback import PanelQuery, expand
from tests.dashboards.boards import CASES, EXAMPLES, all_queries

pytestmark = pytest.mark.integration


def check(promtool: str, queries: list[PanelQuery], workdir: Path) -> str:
    """promtool's complaint about the queries, or "" when every one parses."""
    rules = [{"record": f"dashboard:query:{index}", "expr": expand(q.expr, variables=q.variables)}
             for index, q in enumerate(queries)]
    path = workdir / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}),
                    encoding="utf-8")
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True,
                            text=True, timeout=120, check=False)
    if result.returncode == 0:
        assert f"SUCCESS: {len(rules)} rules found" in result.stdout
        return ""
    return result.stdout + result.stderr


def test_every_query_of_the_default_boards_parses(promtool: str, tmp_path: Path) -> None:
    queries = all_queries()
    assert len(queries) > 100
    assert check(promtool, queries, tmp_path) == ""


@pytest.mark.parametrize("case", sorted({**CASES, **EXAMPLES}))
def test_every_query_of_other_specs_parses(promtool: str, tmp_path: Path, case: str) -> None:
    from governor.dashboards.render import render_all
    from governor.generation.catalog import load_checked_spec

    assert check(promtool, all_queries(render_all(load_checked_spec({**CASES, **EXAMPLES}[case]))),
                 tmp_path) == ""


def test_the_check_notices_broken_promql(promtool: str, tmp_path: Path) -> None:
    broken = PanelQuery("b", "p", "A", "sum by (le (rate(x[$__rate_interval]))")
    assert "parse error" in check(promtool, [broken], tmp_path)


def test_variables_are_expanded_as_grafana_would() -> None:
    expr = 'rate(x{instance=~"$instance", gpu=~"${gpu}"}[$__rate_interval]) offset $__range'
    assert expand(expr, rate_interval="20s", range_="5m") == \
        'rate(x{instance=~".*", gpu=~".*"}[20s]) offset 5m'
    # A chosen value (a board's $job) lands in a regex, escaped for it and for PromQL's quotes.
    assert expand('up{job=~"$job"}', variables={"job": "kube/vllm.0"}) == \
        'up{job=~"kube/vllm\\\\.0"}'
