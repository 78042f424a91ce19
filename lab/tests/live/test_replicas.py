"""The live loop with two replicas, rehearsed on the CPU: two ``governor serve --engine sim``.

``start --replicas 2``, ``runs`` and ``report`` exactly as on a machine with two GPUs (where the
engine is vLLM and replica ``i`` sees only GPU ``i``): the arrivals are split between the
replicas, a static policy's limits reach both, one controller manages both, and the report scores
the fleet and each replica. Short and slowed down so that it fits a CI run on a small machine.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from governor.common.process import port_range
from governor.contracts.endpoints import LOCAL_HOST
from lab.live.state import PARTS

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
REPLICAS = 2


def free_offset() -> int:
    """A port offset at which every part of the stack, both replicas included, finds its port
    free: inside this process's own range of ports where it has one (``GOVERNOR_FREE_PORTS``),
    so no other test process picks them meanwhile."""
    wanted = sorted({p.port for p in PARTS.values()} | {PARTS["inference"].port + 1})
    span = port_range()
    rng = random.Random()
    for _ in range(100):
        if span is not None and wanted[-1] - wanted[0] < len(span):
            offset = span.start - wanted[0] + rng.randrange(len(span) - (wanted[-1] - wanted[0]))
        else:
            offset = rng.randrange(20_000, 50_000)
        try:
            for port in wanted:
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port + offset))
        except OSError:
            continue
        return offset
    raise RuntimeError("no free port offset")


def live(*argv: str, timeout: float) -> str:
    done = subprocess.run([sys.executable, "-m", "lab.live", *argv], cwd=ROOT, timeout=timeout,
                          capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def load(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        data: dict[str, Any] = json.load(handle)
    return data


def test_two_replicas_share_the_arrivals_the_limits_and_one_controller(tmp_path: Path) -> None:
    state, out, offset = tmp_path / "state", tmp_path / "out", free_offset()
    try:
        live("start", "--engine", "sim", "--replicas", str(REPLICAS), "--port-offset",
             str(offset), "--state", str(state), "--slo", str(ROOT / "slo.yaml"), timeout=180)
        live("runs", "--state", str(state), "--out", str(out), "--policies",
             "static:2048/512,controller", "--minutes", "0.2", "--rate-scale", "0.3",
             timeout=400)
    finally:
        live("stop", "--state", str(state), timeout=60)
    static, controller = load(out / "run-0-static.json.gz"), load(out / "run-1-controller.json.gz")
    instances = sorted(f"{LOCAL_HOST}:{PARTS['inference'].port + offset + i}"
                       for i in range(REPLICAS))
    for run in (static, controller):
        assert run["replicas"] == REPLICAS
        assert all(row[2] == 200 and row[3] for row in run["traces"])  # every request finished
        # Prometheus scraped both replicas during the run: the split reached both.
        assert sorted(s["metric"]["instance"] for s in run["prometheus"]["itl_tail"]) == instances
    budgets = {s["metric"]["instance"]: {float(v) for _, v in s["values"]}
               for s in static["prometheus"]["limit"]
               if s["metric"].get("param") == "max_num_batched_tokens"}
    assert budgets == {i: {2048.0} for i in instances}  # the static limits, on both
    managed = {s["metric"]["target"] for s in controller["prometheus"]["limit"]
               if "target" in s["metric"]}
    assert managed == set(instances)  # one controller, both replicas its targets
    live("report", str(out), "--out", str(tmp_path / "report"), "--predict", "none",
         timeout=120)
    result = json.loads((tmp_path / "report" / "controller-sim-x2.json").read_text())
    for scored in result["runs"]:
        assert sorted(scored["replicas"]) == ["0", "1"]
        assert all(r["goodput_rps"] > 0 for r in scored["replicas"].values())
