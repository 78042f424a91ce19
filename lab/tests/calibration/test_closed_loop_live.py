"""The real-time closed loop: exact prompt lengths, vllm bench serve's figures, the service run."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from governor.bench.api import LoadResult, LoadSpec, RequestResult
from governor.inference.engines.sim.tokenizer import pieces
from lab.calibration.closed_loop import ClosedLoop
from lab.calibration.closed_loop_live import measure, prompts, random_prompt, row, sim_service


@pytest.mark.parametrize("tokens", [1, 7, 512])
def test_a_prompt_is_exactly_its_tokens_and_prompts_share_no_prefix(tokens: int) -> None:
    text = random_prompt(random.Random(3), tokens)
    assert len(pieces(text)) == tokens
    made = prompts(ClosedLoop(4, input_len=tokens, prompts_per_stream=2), seed=1)
    assert len(made) == 8 and len({p.split(" ")[0] for p in made}) == 8


def test_the_row_is_what_vllm_bench_serve_reports() -> None:
    loop = ClosedLoop(2, input_len=8, output_len=3, prompts_per_stream=1)
    spec = LoadSpec(url="http://x", model="m", requests=2, concurrency=2)
    results = [RequestResult(200, 0.0, 1.0, ttft=0.1, itls=[0.01, 0.02], tokens=3),
               RequestResult(200, 0.0, 1.0, ttft=0.3, itls=[0.03, 0.04], tokens=3)]
    figures = row(loop, LoadResult(spec, results, wall_seconds=2.0))
    assert figures.concurrency == 2
    assert figures.ttft_p50_ms == pytest.approx(200.0)
    assert figures.itl_p50_ms == pytest.approx(25.0)
    assert figures.output_tokens_per_second == pytest.approx(3.0)
    failed = [*results, RequestResult(503, 0.0, 0.1, error="busy")]
    with pytest.raises(RuntimeError, match="1 of 3 requests failed"):
        row(loop, LoadResult(spec, failed, wall_seconds=2.0))


@pytest.mark.integration
def test_a_short_closed_loop_against_the_real_service(tmp_path: Path) -> None:
    loop = ClosedLoop(3, input_len=64, output_len=12, prompts_per_stream=2)
    with sim_service("tiny", tmp_path / "sim.log") as url:
        figures = measure(url, "tiny", loop)
    assert figures.concurrency == 3
    assert 0 < figures.ttft_p50_ms <= figures.ttft_p99_ms
    assert 0 < figures.itl_p50_ms <= figures.itl_p99_ms
    # 6 requests of 12 tokens came back, at some rate.
    assert figures.output_tokens_per_second > 0
