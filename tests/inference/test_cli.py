"""``governor serve``'s options: environment variables, validation, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from governor.inference.cli import build_parser, config_from_args, main
from governor.inference.config import ServiceConfig


def config(argv: list[str], env: dict[str, str] | None = None) -> ServiceConfig:
    env = env or {}
    return config_from_args(build_parser(env).parse_args(argv), env)


def test_defaults_are_the_sim_engine_on_port_8000() -> None:
    settings = config([])
    assert settings.port == 8000
    assert settings.engine.kind == "sim"
    assert settings.admin_token is None


def test_a_stalled_reader_and_a_long_request_are_bounded_by_default() -> None:
    connections = config([]).connections
    assert 0 < connections.write_timeout_seconds <= 30
    assert connections.request_timeout_seconds == 600  # the openai client's own timeout
    assert connections.max_connections >= 512 + 1024  # max_in_flight + max_queue, and more


def test_no_client_holds_a_connection_long_or_all_of_them_by_default() -> None:
    connections = config([]).connections
    assert connections.per_client_limit == connections.max_connections // 2
    assert 0 < connections.header_timeout_seconds <= 10
    assert 0 < connections.body_timeout_seconds <= 1
    assert config(["--max-connections", "20"]).connections.per_client_limit == 10
    assert config(["--max-connections", "1"]).connections.per_client_limit == 1


def test_every_option_reads_its_environment_variable(tmp_path: Path) -> None:
    settings = config([], {"GOVERNOR_SERVE_PORT": "8100", "GOVERNOR_SERVE_MAX_QUEUE": "7",
                           "GOVERNOR_SERVE_QUEUE_TIMEOUT": "250ms", "GOVERNOR_ADMIN_TOKEN": "tok",
                           "GOVERNOR_SERVE_ENGINE": "sim", "GOVERNOR_SERVE_PRESET": "tiny",
                           "GOVERNOR_SERVE_TOKENIZER_THREADS": "3",
                           "GOVERNOR_SERVE_MAX_CONNECTIONS": "100",
                           "GOVERNOR_SERVE_WRITE_TIMEOUT": "5s",
                           "GOVERNOR_SERVE_REQUEST_TIMEOUT": "2m",
                           "GOVERNOR_SERVE_MAX_CONNECTIONS_PER_CLIENT": "30",
                           "GOVERNOR_SERVE_HEADER_TIMEOUT": "3s",
                           "GOVERNOR_SERVE_BODY_TIMEOUT": "500ms"})
    assert settings.port == 8100
    assert settings.tokenizer_threads == 3
    assert settings.connections.max_connections == 100
    assert settings.connections.write_timeout_seconds == 5.0
    assert settings.connections.request_timeout_seconds == 120.0
    assert settings.connections.per_client_limit == 30
    assert settings.connections.header_timeout_seconds == 3.0
    assert settings.connections.body_timeout_seconds == 0.5
    assert settings.admission.max_queue == 7
    assert settings.admission.queue_timeout_seconds == pytest.approx(0.25)
    assert settings.admin_token is not None
    assert settings.admin_token.matches("tok")
    assert settings.engine.preset == "tiny"
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    from_file = config(["--admin-token-file", str(token_file)])
    assert from_file.admin_token is not None
    assert from_file.admin_token.matches("from-file")


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        pytest.param(["--preset", "nope"], {}, "unknown sim preset 'nope'", id="unknown preset"),
        pytest.param(["--engine", "vllm"], {}, "needs --model", id="vllm without a model"),
        pytest.param(["--engine-arg", "novalue"], {}, "not KEY=VALUE", id="engine arg"),
        pytest.param(["--time-scale", "-1"], {}, "must not be negative", id="negative time scale"),
        pytest.param(["--admin-token-file", "/nonexistent/token"], {}, "cannot read",
                     id="missing token file"),
        pytest.param(["--max-body-bytes", "10"], {}, "at least 1024", id="tiny body limit"),
        pytest.param(["--max-connections", "10", "--max-connections-per-client", "11"], {},
                     "max_connections_per_client must be in 1..max_connections (10), got 11",
                     id="a client share over the cap"),
    ],
)
def test_mistakes_are_one_line_not_a_traceback(
    argv: list[str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv, env)
    assert message in str(exit_.value.code)


def test_a_bad_environment_value_names_the_variable(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([], {"GOVERNOR_SERVE_PORT": "eighty"})
    assert exit_.value.code == 2
    assert "GOVERNOR_SERVE_PORT" in capsys.readouterr().err


def test_the_old_shared_prefix_still_works_with_a_warning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert config([], {"GOVERNOR_PORT": "8200"}).port == 8200
    assert "GOVERNOR_PORT is deprecated, use GOVERNOR_SERVE_PORT" in capsys.readouterr().err
    assert config([], {"GOVERNOR_PORT": "8200", "GOVERNOR_SERVE_PORT": "8300"}).port == 8300


def test_the_engine_traces_to_the_services_collector() -> None:
    assert config([]).engine.otlp_traces_endpoint is None
    from_flag = config(["--otlp-endpoint", "http://jaeger:4318"])
    assert from_flag.engine.otlp_traces_endpoint == "http://jaeger:4318/v1/traces"
    from_env = config([], {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert from_env.engine.otlp_traces_endpoint == "http://collector:4318/v1/traces"
    disabled = config(["--otlp-endpoint", "http://jaeger:4318"], {"OTEL_SDK_DISABLED": "true"})
    assert disabled.engine.otlp_traces_endpoint is None


@pytest.mark.parametrize("content", ["", "\n", "   \t\n"])
def test_an_empty_token_file_is_a_start_up_error(tmp_path: Path, content: str) -> None:
    """An empty secret would match `Authorization: Bearer` with no credential: refuse it."""
    token_file = tmp_path / "token"
    token_file.write_text(content)
    with pytest.raises(SystemExit) as exit_:
        main(["--admin-token-file", str(token_file)], {})
    assert f"token file {token_file} is empty" in str(exit_.value.code)


def test_a_whitespace_token_variable_is_a_start_up_error() -> None:
    with pytest.raises(SystemExit) as exit_:
        main([], {"GOVERNOR_ADMIN_TOKEN": "   "})
    assert "GOVERNOR_ADMIN_TOKEN is set but holds only whitespace" in str(exit_.value.code)


def test_with_deadlines_the_spec_s_first_token_targets_are_the_deadlines() -> None:
    admission = config(["--slo", "slo.yaml", "--deadlines"]).admission
    assert dict(admission.first_token_targets) == {"chat": 1.0, "doc": 20.0}
    assert admission.deadline_slack == 1.0 and admission.max_tokens_ahead is None
    assert config(["--slo", "slo.yaml"]).admission.first_token_targets == ()  # off by default
    from_env = config(["--slo", "slo.yaml"], {"GOVERNOR_SERVE_DEADLINES": "true"}).admission
    assert from_env.first_token_targets == admission.first_token_targets
    moved = config([], {"GOVERNOR_SERVE_DEADLINE_SLACK": "1.5",
                        "GOVERNOR_SERVE_MAX_TOKENS_AHEAD": "60000"}).admission
    assert (moved.deadline_slack, moved.max_tokens_ahead) == (1.5, 60000)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--slo", "slo.yaml", "--deadlines", "--ttft-slo", "ttft"],
                     "no SLO named 'ttft'", id="an unknown first-token SLO"),
        pytest.param(["--slo", "slo.yaml", "--deadlines", "--ttft-slo", "availability"],
                     "not a latency SLO", id="a ratio SLO"),
        pytest.param(["--deadlines"], "--deadlines needs --slo", id="deadlines without a spec"),
    ],
)
def test_a_bad_first_token_slo_is_one_line(argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv, {})
    assert message in str(exit_.value.code)


@pytest.mark.parametrize("slack", ["0", "-1", "nan", "inf", "x", "1e-300", "0.009", "101"])
def test_a_slack_outside_the_admin_apis_range_is_refused_at_start(
        slack: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        config(["--deadline-slack", slack])
    assert "--deadline-slack" in capsys.readouterr().err


@pytest.mark.parametrize("quantile", ["0", "-0.5", "1.01", "nan", "inf", "x", "offf", "9" * 400])
def test_a_calibration_that_is_no_quantile_is_refused_at_start(
        quantile: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        config(["--deadline-calibration", quantile])
    assert "--deadline-calibration" in capsys.readouterr().err


def test_the_calibration_is_on_unless_turned_off_and_reaches_the_gate() -> None:
    assert config([]).admission.deadline_settings().calibration_quantile == 0.9
    settings = config(["--deadline-calibration", "off"]).admission.deadline_settings()
    assert settings.calibration_quantile is None
    settings = config(["--deadline-calibration", "0.99"]).admission.deadline_settings()
    assert settings.calibration_quantile == 0.99


@pytest.mark.parametrize(
    ("content", "message"),
    [pytest.param(None, "holds more than 4096 bytes", id="/dev/zero"),
     pytest.param(b"tok\xfe\xff\n", "is not UTF-8 text", id="not UTF-8")],
)
def test_a_token_file_too_large_or_not_utf8_is_a_start_up_error(
    tmp_path: Path, content: bytes | None, message: str,
) -> None:
    token_file = Path("/dev/zero")
    if content is not None:
        token_file = tmp_path / "token"
        token_file.write_bytes(content)
    with pytest.raises(SystemExit) as exit_:
        main(["--admin-token-file", str(token_file)], {})
    assert exit_.value.code == f"governor serve: token file {token_file} {message}" + (
        ": a token is one short line" if "bytes" in message else "")


@pytest.mark.parametrize(("env", "message"), [
    ({"OTEL_PROPAGATORS": "zipkin"}, "governor serve: OTEL_PROPAGATORS names 'zipkin'"),
    ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"},
     "governor serve: OTEL_TRACES_SAMPLER_ARG='2'"),
])
def test_a_tracing_variable_the_service_cannot_use_stops_it_before_anything_starts(
    env: dict[str, str], message: str,
) -> None:
    with pytest.raises(SystemExit) as exit_:
        config([], env)
    assert str(exit_.value.code).startswith(message)
    assert config([], {"OTEL_PROPAGATORS": "b3multi,tracecontext"}).port == 8000


def test_the_specs_thresholds_are_edges_of_the_services_histograms(tmp_path: Path) -> None:
    spec = tmp_path / "slo.yaml"
    spec.write_text(
        "version: governor/v1\nservice: inference\nperiod: 30d\nslos:\n"
        "  - name: end-to-end\n    objective: 95\n    sli:\n      latency:\n"
        "        metric: governor_request_duration_seconds\n        threshold: 800ms\n",
        encoding="utf-8")
    buckets = dict(config(["--slo", str(spec)]).latency_buckets)
    assert 0.8 in buckets["governor_request_duration_seconds"]
    assert 0.8 not in buckets["governor_time_to_first_token_seconds"]
    assert config([]).latency_buckets == ()


@pytest.mark.parametrize(("buckets", "message"), [
    ((("governor_requests_total", (1.0,)),), "not one of the service's latency histograms"),
    ((("governor_request_duration_seconds", ()),), "must be 1 to 64 bucket edges: got 0"),
    ((("governor_request_duration_seconds", tuple(float(i + 1) for i in range(65))),),
     "must be 1 to 64 bucket edges: got 65"),
    ((("governor_request_duration_seconds", (0.5, 0.5)),), "edge 1 (0.5) must be greater"),
    ((("governor_request_duration_seconds", (1.0, 0.5)),), "edge 1 (0.5) must be greater"),
    ((("governor_request_duration_seconds", (0.0, 1.0)),), "edge 0 must be a finite number"),
    ((("governor_request_duration_seconds", (float("nan"),)),), "edge 0 must be a finite"),
    ((("governor_request_duration_seconds", (1.0, float("inf"))),), "edge 1 must be a finite"),
    ((("governor_request_duration_seconds", (True,)),), "edge 0 must be a finite number"),
])
def test_latency_buckets_are_checked_as_vllm_checks_its_flag(
    buckets: tuple[tuple[str, tuple[float, ...]], ...], message: str,
) -> None:
    with pytest.raises(ValueError, match="latency_buckets: ") as raised:
        ServiceConfig(latency_buckets=buckets)
    assert message in str(raised.value)


def test_the_probe_token_comes_from_its_file_or_variable(tmp_path: Path) -> None:
    assert config([]).probe_token is None
    token_file = tmp_path / "probe_token"
    token_file.write_text("probe-from-file\n")
    for settings in (config(["--probe-token-file", str(token_file)]),
                     config([], {"GOVERNOR_PROBE_TOKEN_FILE": str(token_file)})):
        assert settings.probe_token is not None and settings.probe_token.matches("probe-from-file")
    from_variable = config([], {"GOVERNOR_PROBE_TOKEN": "probe-from-variable"})
    assert from_variable.probe_token is not None
    assert from_variable.probe_token.matches("probe-from-variable")
    # Two different secrets: the probe's cannot open the admin API, nor the admin's mark.
    both = config(["--probe-token-file", str(token_file)], {"GOVERNOR_ADMIN_TOKEN": "adm"})
    assert both.admin_token is not None and not both.admin_token.matches("probe-from-file")


@pytest.mark.parametrize(("content", "message"), [
    pytest.param(b"", "is empty", id="empty"),
    pytest.param(b"x" * 5000, "holds more than 4096 bytes", id="oversized"),
    pytest.param(b"\xfe\xffs3cr3t", "is not UTF-8 text", id="not UTF-8"),
    pytest.param(None, "cannot read token file", id="missing"),
])
def test_a_bad_probe_token_file_stops_serve_naming_the_file_not_its_content(
        tmp_path: Path, content: bytes | None, message: str) -> None:
    token_file = tmp_path / "probe_token"
    if content is not None:
        token_file.write_bytes(content)
    with pytest.raises(SystemExit) as exit_:
        main(["--probe-token-file", str(token_file)], {})
    text = str(exit_.value.code)
    assert message in text and str(token_file) in text and "s3cr3t" not in text, text
