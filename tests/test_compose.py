"""compose.yaml: what ``governor generate --compose`` writes, valid against the Compose
specification, every file it mounts there, every command one its program accepts, and the
Dockerfiles it builds laid out as the images need. ``tests/compose/`` runs it for real."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from governor.controller.cli import build_config
from governor.controller.cli import build_parser as controller_parser
from governor.exporters.cli import build_parser as exporter_parser
from governor.generate import main as generate
from governor.inference.cli import build_parser as serve_parser

ROOT = Path(__file__).resolve().parents[1]
# The Compose specification's JSON schema, pinned (compose-spec/compose-spec, schema/).
VENDORED_SCHEMA = ROOT / "tests" / "data" / "compose-spec.json"
SLO = str(ROOT / "slo.yaml")
# ${NAME:-default}, as compose interpolates a variable the shell leaves unset.
VARIABLE = re.compile(r"\$\{[A-Z_]+:-([^}]*)\}")


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())
    return loaded


def unset(text: str) -> str:
    """``text`` as compose reads it when no variable is set in the shell."""
    return VARIABLE.sub(lambda m: m.group(1), text)


def test_compose_yaml_is_what_governor_generate_writes() -> None:
    """Regenerate with `governor generate --slo slo.yaml --out deploy --compose compose.yaml`."""
    assert generate(["--slo", SLO, "--out", str(ROOT / "deploy"), "--compose",
                     str(ROOT / "compose.yaml"), "--check"]) == 0


def test_the_mounts_are_relative_to_the_compose_file(tmp_path: Path) -> None:
    assert generate(["--slo", SLO, "--out", str(tmp_path / "gen" / "deploy"), "--compose",
                     str(tmp_path / "gen" / "compose.yaml")]) == 0
    text = (tmp_path / "gen" / "compose.yaml").read_text(encoding="utf-8")
    volumes = yaml.safe_load(text)["services"]["prometheus"]["volumes"]
    assert unset(volumes[0]) == "./deploy/prometheus:/etc/prometheus:ro"
    spec = Path(tmp_path / "gen" / unset(compose_spec_mount(text)))
    assert spec.resolve() == Path(SLO).resolve()
    assert generate(["--slo", SLO, "--out", str(tmp_path / "gen" / "deploy"), "--compose",
                     str(tmp_path / "gen" / "compose.yaml"), "--check"]) == 0


def compose_spec_mount(text: str) -> str:
    return str(yaml.safe_load(text)["services"]["controller"]["volumes"][1]).split(":")[0]


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--local"], "--compose and --local contradict each other"),
     (["--controller-token-file", "/elsewhere/token"],
      "mounts the controller's token at /run/secrets/controller_token")],
    ids=["with --local", "with a token file compose does not mount"])
def test_compose_refuses_options_its_services_cannot_follow(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        generate(["--slo", SLO, "--out", str(tmp_path), "--compose",
                  str(tmp_path / "compose.yaml"), *extra])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "compose.yaml").exists()


def test_each_command_is_one_its_program_accepts(tmp_path: Path) -> None:
    """The real parsers read each service's command, so a renamed option fails here."""
    services = compose()["services"]
    for name in ("inference", "inference-vllm"):
        command = [unset(part) for part in services[name]["command"]]
        assert command[0] == "serve"
        serve_parser(env={}).parse_args(command[1:])
    for name in ("exporter", "exporter-nvml"):
        assert services[name]["command"][0] == "exporter"
        exporter_parser().parse_args(services[name]["command"][1:])
    command = services["controller"]["command"]
    assert command[0] == "controller"
    token = tmp_path / "token"
    token.write_text("a-token\n", encoding="utf-8")
    mounted = {"/app/slo.yaml": SLO, "/run/secrets/admin_token": str(token),
               "/run/secrets/controller_token": str(token)}
    config = build_config(controller_parser().parse_args(
        [mounted.get(part, part) for part in command[1:]]))
    assert [t.url for t in config.static_targets] == ["http://inference:8000"]


def test_compose_validates_against_the_compose_specification() -> None:
    schema = json.loads(VENDORED_SCHEMA.read_text())
    jsonschema.Draft7Validator(schema).validate(compose())


def test_every_bind_mount_and_build_file_exists() -> None:
    for name, service in compose()["services"].items():
        for volume in service.get("volumes", []):
            source = unset(volume).split(":")[0]
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


def test_the_probe_and_both_inference_services_share_the_probe_token_secret() -> None:
    services = compose()["services"]
    for name in ("inference", "inference-vllm", "probe"):
        command = services[name]["command"]
        assert command[command.index("--probe-token-file") + 1] == "/run/secrets/probe_token"
        assert "probe_token" in services[name]["secrets"], name
    assert compose()["secrets"]["probe_token"] == {"file": ".secrets/probe_token"}


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


def test_no_probe_sets_start_interval_which_docker_before_25_refuses() -> None:
    """Compose stops at a service with healthcheck.start_interval on Docker Engine < 25
    ("can't set healthcheck.start_interval"), and Debian 12 ships Docker 20.10."""
    for name, service in compose()["services"].items():
        assert "start_interval" not in service["healthcheck"], name


def test_ports_are_published_on_loopback_only_and_alertmanager_not_at_all() -> None:
    services = compose()["services"]
    for name, service in services.items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} on every address"
            _, published, target = unset(port).split(":")
            assert published == target, f"{name}: {port} moves the port by default"
    assert "ports" not in services["alertmanager"]


def test_jaeger_is_the_maintained_v2_line() -> None:
    image = compose()["services"]["jaeger"]["image"]
    assert image.startswith("jaegertracing/jaeger:2."), image


def test_the_controller_listens_on_every_interface_of_its_container_because_it_is_told() -> None:
    command = compose()["services"]["controller"]["command"]
    assert command[command.index("--host") + 1] == "0.0.0.0"  # its default is 127.0.0.1


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


@pytest.mark.parametrize(("dockerfile", "argument", "default"), [
    ("Dockerfile", "PYTHON_IMAGE", "python:3.11-slim"),
    ("Dockerfile.vllm", "VLLM_IMAGE", "vllm/vllm-openai:v0.25.0")])
def test_each_dockerfile_takes_its_base_as_an_argument_and_runs_as_governor(
    dockerfile: str, argument: str, default: str
) -> None:
    lines = (ROOT / dockerfile).read_text(encoding="utf-8").splitlines()
    instructions = [line for line in lines if line and not line.startswith(("#", " "))]
    assert instructions[:2] == [f"ARG {argument}={default}", f"FROM ${{{argument}}}"]
    assert [line for line in instructions if line.startswith("USER")] == ["USER governor"]
    build = next(s["build"] for s in compose()["services"].values()
                 if s.get("build", {}).get("dockerfile") == dockerfile)
    assert build["args"] == [argument]  # from the shell when set there, else the default


def test_the_build_context_holds_no_secret_and_no_run_directory() -> None:
    """.dockerignore lets in only what the images copy."""
    lines = [line for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
             if line and not line.startswith("#")]
    assert lines[0] == "*"
    let_in = {line[1:] for line in lines if line.startswith("!")}
    assert let_in == {"pyproject.toml", "README.md", "LICENSE", "governor", "slo.yaml"}


def test_the_vllm_image_installs_what_serve_imports_and_smoke_imports_it() -> None:
    text = (ROOT / "Dockerfile.vllm").read_text()
    deps_step = next(line for line in text.splitlines() if "-c /tmp/vllm-image.txt" in line)
    assert "--no-deps" not in deps_step
    # vLLM's versions as constraints, written so that an editable vLLM does not void the file.
    assert "RUN pip list --format=freeze --exclude-editable > /tmp/vllm-image.txt" in text
    assert "import governor.inference.app" in text
    assert "opentelemetry.exporter.otlp.proto.http" in text
    assert "vllm.general_plugins" in text
    assert "vllm.endpoint_plugins" in text
