"""``governor controller``'s options: environment, validation, clear errors, no tracebacks."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from governor.controller.cli import (
    build_config,
    build_parser,
    build_secrets,
    guarded,
    main,
    parse_targets,
)
from governor.controller.model import SloTargets

REPO = Path(__file__).resolve().parents[2]
SLO_YAML = str(REPO / "slo.yaml")


def test_help_is_complete_and_names_the_variables(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--help"], env={})
    assert caught.value.code == 0
    out = capsys.readouterr().out
    for option in ("--prometheus", "--targets", "--cooldown", "--dry-run", "--grafana-url",
                   "--state-file", "--audit-log", "--webhook-token-file"):
        assert option in out
    assert "GOVERNOR_CONTROLLER_PROMETHEUS" in out
    assert "GOVERNOR_WEBHOOK_TOKEN" in out


def test_the_repositorys_slo_yaml_gives_the_default_objectives() -> None:
    args = build_parser({}).parse_args(["--slo", SLO_YAML])
    config = build_config(args)
    assert config.slo == SloTargets(0.12, 0.99, 1.0, 0.99)
    assert config.queries.itl.metric == "governor_inter_token_latency_seconds"
    assert config.law.cooldown_seconds == 60.0
    assert config.law.at_risk_share == 0.5
    assert config.alert_expiry_seconds == 900.0  # three repeat intervals of the control route
    assert build_config(build_parser({}).parse_args(
        ["--slo", SLO_YAML, "--at-risk-share", "1"])).law.at_risk_share == 1.0


def test_options_read_the_environment() -> None:
    env = {"GOVERNOR_CONTROLLER_PROMETHEUS": "http://prom:9090",
           "GOVERNOR_CONTROLLER_DRY_RUN": "true",
           "GOVERNOR_CONTROLLER_TARGETS": "http://a:8000, http://b:8000",
           "GOVERNOR_CONTROLLER_RESYNC": "2s", "GOVERNOR_CONTROLLER_SLO": SLO_YAML}
    config = build_config(build_parser(env).parse_args([]))
    assert (config.prometheus_url, config.dry_run, config.resync_seconds) == (
        "http://prom:9090", True, 2.0)
    assert [t.name for t in config.static_targets] == ["a:8000", "b:8000"]


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--slo", "/nonexistent/slo.yaml"], {}, "slo.yaml"),
        (["--cooldown", "20s"], {}, "cooldown_seconds: must exceed"),
        (["--at-risk-share", "0"], {}, "at_risk_share: must be in (0, 1]"),
        (["--at-risk-share", "nan"], {}, "at_risk_share: must be in (0, 1], got nan"),
        (["--itl-slo", "availability"], {}, "not a latency SLO"),
        (["--ttft-slo", "nope"], {}, "no SLO named 'nope' in the spec"),
        (["--static-only", "--discover"], {}, "contradict"),
        (["--ca-file", "/nonexistent/ca.pem"], {}, "--ca-file /nonexistent/ca.pem: no such file"),
        ([], {"GOVERNOR_WEBHOOK_TOKEN": "   "}, "only whitespace"),
        ([], {"GOVERNOR_WEBHOOK_TOKEN": ""}, "the webhook needs a bearer token"),
        (["--webhook-token-file", "/nonexistent/token"], {}, "cannot read token file"),
    ],
    ids=["missing spec", "cooldown shorter than the window", "no at-risk share",
         "a NaN at-risk share",
         "decode SLO not a latency SLO",
         "unknown TTFT SLO", "static-only with discovery",
         "a missing CA file", "a whitespace webhook token", "no webhook token",
         "unreadable token file"],
)
def test_a_users_mistake_is_one_clear_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], env: dict[str, str], message: str
) -> None:
    full = ["--slo", SLO_YAML, *argv] if "--slo" not in argv else argv
    assert main(full, env=env) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "argv",
    [["--targets", "a:8000"], ["--targets", "ftp://a:1"], ["--targets", "http://a"],
     ["--targets", "http://u:p@a:1"], ["--port", "-1"], ["--resync", "soon"],
     ["--alert-expiry", "-1s"], ["--alert-expiry", "nan"], ["--at-risk-share", "half"]],
    ids=["no scheme", "wrong scheme", "no port", "credentials", "negative port",
         "not a duration", "a negative alert expiry", "a NaN alert expiry",
         "an at-risk share that is no number"],
)
def test_malformed_option_values_are_rejected_by_the_parser(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(argv, env={})
    assert caught.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def test_an_empty_token_file_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "token"
    empty.write_text("\n")
    args = build_parser({}).parse_args(["--webhook-token-file", str(empty)])
    with pytest.raises(Exception, match="is empty"):
        build_secrets(args, {})


def test_tokens_come_from_files_or_variables_never_from_option_values(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("from-file\n")
    args = build_parser({}).parse_args(["--webhook-token-file", str(token)])
    secrets = build_secrets(args, {"GOVERNOR_ADMIN_TOKEN": "from-env"})
    assert secrets.webhook is not None
    assert secrets.webhook.matches("from-file")
    assert secrets.admin is not None
    assert secrets.admin.matches("from-env")
    assert secrets.grafana is None


def test_parse_targets_names_targets_as_prometheus_does() -> None:
    (target,) = parse_targets("https://10.0.0.5:8443/")
    assert (target.name, target.url) == ("10.0.0.5:8443", "https://10.0.0.5:8443")


def test_discovery_is_opt_in_and_the_admin_token_goes_to_configured_targets_only() -> None:
    config = build_config(build_parser({}).parse_args(["--slo", SLO_YAML]))
    assert config.discover is None and not config.may_discover("a:8000")
    config = build_config(build_parser({}).parse_args(["--slo", SLO_YAML, "--discover",
                                                       r"inference-\d+:8000"]))
    assert config.may_discover("inference-0:8000")
    assert not config.may_discover("evil:8000")
    assert not config.may_discover("inference-0:8000/../admin")


@pytest.mark.parametrize("instance", ["a:8000/x", "user:pw@a:8000", "a:8000?q=1", "a b:8000",
                                      "a:0", "a:70000", "a", "a:8000\n", "x" * 400 + ":80"])
def test_an_instance_label_that_could_bend_a_url_never_becomes_one(instance: str) -> None:
    config = build_config(build_parser({}).parse_args(["--slo", SLO_YAML, "--discover"]))
    assert not config.may_discover(instance)
    with pytest.raises(ValueError, match="not host:port"):
        config.target_for(instance)


def test_urls_are_shown_without_credentials() -> None:
    from governor.controller.config import without_credentials

    assert without_credentials("https://u:secret@prom:9090/x") == "https://prom:9090/x"
    assert without_credentials("http://prom:9090") == "http://prom:9090"


def test_a_bad_discovery_pattern_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--slo", SLO_YAML, "--discover", "("], env={})
    assert exit_.value.code == 2
    assert "not a regular expression" in capsys.readouterr().err


def test_the_old_shared_prefix_still_works_with_a_warning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = {"GOVERNOR_PROMETHEUS": "http://old:9090", "GOVERNOR_RESYNC": "3s",
           "GOVERNOR_CONTROLLER_RESYNC": "4s", "GOVERNOR_SLO": SLO_YAML}
    config = build_config(build_parser(env).parse_args([]))
    assert config.prometheus_url == "http://old:9090"
    assert config.resync_seconds == 4.0  # the new name wins
    err = capsys.readouterr().err
    assert "GOVERNOR_PROMETHEUS is deprecated, use GOVERNOR_CONTROLLER_PROMETHEUS" in err
    assert "GOVERNOR_RESYNC is deprecated" not in err


def test_the_controller_listens_on_this_machine_only_unless_told() -> None:
    """It holds every target's admin token: like governor up's parts, it binds 127.0.0.1 by
    default; compose and Kubernetes pass --host 0.0.0.0 (tests/test_compose.py, tests/deploy)."""
    options = ["--slo", SLO_YAML]
    assert build_config(build_parser({}).parse_args(options)).host == "127.0.0.1"
    told = build_parser({}).parse_args([*options, "--host", "0.0.0.0"])
    assert build_config(told).host == "0.0.0.0"


def _spec_with_ttft(tmp_path: Path, ttft_entry: str) -> str:
    """slo.yaml with its time-to-first-token SLO entry's first line replaced."""
    text = Path(SLO_YAML).read_text(encoding="utf-8")
    assert "  - name: time-to-first-token\n" in text
    # The shipped spec names the role too; each case says its own (or none).
    assert text.count("    role: ttft\n") == 1
    text = text.replace("    role: ttft\n", "")
    name = ttft_entry.split("\n")[0].removeprefix("  - name: ")
    path = tmp_path / "slo.yaml"
    path.write_text(text.replace("  - name: time-to-first-token\n", ttft_entry)
                    .replace("      time-to-first-token: 20s", f"      {name}: 20s"),
                    encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    ("entry", "ttft_seconds"),
    [
        ("  - name: time-to-first-token\n", 1.0),
        ("  - name: ttft\n    role: ttft\n", 1.0),
        ("  - name: ttft\n", None),
        ("  - name: time-to-first-token\n    role: none\n", None),
    ],
    ids=["by its old name", "renamed, by its role", "renamed without a role",
         "opted out with role none"],
)
def test_the_law_weighs_the_slo_with_the_ttft_role_whatever_its_name(
        tmp_path: Path, entry: str, ttft_seconds: float | None) -> None:
    config = build_config(build_parser({}).parse_args(
        ["--slo", _spec_with_ttft(tmp_path, entry)]))
    assert config.slo.ttft_seconds == ttft_seconds
    assert (config.queries.ttft is None) == (ttft_seconds is None)


def test_at_start_the_controller_says_it_will_not_guard_first_tokens_without_a_ttft_slo(
        tmp_path: Path) -> None:
    renamed = build_config(build_parser({}).parse_args(
        ["--slo", _spec_with_ttft(tmp_path, "  - name: ttft\n")]))
    levels = [level for level, _ in guarded(renamed)]
    assert levels == [logging.INFO, logging.WARNING]
    assert "will not guard time to first token" in guarded(renamed)[1][1]
    default = build_config(build_parser({}).parse_args(["--slo", SLO_YAML]))
    assert guarded(default) == [(logging.INFO, (
        "guarding inter-token latency: SLO 'inter-token-latency', p99 <= 120 ms; weighing time "
        "to first token: SLO 'time-to-first-token', p99 <= 1000 ms"))]
    named = build_config(build_parser({}).parse_args(
        ["--slo", _spec_with_ttft(tmp_path, "  - name: ttft\n"), "--ttft-slo", "ttft"]))
    assert named.slo.ttft_seconds == 1.0


def test_the_start_up_log_says_what_is_not_guarded(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("governor.controller.cli.web.run_app", lambda *a, **k: None)
    token = tmp_path / "token"
    token.write_text("t\n", encoding="utf-8")
    assert main(["--slo", _spec_with_ttft(tmp_path, "  - name: ttft\n"),
                 "--webhook-token-file", str(token)], env={}) == 0
    assert "WARNING controller: no time-to-first-token SLO" in capsys.readouterr().err
