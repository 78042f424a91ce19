"""compose.yaml: valid against the Compose specification, and every file it mounts exists."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[1]
# The Compose specification's JSON schema, pinned (compose-spec/compose-spec, schema/).
VENDORED_SCHEMA = ROOT / "tests" / "data" / "compose-spec.json"


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())
    return loaded


def test_compose_validates_against_the_compose_specification() -> None:
    schema = json.loads(VENDORED_SCHEMA.read_text())
    jsonschema.Draft7Validator(schema).validate(compose())


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


def test_every_service_has_a_healthcheck_and_a_restart_policy() -> None:
    for name, service in compose()["services"].items():
        assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
        assert service.get("restart"), f"{name} has no restart policy"


def test_dependencies_wait_for_health_and_form_no_cycle() -> None:
    services = compose()["services"]
    graph: dict[str, set[str]] = {}
    for name, service in services.items():
        depends = service.get("depends_on", {})
        assert isinstance(depends, dict), f"{name}: depends_on must name its conditions"
        for other, rule in depends.items():
            assert other in services, f"{name} depends on unknown {other}"
            assert rule["condition"] == "service_healthy", f"{name} → {other}"
        graph[name] = set(depends)
    seen: set[str] = set()

    def visit(node: str, path: tuple[str, ...]) -> None:
        assert node not in path, f"dependency cycle: {' → '.join((*path, node))}"
        if node not in seen:
            seen.add(node)
            for nxt in graph.get(node, ()):
                visit(nxt, (*path, node))

    for node in graph:
        visit(node, ())
    controller = services["controller"]["depends_on"]
    assert controller["inference"]["required"] is False  # only one of the two profiles runs
    assert controller["inference-vllm"]["required"] is False


def test_vllms_slow_start_is_a_start_period_not_retries() -> None:
    health = compose()["services"]["inference-vllm"]["healthcheck"]
    assert health["start_period"] == "15m"
    assert health["retries"] <= 5


def test_ports_are_published_on_loopback_only_and_alertmanager_not_at_all() -> None:
    services = compose()["services"]
    for name, service in services.items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} on every address"
    assert "ports" not in services["alertmanager"]


def test_jaeger_is_the_maintained_v2_line() -> None:
    image = compose()["services"]["jaeger"]["image"]
    assert image.startswith("jaegertracing/jaeger:2."), image


def test_the_nvml_exporter_runs_with_the_privileges_gpm_needs() -> None:
    exporter = compose()["services"]["exporter-nvml"]
    assert exporter["privileged"] is True and exporter["pid"] == "host"
    assert exporter["user"] == "root"


def _copies(dockerfile: str) -> list[str]:
    lines = (ROOT / dockerfile).read_text().splitlines()
    return [line for line in lines if line.startswith(("COPY", "RUN pip"))]


def test_the_dependency_layer_comes_before_the_sources() -> None:
    for dockerfile in ("Dockerfile", "Dockerfile.vllm"):
        steps = _copies(dockerfile)
        first_install = next(i for i, s in enumerate(steps) if s.startswith("RUN pip"))
        sources = steps.index("COPY governor ./governor")
        assert first_install < sources, dockerfile


def test_the_vllm_image_installs_what_serve_imports_and_smoke_imports_it() -> None:
    text = (ROOT / "Dockerfile.vllm").read_text()
    deps_step = next(line for line in text.splitlines() if "-c /tmp/vllm-image.txt" in line)
    assert "--no-deps" not in deps_step
    assert "import governor.inference.app" in text
    assert "opentelemetry.exporter.otlp.proto.http" in text
    assert "vllm.general_plugins" in text
