"""The stack of a drill: governor up's parts on its own ports, with the drill's options."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from governor.common.process import free_ports
from governor.drills.stack import Stack, StackConfig, StackError, ports_from, ports_in_use

ROOT = Path(__file__).resolve().parents[2]


def stack(tmp_path: Path, slo: Path = ROOT / "slo.yaml", **extra: object) -> Stack:
    return Stack(StackConfig(run_dir=tmp_path / "run", slo=slo, port_base=31000,
                             **extra))  # type: ignore[arg-type]


def test_the_parts_listen_on_six_ports_from_the_base(tmp_path: Path) -> None:
    made = {child.name: child for child in stack(tmp_path).children()}
    assert set(made) == {"inference", "exporter", "controller", "probe", "alertmanager",
                         "prometheus"}
    assert made["probe"].health_url == "http://127.0.0.1:31005/health"
    assert made["inference"].health_url == "http://127.0.0.1:31000/health"
    assert made["prometheus"].health_url == "http://127.0.0.1:31003/-/ready"


def test_the_service_gets_the_drill_s_options_and_the_exporter_follows_it(
        tmp_path: Path) -> None:
    made = {c.name: c for c in stack(tmp_path, serve=("--max-num-seqs", "32")).children()}
    assert list(made["inference"].argv[-2:]) == ["--max-num-seqs", "32"]
    exporter = list(made["exporter"].argv)
    assert exporter[exporter.index("--follow") + 1] == "http://127.0.0.1:31000"
    assert "--names" not in exporter


def test_a_dcgm_spec_gets_dcgm_exporter_s_names(tmp_path: Path) -> None:
    made = {c.name: c for c in stack(tmp_path, dcgm=True).children()}
    exporter = list(made["exporter"].argv)
    assert exporter[exporter.index("--names") + 1] == "dcgm"


def test_the_stock_vllm_spec_renders_too(tmp_path: Path) -> None:
    made = stack(tmp_path, ROOT / "examples" / "stock-vllm" / "slo.yaml").children()
    assert len(made) == 6
    assert (tmp_path / "run" / "prometheus" / "prometheus.yml").is_file()


def test_a_former_drill_s_data_and_logs_are_cleared_and_nothing_else(tmp_path: Path) -> None:
    run = tmp_path / "run"
    for name in ("prometheus-data", "controller", "logs", "mine"):
        (run / name).mkdir(parents=True)
        (run / name / "file").write_text("x")
    stack(tmp_path).children()
    assert not (run / "prometheus-data" / "file").exists()
    assert not (run / "controller" / "file").exists()
    assert (run / "mine" / "file").exists()


def test_ports_in_use_are_named(tmp_path: Path) -> None:
    # Six free ports in a row (a port the OS picks has neighbours any connection may hold).
    port = free_ports(len(vars(ports_from(1024))), consecutive=True)[1]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        assert ("exporter", port) in ports_in_use("127.0.0.1", ports_from(port - 1))
        # The message names what holds the port: this test's own process.
        with pytest.raises(StackError, match=f"already in use: port {port} \\(exporter\\): "
                                             f"pid {os.getpid()}, .*choose another --port-base"):
            Stack(StackConfig(run_dir=tmp_path, slo=ROOT / "slo.yaml",
                              port_base=port - 1)).check_ports()


def test_faults_cannot_be_set_on_a_stack_never_started(tmp_path: Path) -> None:
    with pytest.raises(StackError, match="never started"):
        stack(tmp_path).set_faults({})
