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
from tests.alerts.cases import DEPLOY, EXAMPLES

pytestmark = pytest.mark.integration

TARGET = 'job="inference", instance="inference:8000"'


def series(route: str, code: str, per_minute: int) -> dict[str, str]:
    return {"series": f'{svc.REQUESTS.total}{{{TARGET}, route="{route}", code="{code}"}}',
            "values": f"0+{per_minute}x30"}


def five_minute_error_ratio(promtool: str, tmp_path: Path, rules: Path,
                            input_series: list[dict[str, str]], service: str,
                            expected: float) -> None:
    """Assert, with promtool on ``rules``, the availability SLO's 5-minute error ratio (its
    series labelled ``service`` and the team ``inference``)."""
    ratio = f'slo:sli_error:ratio_rate5m{{slo="availability", service="{service}"}}'
    test = {
        "rule_files": [str(rules / "prometheus/rules/slo-availability.yml")],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": input_series,
            "promql_expr_test": [{
                "expr": ratio, "eval_time": "20m",
                "exp_samples": [{"labels": f'slo:sli_error:ratio_rate5m{{service="{service}", '
                                           f'slo="availability", team="inference"}}',
                                 "value": expected}],
            }],
        }],
    }
    path = tmp_path / "dilution.test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False), encoding="utf-8")
    result = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


API = [series(CHAT_COMPLETIONS_PATH, "503", 1), series(COMPLETIONS_PATH, "200", 1)]


def test_probes_scrapes_admin_calls_and_404s_do_not_dilute_the_availability_sli(
    promtool: str, tmp_path: Path,
) -> None:
    """One generation request in two fails; a client adds a thousand times as many cheap
    requests on the other routes (the red team pipelined 5,000 /health requests in 5.6 s).
    The error ratio stays a half (it read 1 in 1,802)."""
    cheap = [series(HEALTH_PATH, "200", 1000), series(METRICS_PATH, "200", 100),
             series("/v1/models", "200", 500), series(ADMIN_BATCHING_PATH, "401", 100),
             series("unmatched", "404", 100)]
    five_minute_error_ratio(promtool, tmp_path, DEPLOY, API + cheap, "inference", 0.5)


def test_client_errors_on_the_generation_routes_are_neither_good_nor_bad_events(
    promtool: str, tmp_path: Path,
) -> None:
    """An unknown model is a 404 on /v1/chat/completions: one pipelined connection sent ~2,000
    a second, each counted a good event. No 4xx is an event now, neither good nor bad: the
    ratio stays a half (it read 1 in 126,242)."""
    client_errors = [series(CHAT_COMPLETIONS_PATH, "404", 120_000),
                     series(COMPLETIONS_PATH, "400", 6_000), series(COMPLETIONS_PATH, "413", 60),
                     series(CHAT_COMPLETIONS_PATH, "408", 60),
                     series(CHAT_COMPLETIONS_PATH, "499", 60),
                     series(CHAT_COMPLETIONS_PATH, "429", 60)]
    five_minute_error_ratio(promtool, tmp_path, DEPLOY, API + client_errors, "inference", 0.5)


def test_client_errors_are_no_events_of_the_stock_vllm_availability_sli_either(
    promtool: str, tmp_path: Path,
) -> None:
    """vLLM groups its status codes: a ``4xx`` on a generation route is no event."""
    def vllm_series(handler: str, status: str, per_minute: int) -> dict[str, str]:
        return {"series": f'http_requests_total{{job="vllm", instance="vllm:8000", '
                          f'handler="{handler}", status="{status}"}}',
                "values": f"0+{per_minute}x30"}

    stock = [vllm_series(CHAT_COMPLETIONS_PATH, "5xx", 1), vllm_series(COMPLETIONS_PATH, "2xx", 1),
             vllm_series(CHAT_COMPLETIONS_PATH, "4xx", 120_000)]
    five_minute_error_ratio(promtool, tmp_path, EXAMPLES["examples/stock-vllm"], stock,
                            "llm", 0.5)
