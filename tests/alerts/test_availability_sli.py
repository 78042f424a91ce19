"""The shipped availability SLO, as Prometheus evaluates its generated rules: what a client can
send by the thousand at no cost does not dilute it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from governor.contracts.endpoints import (
    ADMIN_BATCHING_PATH,
    CHAT_COMPLETIONS_PATH,
    COMPLETIONS_PATH,
    HEALTH_PATH,
    METRICS_PATH,
)
from governor.contracts.metrics import service as svc
from tests.alerts.cases import DEPLOY

pytestmark = pytest.mark.integration

TARGET = 'job="inference", instance="inference:8000"'


def series(route: str, code: str, per_minute: int) -> dict[str, str]:
    return {"series": f'{svc.REQUESTS.total}{{{TARGET}, route="{route}", code="{code}"}}',
            "values": f"0+{per_minute}x30"}


def test_probes_scrapes_admin_calls_and_404s_do_not_dilute_the_availability_sli(
    promtool: str, tmp_path: Path,
) -> None:
    """One generation request in two fails; a client adds a thousand times as many cheap
    requests on the other routes (the red team pipelined 5,000 /health requests in 5.6 s).
    The error ratio stays a half (it read 1 in 1,802)."""
    cheap = [series(HEALTH_PATH, "200", 1000), series(METRICS_PATH, "200", 100),
             series("/v1/models", "200", 500), series(ADMIN_BATCHING_PATH, "401", 100),
             series("unmatched", "404", 100)]
    api = [series(CHAT_COMPLETIONS_PATH, "503", 1), series(COMPLETIONS_PATH, "200", 1)]
    ratio = 'slo:sli_error:ratio_rate5m{slo="availability", service="inference"}'
    test = {
        "rule_files": [str(DEPLOY / "prometheus/rules/slo-availability.yml")],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": api + cheap,
            "promql_expr_test": [{
                "expr": ratio, "eval_time": "20m",
                "exp_samples": [{"labels": 'slo:sli_error:ratio_rate5m{service="inference", '
                                           'slo="availability", team="inference"}',
                                 "value": 0.5}],
            }],
        }],
    }
    path = tmp_path / "dilution.test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False), encoding="utf-8")
    result = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
