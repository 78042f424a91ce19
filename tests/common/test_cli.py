"""Options read GOVERNOR_* from the environment; the command line wins; bad values say where."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from governor.common.cli import (
    EnvArgumentParser,
    env_name,
    field_default,
    parse_duration_seconds,
    positive_int,
)


def parser(env: dict[str, str]) -> EnvArgumentParser:
    p = EnvArgumentParser(prog="t", env=env)
    p.add_argument("--port", type=positive_int, default=8000, help="port")
    p.add_argument("--interval", type=parse_duration_seconds, default=1.0, help="interval")
    p.add_argument("--dry-run", action="store_true", help="dry run")
    p.add_argument("--mode", choices=["a", "b"], default="a", help="mode")
    return p


def test_env_names_follow_the_option() -> None:
    assert env_name("--max-body-bytes") == "GOVERNOR_MAX_BODY_BYTES"


def test_defaults_then_environment_then_command_line() -> None:
    assert parser({}).parse_args([]).port == 8000
    assert parser({"GOVERNOR_PORT": "9000"}).parse_args([]).port == 9000
    assert parser({"GOVERNOR_PORT": "9000"}).parse_args(["--port", "9100"]).port == 9100
    args = parser({"GOVERNOR_DRY_RUN": "true", "GOVERNOR_INTERVAL": "250ms"}).parse_args([])
    assert args.dry_run is True
    assert args.interval == pytest.approx(0.25)


def test_help_names_the_variable(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parser({}).parse_args(["--help"])
    assert "GOVERNOR_PORT" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        pytest.param({"GOVERNOR_PORT": "eighty"}, "GOVERNOR_PORT", id="not an integer"),
        pytest.param({"GOVERNOR_PORT": "-1"}, "GOVERNOR_PORT", id="negative"),
        pytest.param({"GOVERNOR_DRY_RUN": "maybe"}, "GOVERNOR_DRY_RUN", id="not a boolean"),
        pytest.param({"GOVERNOR_MODE": "c"}, "GOVERNOR_MODE", id="not a choice"),
        pytest.param({"GOVERNOR_INTERVAL": "soon"}, "GOVERNOR_INTERVAL", id="not a duration"),
    ],
)
def test_a_bad_environment_value_names_its_variable(
    env: dict[str, str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        parser(env).parse_args([])
    assert exit_.value.code == 2
    assert fragment in capsys.readouterr().err


@pytest.mark.parametrize("text", ["0", "-1s", "abc", "1x", ""])
def test_bad_durations_are_rejected(text: str) -> None:
    with pytest.raises(Exception, match="duration"):
        parse_duration_seconds(text)


@dataclass(frozen=True)
class _Config:
    required: str
    port: int = 9500
    targets: tuple[str, ...] = field(default_factory=tuple)


def test_an_options_default_is_read_from_the_configuration() -> None:
    assert field_default(_Config, "port") == 9500
    assert field_default(_Config, "targets") == ()
    with pytest.raises(ValueError, match="has no default"):
        field_default(_Config, "required")
    with pytest.raises(ValueError, match="no field 'prot'"):
        field_default(_Config, "prot")


def test_an_option_with_a_shared_variable_reads_it_and_its_old_name_with_a_warning(
        capsys: pytest.CaptureFixture[str]) -> None:
    def shared(env: dict[str, str]) -> str | None:
        p = EnvArgumentParser(prog="t", env=env, env_prefix="GOVERNOR_T_")
        p.add_argument("--token-file", env="GOVERNOR_TOKEN_FILE",
                       old_env=("GOVERNOR_T_TOKEN_FILE",), help="token")
        value: str | None = p.parse_args([]).token_file
        return value

    assert shared({"GOVERNOR_TOKEN_FILE": "/a"}) == "/a"
    assert capsys.readouterr().err == ""
    assert shared({"GOVERNOR_T_TOKEN_FILE": "/b"}) == "/b"
    assert capsys.readouterr().err == ("t: GOVERNOR_T_TOKEN_FILE is deprecated, use "
                                       "GOVERNOR_TOKEN_FILE (the old name works until the next "
                                       "release)\n")
    assert shared({"GOVERNOR_TOKEN_FILE": "/a", "GOVERNOR_T_TOKEN_FILE": "/b"}) == "/a"
