"""vLLM version parsing and the support check."""

from __future__ import annotations

import pytest

from governor.inference.engines.vllm.version import VllmVersion, check_version, parse_version


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.32.0+cpu", VllmVersion(0, 32, 0, "+cpu")),
        ("0.25.0", VllmVersion(0, 25, 0)),
        ("0.33.1rc2", VllmVersion(0, 33, 1, "rc2")),
        ("0.34.0.dev12+gabcdef", VllmVersion(0, 34, 0, ".dev12+gabcdef")),
        ("v1.0", VllmVersion(1, 0, 0)),
    ],
)
def test_versions_parse(text: str, expected: VllmVersion) -> None:
    assert parse_version(text) == expected


@pytest.mark.parametrize("text", ["", "dev", "0", "latest-1.2"])
def test_garbage_is_not_a_version(text: str) -> None:
    with pytest.raises(ValueError, match="not a vLLM version"):
        parse_version(text)


def test_old_releases_are_refused_and_the_tested_ones_known() -> None:
    assert check_version(parse_version("0.8.5")) is not None
    assert "0.11.0" in (check_version(parse_version("0.10.2")) or "")
    assert check_version(parse_version("0.25.0")) is None
    assert parse_version("0.25.0").tested and parse_version("0.32.0+cpu").tested
    assert not parse_version("0.40.0").tested
    assert check_version(parse_version("0.40.0")) is None  # untested: allowed, with a warning
