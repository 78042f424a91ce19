"""Actuators by entry point: the admin API's is found the way another one would be."""

from __future__ import annotations

import aiohttp
import pytest

from governor.controller.actuator import BatchingClient
from governor.controller.actuators import DEFAULT, actuator_names, load_actuator
from governor.controller.cli import build_config, build_parser


def test_the_admin_api_actuator_is_an_entry_point_and_the_default() -> None:
    assert DEFAULT in actuator_names()
    config = build_config(build_parser(env={}).parse_args(
        ["--targets", "http://127.0.0.1:8000", "--allow-unauthenticated-webhook"]))
    assert config.actuator == DEFAULT


async def test_the_admin_api_actuator_is_the_batching_client() -> None:
    async with aiohttp.ClientSession() as session:
        assert isinstance(load_actuator(DEFAULT).create(session, None), BatchingClient)


def test_an_unknown_actuator_names_the_installed_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown actuator 'k8s': expected 'admin-api'"):
        load_actuator("k8s")
    with pytest.raises(SystemExit):
        build_parser(env={}).parse_args(["--actuator", "k8s"])
