"""compose.yaml: valid against the Compose specification, and every file it mounts exists."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT.parent / "shared" / "schemas" / "compose-spec.json"
VENDORED_SCHEMA = ROOT / "tests" / "data" / "compose-spec.json"


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())
    return loaded


def test_compose_validates_against_the_compose_specification() -> None:
    schema = json.loads(VENDORED_SCHEMA.read_text())
    jsonschema.Draft7Validator(schema).validate(compose())


def test_the_vendored_schema_is_the_shared_one() -> None:
    if SCHEMA.exists():  # the developers' checkout has ../shared; CI's clean clone may not
        assert json.loads(SCHEMA.read_text()) == json.loads(VENDORED_SCHEMA.read_text())


def test_every_bind_mount_and_build_file_exists() -> None:
    for name, service in compose()["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (ROOT / source).exists(), f"{name} mounts missing {source}"
        build = service.get("build")
        if build:
            assert (ROOT / build["context"] / build["dockerfile"]).exists(), name


def test_sim_by_default_and_gpu_by_profile() -> None:
    services = compose()["services"]
    env = (ROOT / ".env").read_text()
    assert "COMPOSE_PROFILES=sim" in env
    by_profile: dict[str, set[str]] = {}
    for name, service in services.items():
        for profile in service.get("profiles", []):
            by_profile.setdefault(profile, set()).add(name)
    assert by_profile == {"sim": {"inference", "exporter"},
                          "gpu": {"inference-vllm", "exporter-nvml"}}
    assert "inference" in services["inference-vllm"]["networks"]["default"]["aliases"]
    assert "exporter" in services["exporter-nvml"]["networks"]["default"]["aliases"]
    assert "sim" in services["inference"]["command"]
    assert "vllm" in services["inference-vllm"]["command"]
    assert "--fake-gpus" in services["exporter"]["command"]
    assert "--fake-gpus" not in services["exporter-nvml"]["command"]


def test_the_secrets_the_alertmanager_config_reads_are_mounted() -> None:
    am = (ROOT / "deploy" / "alertmanager" / "alertmanager.yml").read_text()
    assert "/run/secrets/controller_token" in am
    assert "controller_token" in compose()["services"]["alertmanager"]["secrets"]
