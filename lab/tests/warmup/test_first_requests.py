"""The first-requests script's own pieces: prompts that fit their size in the model's tokens
and share no prefix, and the table that sets both runs side by side."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer

from governor.inference.engines.vllm.tiny_model import write_tiny_llama
from lab.warmup.first_requests import GPU, Timing, main, median_run, prompt, table


def test_each_prompt_fits_its_size_and_starts_with_its_own_word(tmp_path: Path) -> None:
    model = write_tiny_llama(tmp_path / "model")
    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    for size in (16, 256):
        texts = [prompt(tokenizer, index, size) for index in range(3)]
        lengths = [len(tokenizer.encode(text).ids) for text in texts]
        assert all(size // 2 < n <= size for n in lengths), lengths  # whole words only
        assert len({text.split()[0] for text in texts}) == 3


def test_the_table_sets_the_two_runs_side_by_side() -> None:
    off = (20.0, [Timing(0.5, 0.9), Timing(0.05, 0.2)])
    on = (25.0, [Timing(0.04, 0.15), Timing(0.05, 0.2)])
    lines = table(off, on).splitlines()
    assert lines[2] == "| 1 | 16 | 500.0 ms | 40.0 ms | 900.0 ms | 150.0 ms |"
    assert lines[3].startswith("| 2 | 256 | 50.0 ms | 50.0 ms |")
    assert lines[-1] == "| ready after | | 20.0 s | 25.0 s | | |"


def test_several_runs_make_one_of_medians_request_by_request() -> None:
    runs = [(10.0, [Timing(0.3, 1.0), Timing(0.1, 0.2)]),
            (30.0, [Timing(0.1, 0.5), Timing(0.2, 0.4)]),
            (20.0, [Timing(0.2, 0.7), Timing(0.9, 0.3)])]
    assert median_run(runs) == (20.0, [Timing(0.2, 0.7), Timing(0.2, 0.3)])


def test_the_gpu_run_needs_a_model_and_keeps_vllms_own_compilation(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--gpu"], env={})
    assert "--gpu needs --model" in capsys.readouterr().err
    # On the GPU what a warm-up saves is compilation and graph capture: eager mode would hide it.
    assert not any(arg.startswith("enforce_eager") for arg in GPU.engine_args)
    assert GPU.max_num_batched_tokens <= GPU.max_model_len
