"""The ``probe`` section of slo.yaml and ``governor probe``'s options, fed malformed, hostile and
oversized values: each refused with a message that says where and why, every problem at once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from governor.probe.cli import main, parse_config
from governor.slo.probe import MAX_REQUESTS_PER_SECOND, ProbeSettings
from governor.slo.spec import SpecError, parse_spec
from tests.alerts.cases import ROOT

BASE = yaml.safe_load((ROOT / "slo.yaml").read_text(encoding="utf-8"))


def with_probe(probe: object) -> dict[str, Any]:
    return {**BASE, "probe": probe}


def problems(probe: object) -> list[str]:
    with pytest.raises(SpecError) as caught:
        parse_spec(with_probe(probe))
    return list(caught.value.errors)


def target(**fields: object) -> dict[str, object]:
    return {"name": "inference", "urls": ["http://inference:8000"], **fields}


def test_the_section_is_optional_and_its_defaults_name_the_stack_s_own_service() -> None:
    assert parse_spec(BASE).probe == ProbeSettings()
    spec = parse_spec(with_probe({"interval": "30s", "timeout": "5s", "jitter": 0.2,
                                  "max_tokens": 16, "targets": [target(
                                      urls="http://a:8000/", model="m",
                                      api_key_file="/run/key")]}))
    assert (spec.probe.interval_seconds, spec.probe.timeout_seconds, spec.probe.jitter,
            spec.probe.max_tokens) == (30.0, 5.0, 0.2, 16)
    (only,) = spec.probe.targets
    assert (only.urls, only.model, only.api_key_file) == (("http://a:8000",), "m", "/run/key")


def test_without_a_timeout_it_is_half_a_short_interval() -> None:
    assert parse_spec(with_probe({"interval": "4s"})).probe.timeout_seconds == 2.0


@pytest.mark.parametrize(("probe", "expected"), [
    pytest.param([], "probe: must be a mapping", id="not a mapping"),
    pytest.param({"interval": "100ms"}, "probe.interval: must be between 1s and 3600s",
                 id="an interval below a second"),
    pytest.param({"interval": "100000h"}, "probe.interval: must be between",
                 id="a huge interval"),
    pytest.param({"interval": True}, "probe.interval: must be a duration", id="a boolean"),
    pytest.param({"timeout": "15s"}, "probe.timeout: must be shorter than the interval",
                 id="a timeout as long as the interval"),
    pytest.param({"jitter": 0.9}, "probe.jitter: must be a share of the interval between 0 and "
                                  "0.5", id="too much jitter"),
    pytest.param({"jitter": float("nan")}, "probe.jitter", id="a jitter that is not a number"),
    pytest.param({"jitter": True}, "probe.jitter", id="a boolean jitter"),
    pytest.param({"max_tokens": 1}, "probe.max_tokens: must be a whole number of tokens from 2",
                 id="one token has no inter-token latency"),
    pytest.param({"max_tokens": 10**12}, "probe.max_tokens", id="a huge request"),
    pytest.param({"max_tokens": "8"}, "probe.max_tokens", id="tokens as a string"),
    pytest.param({"prompt": "  "}, "probe.prompt: must not be empty", id="an empty prompt"),
    pytest.param({"prompt": "x" * 5000}, "probe.prompt: longer than", id="a huge prompt"),
    pytest.param({"targets": []}, "probe.targets: must be a non-empty list", id="no targets"),
    pytest.param({"targets": [target()] * 2}, "target 'inference' is named twice",
                 id="a target named twice"),
    pytest.param({"targets": [target(name=f"t{i}") for i in range(17)]},
                 "probe.targets: more than 16 targets", id="too many targets"),
    pytest.param({"targets": [target(name="Bad Name")]}, "lower-case letters",
                 id="a name that is no label value Governor writes"),
    pytest.param({"targets": [target(urls=["ftp://host/x"])]}, "must be an http:// or https://",
                 id="another scheme"),
    pytest.param({"targets": [target(urls=["javascript:alert(1)"])]}, "must be an http://",
                 id="no host"),
    pytest.param({"targets": [target(urls=["http://user:secret@host:8000"])]},
                 "must not carry credentials (use api_key_file)", id="credentials in the URL"),
    pytest.param({"targets": [target(urls=["http://host:8000/?next=http://evil"])]},
                 "without a query or fragment", id="a query"),
    pytest.param({"targets": [target(urls=["http://host:99999"])]}, "not a URL",
                 id="a port out of range"),
    pytest.param({"targets": [target(urls=["http://ho st:1"])]}, "spaces or control",
                 id="a space"),
    pytest.param({"targets": [target(urls=["http://h/" + "a" * 600])]}, "longer than 512",
                 id="a huge URL"),
    pytest.param({"targets": [target(urls=["http://a:1", "http://a:1"])]}, "listed twice",
                 id="a URL twice"),
    pytest.param({"targets": [target(urls=[f"http://h{i}:1" for i in range(65)])]},
                 "at most 64", id="too many URLs"),
    pytest.param({"interval": "1s", "targets": [target(urls=[f"http://h{i}:1" for i in
                                                              range(12)])]},
                 f"the probe sends at most {MAX_REQUESTS_PER_SECOND:g}",
                 id="more requests per second than the bound"),
    pytest.param({"targets": [target(api_key_file="")]}, "api_key_file: must not be empty",
                 id="an empty key file path"),
    pytest.param({"targets": [target(api_key_file=["/a"])]}, "api_key_file: must be a path",
                 id="a key file that is not a path"),
    pytest.param({"targets": [target(token="x")]}, "unknown key 'token'", id="an unknown key"),
    pytest.param({"intervall": "5s"}, "did you mean 'interval'", id="a misspelt key"),
])
def test_a_bad_probe_section_is_refused_with_its_place(probe: object,
                                                       expected: str) -> None:
    found = problems(probe)
    assert any(expected in line for line in found), found
    assert all(":" in line for line in found)


def test_every_problem_of_the_section_is_reported_at_once() -> None:
    found = problems({"interval": "0s", "jitter": 3, "max_tokens": 0,
                      "targets": [target(urls=["ftp://x"])]})
    assert len(found) == 4, found


# ---- governor probe's options ------------------------------------------------------------------


def spec_file(tmp_path: Path, probe: object | None = None) -> Path:
    path = tmp_path / "slo.yaml"
    data = BASE if probe is None else with_probe(probe)
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_target_moves_a_named_target_and_nothing_else(tmp_path: Path) -> None:
    config = parse_config(["--slo", str(spec_file(tmp_path)), "--target",
                           "inference=http://127.0.0.1:8000/,http://127.0.0.1:8001"])
    assert [(r.target, r.url) for r in config.replicas()] == [
        ("inference", "http://127.0.0.1:8000"), ("inference", "http://127.0.0.1:8001")]
    assert config.host == "127.0.0.1"  # /metrics on this machine unless told otherwise


@pytest.mark.parametrize(("argv", "expected"), [
    pytest.param(["--target", "elsewhere=http://evil:80"],
                 "the spec's probe names no such target", id="a target the spec does not name"),
    pytest.param(["--target", "inference=file:///etc/passwd"], "must be an http://",
                 id="a file URL"),
    pytest.param(["--target", "inference=http://u:p@h:1"], "must not carry credentials",
                 id="credentials"),
    pytest.param(["--target", "inference"], "expected NAME=URL", id="no URL"),
    pytest.param(["--target", "inference=http://a:1", "--target", "inference=http://b:1"],
                 "names a target twice", id="a target twice"),
    pytest.param(["--target", "inference=" + ",".join(f"http://h{i}:1" for i in range(70))],
                 "would pass the probe's bound", id="more URLs than the bound"),
    pytest.param(["--port", "70000"], "port must be between", id="a port out of range"),
    pytest.param(["--slo", "/nonexistent/slo.yaml"], "/nonexistent/slo.yaml",
                 id="a missing spec"),
])
def test_a_bad_option_is_one_clear_line_and_status_2(
        tmp_path: Path, argv: list[str], expected: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    spec = ["--slo", str(spec_file(tmp_path))] if "--slo" not in argv else []
    assert main([*spec, *argv]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err, err


def test_an_invalid_spec_names_each_problem(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = spec_file(tmp_path, {"interval": "1ms", "targets": "http://x"})
    assert main(["--slo", str(path)]) == 2
    err = capsys.readouterr().err
    assert "probe.interval" in err and "probe.targets" in err and "Traceback" not in err


def test_an_environment_variable_sets_an_option(tmp_path: Path) -> None:
    """As every component's: GOVERNOR_PROBE_PORT, and a bad value names its variable."""
    code = ("import sys; from governor.probe.cli import parse_config; "
            f"print(parse_config(['--slo', {str(spec_file(tmp_path))!r}]).port)")
    env = {"GOVERNOR_PROBE_PORT": "19601", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True)
    assert done.stdout.strip() == "19601"
    bad = subprocess.run([sys.executable, "-m", "governor", "probe", "--slo",
                          str(spec_file(tmp_path))], env={**env, "GOVERNOR_PROBE_PORT": "x"},
                         capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "GOVERNOR_PROBE_PORT" in bad.stderr


def test_the_token_comes_from_its_file_or_variable_and_never_shows(tmp_path: Path) -> None:
    spec = ["--slo", str(spec_file(tmp_path))]
    token_file = tmp_path / "probe_token"
    token_file.write_text("from-the-file-3c1e\n", encoding="utf-8")
    from_file = parse_config([*spec, "--probe-token-file", str(token_file)], env={})
    from_env_file = parse_config(spec, env={"GOVERNOR_PROBE_TOKEN_FILE": str(token_file)})
    from_variable = parse_config(spec, env={"GOVERNOR_PROBE_TOKEN": "from-the-variable"})
    assert from_file.token is not None and from_file.token.reveal() == "from-the-file-3c1e"
    assert from_env_file.token == from_file.token
    assert from_variable.token is not None and from_variable.token.reveal() == "from-the-variable"
    assert parse_config(spec, env={}).token is None
    assert "from-the-file" not in repr(from_file) + str(from_file)


@pytest.mark.parametrize(("content", "expected"), [
    pytest.param(b"", "is empty", id="empty"),
    pytest.param(b" \n\t\n", "is empty", id="blank"),
    pytest.param(b"x" * 5000, "more than 4096 bytes", id="oversized"),
    pytest.param(b"\xff\xfes3cr3t", "not UTF-8", id="not text"),
    pytest.param(None, "cannot read token file", id="missing"),
])
def test_a_bad_token_file_is_one_line_naming_the_file_not_its_content(
        tmp_path: Path, content: bytes | None, expected: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    token_file = tmp_path / "probe_token"
    if content is not None:
        token_file.write_bytes(content)
    assert main(["--slo", str(spec_file(tmp_path)), "--probe-token-file", str(token_file)]) == 2
    err = capsys.readouterr().err
    assert expected in err and str(token_file) in err and "Traceback" not in err, err
    assert "s3cr3t" not in err and "xxxx" not in err
