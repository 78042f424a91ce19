"""The measurement's plan, prompts and command line (the measurement itself needs vLLM on a GPU,
or ``--smoke`` on a CPU; see lab/README.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lab.gpu import budget_tables
from lab.gpu.budget_workload import H200, SMOKE, exact_prompt


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tokenizers import Tokenizer

    from governor.inference.engines.vllm.tiny_model import write_tiny_llama

    directory = write_tiny_llama(tmp_path_factory.mktemp("tiny"))
    return Tokenizer.from_file(str(directory / "tokenizer.json"))


@pytest.mark.parametrize("length", [1, 2, 32, 600, 1500])
def test_a_prompt_has_exactly_the_tokens_asked_for(tokenizer: Any, length: int) -> None:
    text = exact_prompt(tokenizer, length, seed=length)
    assert len(tokenizer.encode(text).ids) == length
    assert exact_prompt(tokenizer, length, seed=length) == text


def test_different_seeds_give_different_prompts(tokenizer: Any) -> None:
    assert exact_prompt(tokenizer, 128, seed=1) != exact_prompt(tokenizer, 128, seed=2)


def test_the_h200_plan_is_section_6s_setup() -> None:
    engine = dict(H200.engine)
    assert engine["max_model_len"] == 8192
    assert engine["max_num_seqs"] == 256
    assert engine["gpu_memory_utilization"] == 0.85
    assert engine["enable_prefix_caching"] is False
    assert H200.start_budget == 8192
    assert H200.budgets == (8192, 2048, 512)
    assert H200.workloads == ((2000, 4.0), (7000, 1.0))
    assert (H200.decoders, H200.window_seconds, H200.repetitions) == (64, 20.0, 3)
    assert H200.window_count() == 18


def test_the_smoke_plan_fits_the_tiny_model() -> None:
    engine = dict(SMOKE.engine)
    longest = max(length for length, _ in SMOKE.workloads) + SMOKE.long_output_tokens
    assert longest <= engine["max_model_len"]
    assert max(SMOKE.budgets) <= SMOKE.start_budget


def test_a_model_directory_without_a_config_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert budget_tables.main(["--model", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "has no config.json" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "argv",
    [[], ["--model", "m"], ["--model", "m", "--out", "o", "--deadline-seconds", "soon"]],
    ids=["nothing", "no --out", "a deadline that is not a number"],
)
def test_bad_arguments_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        budget_tables.main(argv)
    assert exit_info.value.code == 2
