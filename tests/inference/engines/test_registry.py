"""Engines by entry point: the built-in two are found the way a third one would be."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from governor.common.entry_points import UnknownEntryPoint
from governor.inference.cli import build_parser, config_from_args
from governor.inference.config import ServiceConfig
from governor.inference.engines.registry import create_engine, engine_names, load_engine
from governor.inference.engines.settings import EngineSettings
from tests.support.scripted import ScriptedEngine


def build_config(argv: list[str]) -> ServiceConfig:
    return config_from_args(build_parser(env={}).parse_args(argv), {})


ENGINE_MODULE = '''
from governor.inference.engines.registry import EngineEntry
from tests.support.scripted import ScriptedEngine

ENGINE = EngineEntry(summary="a scripted engine",
                     create=lambda settings, registry: ScriptedEngine())
'''


@pytest.fixture
def third_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A distribution of its own declaring one engine: a module and an entry point."""
    (tmp_path / "scripted_engine.py").write_text(ENGINE_MODULE, encoding="utf-8")
    info = tmp_path / "scripted_engine-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: scripted-engine\n"
                                   "Version: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(textwrap.dedent("""\
        [governor.engines]
        scripted = scripted_engine:ENGINE
        """), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_the_built_in_engines_are_entry_points() -> None:
    assert {"sim", "vllm"} <= set(engine_names())
    assert "simulated" in load_engine("sim").summary


def test_a_third_engine_is_a_module_and_an_entry_point(third_engine: Path) -> None:
    assert "scripted" in engine_names()
    config = build_config(["--engine", "scripted"])
    engine = create_engine(config.engine, CollectorRegistry())
    assert isinstance(engine, ScriptedEngine)


def test_an_unknown_engine_names_the_installed_ones() -> None:
    with pytest.raises(UnknownEntryPoint, match=r"unknown engine 'sglang': expected .*'sim'"):
        create_engine(EngineSettings(kind="sglang"), CollectorRegistry())


def test_an_engine_refuses_settings_it_cannot_run_before_anything_starts() -> None:
    with pytest.raises(SystemExit, match="--engine vllm needs --model"):
        build_config(["--engine", "vllm"])


def test_an_entry_point_that_names_something_else_is_a_clear_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "not_an_engine.py").write_text("ENGINE = 42\n", encoding="utf-8")
    info = tmp_path / "not_an_engine-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: not-an-engine\nVersion: 1.0\n",
                                   encoding="utf-8")
    (info / "entry_points.txt").write_text("[governor.engines]\nbroken = not_an_engine:ENGINE\n",
                                           encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TypeError, match="must name an EngineEntry"):
        load_engine("broken")
