"""``governor exporter`` / ``python -m governor.exporters``: options, environment, and the process
itself."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from governor.common.process import Child, free_port
from governor.exporters.cli import main, parse_config
from governor.exporters.config import ConfigError, ExporterConfig

ROOT = Path(__file__).resolve().parents[2]


def test_defaults() -> None:
    config = parse_config([])
    assert (config.port, config.interval_seconds, config.slow_interval_seconds) == (9400, 1.0, 60.0)
    assert config.fake_gpus == 0 and config.gpm and config.xid and config.processes
    assert config.staleness_limit_seconds == 5.0


def test_options_and_their_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOVERNOR_EXPORTER_INTERVAL", "250ms")
    monkeypatch.setenv("GOVERNOR_EXPORTER_FAKE_GPUS", "3")
    monkeypatch.setenv("GOVERNOR_EXPORTER_GPM", "off")
    config = parse_config(["--fake-gpus", "2", "--slow-interval", "1m", "--staleness", "10s"])
    assert config.interval_seconds == 0.25
    assert config.fake_gpus == 2  # the command line wins
    assert not config.gpm
    assert (config.slow_interval_seconds, config.staleness_limit_seconds) == (60.0, 10.0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--interval", "50ms"], "interval must be at least 0.1 s",
                     id="too fast for GPM"),
        pytest.param(["--interval", "fast"], "not a duration", id="not a duration"),
        pytest.param(["--interval=-1s"], "must be positive", id="negative"),
        pytest.param(["--interval", "2s", "--slow-interval", "1s"], "must not be shorter",
                     id="slow faster than fast"),
        pytest.param(["--staleness", "1s"], "staleness (1 s) must be longer", id="staleness"),
        pytest.param(["--fake-gpus", "-2"], "must not be negative", id="negative GPUs"),
        pytest.param(["--fake-gpus", "100000000"], "between 0 and 64", id="absurd GPUs"),
        pytest.param(["--fake-gpus", "1e3"], "not an integer", id="a float of GPUs"),
        pytest.param(["--port", "70000"], "between 0 and 65535", id="port out of range"),
        pytest.param(["--port", "http"], "not a port number", id="port not a number"),
        pytest.param(["--gpm", "maybe"], "expected one of", id="not a boolean"),
        pytest.param(["--log-level", "loud"], "invalid choice", id="unknown level"),
        pytest.param(["--bogus"], "unrecognized arguments", id="unknown option"),
        pytest.param(["--interval", "9" * 400], "interval must be at most", id="oversized"),
        pytest.param(["--follow", "http://inference:8000"], "follow needs fake GPUs",
                     id="following with real GPUs"),
        pytest.param(["--fake-gpus", "1", "--follow", "inference:8000"], "not an http(s) URL",
                     id="following an address without a scheme"),
        pytest.param(["--fake-gpus", "1", "--follow", "file:///etc/passwd"],
                     "not an http(s) URL", id="following a file"),
        pytest.param(["--names", "dcgm"], "for fake GPUs", id="dcgm names on real GPUs"),
        pytest.param(["--names", "nvidia"], "invalid choice", id="unknown names"),
        pytest.param(["--fake-mig", "1=1g.18gb"], "fake MIG needs fake GPUs",
                     id="MIG on real GPUs"),
        pytest.param(["--fake-gpus", "2", "--fake-mig", "2=1g.18gb"], "no fake GPU 2",
                     id="MIG on a GPU that is not there"),
        pytest.param(["--fake-gpus", "2", "--fake-mig", "1g.18gb:3"], "expected GPU=PROFILE",
                     id="MIG without a GPU"),
        pytest.param(["--fake-gpus", "2", "--fake-mig", "1=1g.10gb"],
                     "'1g.10gb' is not an H200 MIG profile", id="an A100's profile"),
        pytest.param(["--fake-gpus", "2", "--fake-mig", "1=7g.141gb+1g.18gb"],
                     "does not fit one H200 (8/7 compute and 9/8 memory", id="too much MIG"),
        pytest.param(["--fake-gpus", "2", "--fake-mig", "1=1g.18gb:99"], "between 1 and 7",
                     id="too many instances"),
        pytest.param(["--fake-gpus", "2", "--fake-mig", "1=1g.18gb:-1"],
                     "not an H200 MIG profile", id="a negative count"),
        pytest.param(["--fake-gpus", "2", "--fake-mig", "0=1g.18gb,0=1g.35gb"],
                     "GPU 0 is given twice", id="a GPU twice"),
        pytest.param(["--fake-gpus", "2", "--fake-mig", "1=" + "1g.18gb+" * 200],
                     "too long", id="an oversized layout"),
        pytest.param(["--fake-gpus", "2", "--fake-mig", "1=1g.18gb\n$(reboot)"],
                     "not an H200 MIG profile", id="hostile text"),
    ],
)
def test_a_bad_option_is_one_line_and_status_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_following_and_dcgm_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOVERNOR_EXPORTER_FOLLOW", "http://a:8000, http://b:8001/")
    config = parse_config(["--fake-gpus", "2", "--names", "dcgm"])
    assert config.follow == ("http://a:8000", "http://b:8001/")
    assert config.names == "dcgm"
    assert parse_config(["--fake-gpus", "2", "--follow", "http://c:1"]).follow == ("http://c:1",)


def test_fake_mig_layouts(monkeypatch: pytest.MonkeyPatch) -> None:
    config = parse_config(["--fake-gpus", "3", "--fake-mig", " 2=3g.71gb+1g.18gb:2, 0=7g.141gb"])
    assert config.mig_layout == {0: ("7g.141gb",), 2: ("3g.71gb", "1g.18gb", "1g.18gb")}
    monkeypatch.setenv("GOVERNOR_EXPORTER_FAKE_MIG", "1=1g.18gb+me+1g.18gb:6")
    config = parse_config(["--fake-gpus", "2"])
    assert config.mig_layout == {1: ("1g.18gb+me", *("1g.18gb",) * 6)}
    assert parse_config(["--fake-gpus", "2", "--fake-mig", ""]).mig_layout == {}


def test_a_bad_environment_variable_names_itself(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GOVERNOR_EXPORTER_FAKE_GPUS", "lots")
    assert main([]) == 2
    assert "GOVERNOR_EXPORTER_FAKE_GPUS" in capsys.readouterr().err


def test_help_names_every_variable(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for variable in ("GOVERNOR_EXPORTER_PORT", "GOVERNOR_EXPORTER_INTERVAL",
                     "GOVERNOR_EXPORTER_FAKE_GPUS", "GOVERNOR_EXPORTER_SLOW_INTERVAL"):
        assert variable in out


def test_every_config_error_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as caught:
        ExporterConfig(port=-1, interval_seconds=0.01, fake_gpus=65, nvml_retry_seconds=0)
    assert str(caught.value).count(";") == 3




def fetch(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, response.read().decode()


@pytest.mark.integration
def test_python_m_exporters_serves_fake_gpus_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    metrics = f"http://127.0.0.1:{port}/metrics"
    exporter = Child(
        "exporter", [sys.executable, "-m", "governor.exporters", "--fake-gpus", "2",
                     "--host", "127.0.0.1", "--port", str(port), "--interval", "200ms"],
        metrics, tmp_path / "exporter.log", env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT, accept=lambda body: b"gpu_sm_active_ratio{" in body, grace_seconds=20)
    with exporter:  # stopped with SIGTERM on the way out; SIGKILL only after 20 s
        exporter.wait_healthy(30)
        _, body = fetch(metrics)
        assert body.count('gpu_up{gpu="') == 2
        assert "gpu_sm_active_ratio{" in body
        assert fetch(f"http://127.0.0.1:{port}/health") == (200, "ok\n")
    output = exporter.log.read_text()
    assert exporter.poll() == 0, output
    assert "Traceback" not in output


@pytest.mark.integration
def test_a_busy_port_is_a_clear_error() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "governor.exporters", "--fake-gpus", "1", "--host", "127.0.0.1",
             "--port", str(port)],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
            timeout=60, check=False)
    assert done.returncode == 1
    err = done.stderr.decode()
    assert f"cannot listen on 127.0.0.1:{port}" in err and "Traceback" not in err


def test_governor_dispatches_to_the_exporter(capsys: pytest.CaptureFixture[str]) -> None:
    from governor.cli import main as governor

    assert governor(["exporter", "--help"]) == 0
    assert "governor exporter" in capsys.readouterr().out


def test_an_oversized_value_is_not_echoed_back_whole(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--port", "9" * 1_000_000]) == 2
    err = capsys.readouterr().err
    assert "not a port number" in err
    assert len(err) < 2000 and "Traceback" not in err
