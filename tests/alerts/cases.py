"""Specs and parameters shared by the alerts tests."""

from __future__ import annotations

from pathlib import Path

from governor.generation.params import Endpoints, RenderParams

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
# Committed example specs with their generated output beside them: name → the output folder.
EXAMPLES = {"examples/stock-vllm": ROOT / "examples" / "stock-vllm" / "deploy"}
TESTDATA = Path(__file__).parent / "testdata"
GOLDEN = Path(__file__).parent / "golden"

# Every interval shrunk, as the integration test runs the pipeline.
FAST = RenderParams(scrape_interval_seconds=1, evaluation_interval_seconds=1,
                    fast_window_seconds=5, fast_for_seconds=2, group_wait_seconds=1,
                    control_group_wait_seconds=1, control_group_interval_seconds=1,
                    control_repeat_interval_seconds=60, health_for_cap_seconds=60,
                    controller_token_file="/tmp/token")

# Golden cases: name → (spec, endpoints, parameters).
CASES = {
    "period-28d-guarded": (TESTDATA / "period-28d-guarded.yaml", Endpoints(), RenderParams()),
    "openslo-fast-local": (TESTDATA / "openslo.yaml", Endpoints.local(), FAST),
    "classes": (TESTDATA / "classes.yaml", Endpoints(), RenderParams()),
    # Other job names, target labels, severities and runbooks (a fleet's), fast and local.
    "fleet": (TESTDATA / "fleet.yaml", Endpoints.local(), FAST),
    # The GPUs from NVIDIA's dcgm-exporter: its health alerts and their tests, production values.
    "dcgm": (TESTDATA / "dcgm.yaml", Endpoints(), RenderParams()),
}
