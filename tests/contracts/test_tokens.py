"""One name per token variable: the service, stock vLLM's admin route and the controller read the
admin token's file from the same variable, and none of them calls it deprecated."""

from __future__ import annotations

from pathlib import Path

import pytest

from governor.contracts.tokens import (
    ADMIN_TOKEN_FILE_ENV,
    GRAFANA_TOKEN_FILE_ENV,
    WEBHOOK_TOKEN_FILE_ENV,
)
from governor.controller.cli import build_parser as controller_parser
from governor.inference.cli import build_parser as serve_parser
from governor.vllm.admin import TOKEN_FILE_ENV as VLLM_ROUTE_TOKEN_FILE_ENV

CONTROLLER_FILES = [("admin_token_file", ADMIN_TOKEN_FILE_ENV),
                    ("webhook_token_file", WEBHOOK_TOKEN_FILE_ENV),
                    ("grafana_token_file", GRAFANA_TOKEN_FILE_ENV)]


def test_stock_vllms_admin_route_reads_the_same_variable_as_serve_and_the_controller() -> None:
    assert VLLM_ROUTE_TOKEN_FILE_ENV == ADMIN_TOKEN_FILE_ENV == "GOVERNOR_ADMIN_TOKEN_FILE"


@pytest.mark.parametrize(("dest", "variable"), CONTROLLER_FILES)
def test_the_controller_reads_each_token_file_from_its_shared_name_without_a_warning(
        dest: str, variable: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = controller_parser({variable: "/run/secrets/t"}).parse_args([])
    assert getattr(args, dest) == Path("/run/secrets/t")
    assert capsys.readouterr().err == ""


def test_serve_reads_the_admin_token_file_from_the_shared_name_without_a_warning(
        capsys: pytest.CaptureFixture[str]) -> None:
    args = serve_parser({ADMIN_TOKEN_FILE_ENV: "/run/secrets/t"}).parse_args([])
    assert args.admin_token_file == "/run/secrets/t"
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("old", "dest"), [
    ("GOVERNOR_CONTROLLER_ADMIN_TOKEN_FILE", "admin_token_file"),
    ("GOVERNOR_CONTROLLER_WEBHOOK_TOKEN_FILE", "webhook_token_file"),
])
def test_the_per_command_names_still_work_with_a_deprecation_line(
        old: str, dest: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = controller_parser({old: "/old"}).parse_args([])
    assert getattr(args, dest) == Path("/old")
    assert f"{old} is deprecated, use GOVERNOR_" in capsys.readouterr().err


def test_serve_keeps_its_per_command_name_with_a_deprecation_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    args = serve_parser({"GOVERNOR_SERVE_ADMIN_TOKEN_FILE": "/old"}).parse_args([])
    assert args.admin_token_file == "/old"
    assert "use GOVERNOR_ADMIN_TOKEN_FILE" in capsys.readouterr().err
